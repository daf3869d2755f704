"""The worker that torchrun starts on every GPU (or CPU process): build -> train -> close.

The loop always tries to load first (a fresh start finds nothing), saves at the plan's interval,
and on a SIGTERM notice writes an emergency checkpoint and exits with PREEMPTED_EXIT, so resuming is
not a special path. Ranks agree on checkpoint and notice decisions at sync points, about twice a
second, with one small all-reduce.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from costsim.contract import notice as notice_rule
from costsim.contract.telemetry import read_events
from costsim.contract.timing import save_durations
from costsim.devices import plan_gpu_mismatch
from runner import (
    autotune_kept,
    checkpoint_reader,
    compile_share,
    faults,
    gcstart,
    graph_trees,
    inductor_bytecode,
    layout,
    precompile,
    prewarm,
    speed,
    warm_step,
)
from runner.checkpoint import Checkpointer, SharedStorageError
from runner.compile_share import CompileCacheShare
from runner.diskspace import DiskFullError, free_bytes, is_disk_full, quiet_disk_full_in_threads, refuse
from runner.plan import load_run_spec
from runner.state import (
    PRIVATE_PREFIX,
    apply_state,
    make_optimizer_state,
    rng_state,
    seed_rng,
    set_rng_state,
    state_sha256,
    training_state,
)
from runner.store import StoreError, checkpoint_place
from runner.telemetry import Telemetry, process_start_t
from runner.workloads import BuildContext, WorkloadOptionError, build_workload, check_options, lean_imports, resolve
from runner.workloads import preload as preload_workload

IMPORTED_T = time.time()

SYNC_TARGET_S = 0.5
EXIT_MARGIN_S = 5.0   # of a notice: kept for the exit after the save (teardown, telemetry)
PROGRESS_EVERY_S = 5.0


# Where a new CUDA-graph step begins (Inductor's graph trees): "auto", torch's own tracking (a new step once every
# pending backward ran), or "micro": marked at every micro-batch (torch.compiler.cudagraph_mark_step_begin), so
# that the blocks of one forward chain in one generation instead of each compiled call testing for a new one
# (under compile=blocks torch warns "Unable to hit fast path of CUDAGraphs because of pending, uninvoked backwards"
# at every start). The gradients (clear_grads) and the loss are held outside the graphs' memory, so nothing of
# an earlier micro-batch is read after its mark. On an H100 at 4 x 16 the marks silenced the warning and changed
# neither the step nor the restart's first step (data/measurements/2026-12-06-h100-graph-marks): a setting to
# measure with, not the default.
GRAPH_STEPS_ENV = "COSTSIM_GRAPH_STEPS"
GRAPH_STEPS = ("auto", "micro")


def graph_steps(env=os.environ) -> str:
    """COSTSIM_GRAPH_STEPS's value (GRAPH_STEPS)."""
    text = env.get(GRAPH_STEPS_ENV, GRAPH_STEPS[0])
    if text not in GRAPH_STEPS:
        raise speed.RuntimeConfigError(f"{GRAPH_STEPS_ENV}={text!r}: expected auto (torch's own, the default) or "
                                       "micro (a new CUDA-graph step at every micro-batch)")
    return text


def clear_grads(optimizer, in_place: bool, make: bool = False) -> None:
    """The optimizer's gradients cleared for a step: dropped (None), or with `in_place` zeroed where they are, and with
    `make` every missing one made as zeros first.

    In place under DDP: its gradients are views of its all-reduce buckets after the first step (gradient_as_bucket_view),
    and dropping them each step made every step's first backward allocate them again beside the buckets, then copy
    them in. SDXL on one H100 at 4 x 16 in DDP at one process peaked 10.3 GB (the gradients' size) above the same
    without DDP, 83.2 GB against 72.9; zeroed in place they stay views and accumulate there, and DDP's peak is the
    bare model's, 72.9 GB (data/measurements/2026-12-06-h100-ddp-memory).

    Made, under CUDA graphs with accumulation: a backward replayed as a CUDA graph returns its gradients in the graph's
    own memory, a parameter without a gradient takes that tensor as its gradient, and the next micro-batch's replay
    overwrites it before it is added to (torch stops: "accessing tensor output of CUDAGraphs that has been overwritten
    by a subsequent run"; 2026-12-06 on an H100 at 4 x 16). Gradients that exist are added to in place, so each
    replay's are read before the next. The cost: the gradients (4 bytes a parameter) stay allocated beside the graph's
    outputs. Under DDP none is missing: they are views of its buckets from the wrap (grads_for_buckets)."""
    optimizer.zero_grad(set_to_none=not in_place)
    if make:
        _zero_missing(p for group in optimizer.param_groups for p in group["params"])


def _zero_missing(params) -> None:
    """A zero gradient for each trainable parameter that has none."""
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


def grads_for_buckets(model: torch.nn.Module) -> None:
    """Every trainable parameter given a zero gradient before DDP wraps the model, so that DDP makes them views of its
    buckets at the wrap (gradient_as_bucket_view: it copies a gradient that exists into its bucket and points the
    gradient there) and the first step's backward accumulates into the buckets.

    Without it a life's first step allocates the gradients beside the buckets (DDP points them at the buckets only at
    that step's all-reduce). A fresh job's first step has no optimizer state yet (AdamW makes it at that step), so
    that stays below the steady steps' peak; a resumed life loads its optimizer state before the first step, and
    there it is the gradients' size above it, 10.3 GB a GPU for SDXL. The zeros cost that much for a moment at the
    wrap, before the optimizer state or any activation exists."""
    _zero_missing(model.parameters())


class Trainer:
    def __init__(self, args, spec, rank: int, world_size: int, local_rank: int,
                 marks: dict[str, float] | None = None, ddp: bool = False):
        """`ddp`: wrap the model in DDP even in one process (a benchmark's way to run DDP's hooks, buckets and
        all-reduce where there is one GPU: scripts/bench_sdxl.py runner --ddp); with several it always is."""
        marks = {} if marks is None else marks   # when each part of the start ended (telemetry)
        self.spec, self.rank, self.world_size = spec, rank, world_size
        self.device = torch.device("cpu") if spec.cpu else torch.device("cuda", local_rank)
        self.total_steps = spec.total_steps
        self.telemetry = Telemetry(Path(args.run_dir), args.run_id, rank, world_size)
        self.fault = faults.decode(args.fault)
        self.final_save = spec.final_save
        self.leaving = False   # on a notice (stop_for_notice)
        self.runtime = spec.runtime
        speed.check_device(self.runtime, self.device)
        # Rank 0 starts checking the newest checkpoint's checksums now, while the model builds.
        root, store = checkpoint_place(Path(args.run_dir), spec.checkpoint_location)
        self.checkpointer = Checkpointer(root, keep=spec.keep, async_mode=spec.async_checkpoint, rank=rank,
                                         on_event=self.telemetry.event, warn=self.warn, store=store,
                                         estimate_bytes=int(spec.checkpoint_bytes), run_dir=Path(args.run_dir))
        marks["checkpointer"] = time.time()
        self.compile_share = self._compile_share(store, local_rank)
        # The plan's micro-batch on this many processes, accumulation for the rest: recomputed at
        # every (re)start, so an elastic shrink or a smaller node keeps the global batch and the memory.
        self.split = spec.split(world_size)
        self.accumulation = self.split.accumulation
        if self.device.type == "cuda" and (other := plan_gpu_mismatch(spec.gpu, speed.device_name(self.device))):
            self.warn(other)
        self.agree_within, self.abandoned_micro_batches = False, 0   # train_step: a notice between micro-batches
        marked = graph_steps() == "micro"   # a bad value stops any start, graphs or not
        self.mark_graph_steps = self.runtime.cuda_graphs and marked
        ctx = BuildContext(rank=rank, world_size=world_size, device=self.device, micro_batch=self.split.micro_batch,
                           accumulation=self.accumulation, seed=spec.seed, precision=spec.precision,
                           options=dict(spec.options), total_steps=spec.total_steps)
        builder = resolve(spec.model, spec.workload_entry)
        check_options(builder, spec.workload_entry or spec.model, ctx.options, values=False)
        # With a checkpoint on the disk (or a store to fetch one from), one will most likely be loaded over
        # the model: the builder may leave out the initial values (an SDXL UNet's take seconds to draw).
        restoring = bool(self.checkpointer.steps()) or store is not None
        with lean_imports(builder):
            built = build_workload(builder, replace(ctx, restoring=restoring))
        marks["build"] = time.time()
        self.resume_step = self.checkpointer.agree_on_step()   # waits for rank 0's check of the checkpoint
        marks["agree"] = time.time()
        build_kind = "empty" if built.empty else "initialised"
        if built.empty and not self.resume_step:   # none loads after all (all damaged): build it initialised
            if built.close is not None:
                built.close()
            del built
            with lean_imports(builder):
                built = build_workload(builder, ctx)
            build_kind = "empty, then initialised (no checkpoint to load)"
            marks["rebuild"] = time.time()
        self.built = built
        speed.configure_backends(self.runtime)
        compiled = speed.prepare_model(built.model, self.runtime, warn=self.warn)
        self.compiled = bool(compiled)
        if self.compile_share is None:   # the node's own compile cache: its saved model loads from now
            self.start_preload()
        # One process has nothing to all-reduce: DDP's gradient hooks and buckets would only cost time
        # and memory. The checkpoint's names are the same either way.
        self.ddp_buckets: str | None = None   # how DDP's buckets were made (speed.configure_ddp); None without DDP
        if world_size == 1 and not ddp:
            self.model = built.model
        else:
            grads_for_buckets(built.model)
            self.model = DistributedDataParallel(built.model, device_ids=None if spec.cpu else [local_rank],
                                                 gradient_as_bucket_view=True, bucket_cap_mb=self.runtime.ddp_bucket_mb)
            self.ddp_buckets = speed.configure_ddp(self.model, self.runtime)
        marks["wrap"] = time.time()
        self.telemetry.event("runtime", settings=self.runtime.as_dict(), device=speed.device_name(self.device),
                             compiled_modules=compiled,
                             fp8_layers=speed.fp8_layers(built.model),
                             compile_cache_bytes=speed.cache_bytes(), build=build_kind, ddp_buckets=self.ddp_buckets,
                             **self.split.as_dict(),
                             nodes=max(1, world_size // int(os.environ.get("LOCAL_WORLD_SIZE", world_size))),
                             checked_by=self.checkpointer.checked_by or None, **start_phases(marks))
        self.notice = faults.NoticeFlag()
        self.earlier_saves = earlier_saves(Path(args.run_dir)) if rank == 0 else {}
        self.garbage = speed.GarbageCollection(self.runtime.gc_every)
        self.step = 0
        self.saved_step = 0   # the newest checkpoint this life loaded or started to save
        self.last_loss: torch.Tensor | None = None   # the last step's loss on this rank, kept on the device
        self.warm_batch: tuple[range, object] | None = None   # the warm step's micro-batch (runner.warm_step)

    def _compile_share(self, store, local_rank: int) -> CompileCacheShare | None:
        """torch.compile's caches through the store (runner.compile_share), when the run shares them: each
        node's local rank 0 starts fetching them now (an empty cache only), while the model builds."""
        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        if store is None or not compile_share.enabled() or self.runtime.compile == "off" or not cache:
            return None
        share = CompileCacheShare(store, Path(cache),
                                  compile_share.cache_key(torch.__version__, speed.device_name(self.device)),
                                  on_event=self.telemetry.event, warn=self.warn)
        if local_rank == 0:
            share.start_fetch()
        return share

    def warn(self, message: str) -> None:
        if self.rank == 0:
            print(f"runner: warning: {message}", file=sys.stderr, flush=True)

    def state(self) -> dict:
        return training_state(self.model, self.built.optimizer, self.built.scheduler, self.step, self.rank,
                              self.built.state)

    def restore(self, warming: warm_step.WarmStep | None = None) -> None:
        """Load the agreed checkpoint, if any; `warming` (runner.warm_step), the first micro-batch's forward
        running beside the read, is joined before the loaded state (the random state with it) is applied."""
        step = self.resume_step
        if step:
            try:
                if warming is not None and warm_step.mode() == "restore":
                    warming.start(at="restore")
                sizing = time.monotonic()
                make_optimizer_state(self.built.optimizer)   # made directly (training_state finds them kept)
                optimizer_s = time.monotonic() - sizing
                state = self.state()
                sized_s = time.monotonic() - sizing
                if checkpoint_reader.buffers_when() == "sized":
                    checkpoint_reader.reserve_buffers()
                own_rng = f"{PRIVATE_PREFIX}{self.rank}"
                if not self.checkpointer.has_entry(step, own_rng):
                    # Saved by fewer processes than now: this rank had no random state then. The data
                    # is a function of the sample index, so a seeded state changes no sample.
                    del state[own_rng]
                if self.checkpointer.has_entry(step, "optim.state") and not state["optim"].get("state"):
                    # The read fills only the entries asked for: without these it would leave the optimizer
                    # fresh, silently (a first step then moves every parameter by the learning rate).
                    raise WorkloadOptionError(
                        f"the checkpoint of step {step} holds optimizer state, and this process's "
                        f"{type(self.built.optimizer).__name__} made no place for it (runner.state."
                        "make_optimizer_state): resuming would start the optimizer afresh")
                for name in self.built.state:
                    if not self.checkpointer.has_entry(step, name):
                        raise WorkloadOptionError(f"the checkpoint of step {step} has no {name!r} state (saved by a "
                                                  f"run without it): resume with the options it ran with, or start a "
                                                  "new run folder")
                # the warm step starts once what is left of the read holds the interpreter lock little
                self.checkpointer.load(step, state, prepared=warming.start if warming is not None else None,
                                       sized_s=sized_s, sized_optimizer_s=optimizer_s)
            finally:
                if warming is not None:
                    self.finish_warm_step(warming.join(), step)
                    warming = None
            self.step = apply_state(state, self.model, self.built.optimizer, self.built.scheduler, self.rank)
            self.saved_step = self.step
            if own_rng not in state:
                seed_rng(self.spec.seed, self.rank, self.step)

    def train_step(self) -> bool:
        """One optimizer step over `accumulation` micro-batches. With `agree_within` (steps longer than the
        agreement period), the ranks agree before each micro-batch after the first whether a notice came:
        if one did, the step is abandoned as if it had not begun (its gradients dropped, the random state
        put back, nothing applied) and False returned, so the notice's save starts within a micro-batch
        instead of a whole step."""
        built, model = self.built, self.model
        make_grads = self.runtime.cuda_graphs and self.accumulation > 1   # clear_grads says why
        in_place = make_grads or isinstance(model, DistributedDataParallel)
        clear_grads(built.optimizer, in_place=in_place, make=make_grads)
        autocast = (torch.autocast(self.device.type, dtype=built.autocast_dtype) if built.autocast_dtype
                    else contextlib.nullcontext())
        rng = rng_state() if self.agree_within else None
        total = None
        for micro in range(self.accumulation):
            if rng is not None and micro > 0 and self.notice_agreed():
                clear_grads(built.optimizer, in_place=in_place, make=make_grads)
                set_rng_state(rng)
                self.abandoned_micro_batches = micro
                return False
            sync = micro == self.accumulation - 1
            no_sync = (model.no_sync() if isinstance(model, DistributedDataParallel) and not sync
                       else contextlib.nullcontext())
            if self.mark_graph_steps:
                torch.compiler.cudagraph_mark_step_begin()
            with autocast, speed.attention(self.runtime), no_sync:
                loss = built.loss(model, self.batch(self.split.indices(self.step, self.rank, micro))) / self.accumulation
            loss.backward()
            total = loss.detach() if total is None else total + loss.detach()   # no host sync
        self.last_loss = total
        built.optimizer.step()
        if built.scheduler is not None:
            built.scheduler.step()
        if built.after_step is not None:
            built.after_step(self.step + 1)
        return True

    def batch(self, indices: range):
        """The micro-batch of these samples: the warm step's, once, when it ran on them (runner.warm_step)."""
        if self.warm_batch is not None:
            kept, self.warm_batch = self.warm_batch, None
            if kept[0] == indices:
                return kept[1]
        return self.built.batch(indices)

    def make_warm_step(self, step: int) -> warm_step.WarmStep | None:
        """The forward of `step`'s first micro-batch, to run on a thread beside the checkpoint's read
        (runner.warm_step; restore() starts it); None for a model with buffers (a forward may update them, e.g.
        batch norm's running statistics, under the read)."""
        built, model, runtime = self.built, self.model, self.runtime
        if next(built.model.buffers(), None) is not None:
            return None
        indices = self.split.indices(step, self.rank, 0)
        ddp = model if isinstance(model, DistributedDataParallel) else None

        def run():
            autocast = (torch.autocast(self.device.type, dtype=built.autocast_dtype) if built.autocast_dtype
                        else contextlib.nullcontext())
            with autocast, speed.attention(runtime):
                data = built.batch(indices)
                with warm_step.inside_ddp(ddp):
                    built.loss(built.model, data)   # its graph (and the activations it saved) go with it
            return indices, data
        return warm_step.WarmStep(run)

    def finish_warm_step(self, warming: warm_step.WarmStep, step: int) -> None:
        """What the warm step left: its batch, kept for the first step; the event."""
        if warming.batch is not None:
            self.warm_batch = warming.batch
        if warming.error:
            self.warn(f"the first micro-batch's forward beside the checkpoint's read failed ({warming.error}); the "
                      "first step compiles as without it")
        if self.rank == 0:   # with what it compiled: the first step's compile event shows what it added
            self.telemetry.event("warm_step", step=step, **warming.report(),
                                 counters=speed.compile_report()["counters"])

    def agree(self, checkpoint_due: bool, next_sync: int, within: bool) -> tuple[bool, bool, int]:
        """One all-reduce (MAX): checkpoint due (rank 0's clock), notice seen anywhere, next sync step, and
        whether to agree on a notice between micro-batches too (rank 0's: its steps outlast SYNC_TARGET_S).

        It runs on the default group (its gloo side for this CPU tensor), never on the checkpointer's
        group: an async save's background thread may be in a collective there, and two threads'
        collectives on one group deadlock.
        """
        flags = torch.tensor([int(checkpoint_due), int(self.notice.requested), next_sync, int(within)],
                             dtype=torch.int64)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        self.agree_within = bool(flags[3]) and self.accumulation > 1
        return bool(flags[0]), bool(flags[1]), int(flags[2])

    def notice_agreed(self) -> bool:
        """A notice seen on any rank (one small all-reduce on the default group, as agree())."""
        if self.world_size == 1:
            return self.notice.requested
        flag = torch.tensor([int(self.notice.requested)], dtype=torch.int64)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag[0])

    def start_preload(self) -> None:
        """runtime.precompile: this model's saved compiled files loaded on a thread from now, beside the checkpoint's
        read, for the first step to take (runner.precompile)."""
        enabled = precompile.preload_enabled()   # a bad value stops any start
        saved = precompile.installed(self.built.model) if self.runtime.precompile else None
        if saved is not None and enabled:
            saved.preload(self.device)

    def start_prewarm(self) -> prewarm.Prewarm | None:
        """The modules earlier starts' first steps imported, imported on a thread from now (runner.prewarm)."""
        path = prewarm.imports_file() if self.compiled and prewarm.enabled() else None
        names = prewarm.read_names(path) if path else []
        return prewarm.Prewarm(names).start() if names else None

    def wait_compile_cache(self) -> None:
        """Every rank compiles from the node's cache once it is in place (a new node's, fetched)."""
        if self.compile_share is not None:
            self.compile_share.wait_fetch()
            if self.world_size > 1:
                dist.barrier()

    def train(self) -> int:
        # A resume of a compiled model runs its first micro-batch's forward beside the checkpoint's read
        # (runner.warm_step), from the node's compile cache; otherwise the recorded imports are imported there
        # (runner.prewarm).
        buffers_when = checkpoint_reader.buffers_when()   # a bad value stops any start
        if self.resume_step and buffers_when == "ahead":
            checkpoint_reader.reserve_buffers()   # page-locked while the state is sized and the read planned
        # Not under CUDA graphs: Inductor's graph trees live per thread, so a forward on another thread cannot warm
        # them (torch 2.11's fail there, their thread-local state being the importing thread's: pytorch/pytorch
        # #123177, fixed by #184357 in a later torch), and one that made a tree of its own would hold a second
        # memory pool beside the step's.
        want_warm = (warm_step.enabled() and bool(self.resume_step) and self.compiled   # a bad value stops any start
                     and not self.runtime.cuda_graphs)
        if want_warm:
            self.wait_compile_cache()
            self.start_preload()   # a new node's saved model, in place now (on the node's own, started already)
        warm = self.make_warm_step(self.resume_step) if want_warm else None
        warming = None if warm else self.start_prewarm()
        self.restore(warm)
        if not want_warm and self.compile_share is not None:
            self.wait_compile_cache()
            warming = warming or self.start_prewarm()   # a new node's list came with the cache
            self.start_preload()   # and its saved model
        if warming:
            warming.wait()   # no import on another thread while the first step traces (runner.prewarm)
        record_imports = (prewarm.imports_file() if self.rank == 0 and self.compiled and prewarm.enabled()
                          and self.step > 0 and warming is None and warm is None else None)   # a resume's own imports
        modules_before = set(sys.modules) if record_imports else set()
        self.telemetry.event("start", step=self.step, total_steps=self.total_steps, pid=os.getpid(),
                             node=int(os.environ.get("GROUP_RANK", 0)), global_batch=self.spec.global_batch)
        spec, started = self.spec, time.monotonic()
        last_checkpoint, last_step_end, last_progress = time.monotonic(), time.monotonic(), time.monotonic()
        next_sync, first_step, first_end = self.step + 1, self.step, time.monotonic()
        profile_to = os.environ.get(speed.PROFILE_FIRST_STEP_ENV) if self.rank == 0 else None   # a diagnostic
        while self.step < self.total_steps:
            if self.fault and self.step == self.fault.step:
                self.telemetry.event("preempted", step=self.step, kind=f"injected-{self.fault.kind}")
                self.telemetry.flush(durable=True)
                faults.fire(self.fault, local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
                self.fault = None
            if profile_to and self.step in (first_step, first_step + 1):   # the first step, and a steady one
                which = "the first step" if self.step == first_step else "the steady step"
                dump = f"{profile_to}.{os.getpid()}.{self.step + 1}.prof"   # a life's own: a resume may redo a step
                with speed.profiled(profile_to, f"run {self.telemetry.base['run']}: {which} after step {self.step} "
                                    f"({dump})", dump=dump):
                    stepped = self.train_step()
            else:
                stepped = self.train_step()
            if not stepped:   # a notice between micro-batches: the step is abandoned
                return self.stop_for_notice(self.steady_step_s(started, first_step, first_end))
            self.step += 1
            self.garbage.step(self.step)
            now = time.monotonic()
            if self.step == first_step + 1:   # the optimizer's state now exists: size the staging buffers
                self.checkpointer.prepare(self.state())
                self.checkpointer.make_room_ahead()   # what the next save would remove, removed from now
                first_end = now
                compiled = speed.compile_report() if self.rank == 0 and self.compiled else None
                if compiled is not None:   # what compiling cost this start (a warm cache too)
                    if self.runtime.precompile:   # the saved model's load, or its compile and save
                        compiled["precompiled"] = precompile.events(self.built.model)
                    if self.runtime.cuda_graphs:
                        compiled.update(graph_trees.report())
                    compiled.update(inductor_bytecode.report())
                    compiled.update(autotune_kept.report())
                    if os.environ.get(speed.AUTOTUNE_REPORT_ENV) == "1" and self.device.type == "cuda":
                        try:   # a diagnostic: torch's internals it reads differ by version, and it never stops a run
                            compiled["autotune"] = speed.autotune_report()
                        except Exception as exc:   # noqa: BLE001
                            compiled["autotune"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                    self.telemetry.event("compile", step=self.step, **compiled)
                if record_imports and compiled is not None and not any("miss" in k for k in compiled["counters"]):
                    # what this first step imported, for the next start to import early; a step that
                    # compiled imported the compiler too, more than a start from a warm cache needs
                    self.telemetry.event("prewarm", step=self.step,
                                         recorded=prewarm.record(record_imports, modules_before))
                elif warming and self.rank == 0:
                    self.telemetry.event("prewarm", step=self.step, **warming.report())
                if self.rank == 0 and self.compile_share is not None:   # for the job's next node, if it compiled
                    self.compile_share.start_upload()
                settled = self.garbage.settle()   # the start's objects frozen, automatic collection back on
                if settled is not None and self.rank == 0:
                    self.telemetry.event("gc_settle", step=self.step, **settled)
            if self.rank == 0:
                self.telemetry.event("step", buffered=True, step=self.step, step_time_s=now - last_step_end,
                                     samples=spec.global_batch)
            last_step_end = now
            every = self.built.validate_every   # 0: only at the end
            if self.built.validate and every and self.step % every == 0 and self.step < self.total_steps:
                self.validate()
                last_step_end = time.monotonic()   # a step's time is training's only
            by_steps = spec.interval_steps is not None and self.step % spec.interval_steps == 0
            if self.step >= next_sync or by_steps:
                due = by_steps or (spec.interval_s is not None and now - last_checkpoint >= spec.interval_s)
                rate = (now - started) / max(self.step - first_step, 1)
                proposal = self.step + max(1, int(SYNC_TARGET_S / max(rate, 1e-6))) if self.rank == 0 else 0
                steady = self.steady_step_s(started, first_step, first_end)
                due, notice, next_sync = self.agree(due, proposal, within=self.rank == 0 and steady > SYNC_TARGET_S)
                if notice:
                    return self.stop_for_notice(steady)
                if due and self.step < self.total_steps:
                    self.checkpointer.save(self.step, self.state())
                    self.saved_step = self.step
                    last_checkpoint = time.monotonic()
            if self.rank == 0 and now - last_progress >= PROGRESS_EVERY_S:
                self.progress(started, first_step)
                last_progress = now
        return self.finish(started)

    def validate(self) -> None:
        """The held-out loss of the live weights, averaged over every rank's share (one all-reduce).
        Eager even when the model is compiled: a no-grad forward at another batch size would otherwise
        compile new graphs (minutes for the whole SDXL UNet) for a few seconds of work."""
        validate = self.built.validate
        if validate is None:
            return
        started = time.monotonic()
        with torch.compiler.set_stance("force_eager"):
            total = validate(self.built.model).detach().float().cpu()
        if self.world_size > 1:
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
        if self.rank == 0:
            loss = float(total[0] / total[1])
            self.telemetry.event("validation", step=self.step, loss=loss, samples=int(total[1]),
                                 duration_s=time.monotonic() - started)
            print(f"runner: step {self.step} validation loss {loss:.5g} ({int(total[1])} held-out samples)",
                  file=sys.stderr, flush=True)

    def steady_step_s(self, started: float, first_step: int, first_end: float) -> float:
        """The step time after this start's first step (its compile and warm-up are not redone)."""
        now, done = time.monotonic(), self.step - first_step
        if done > 1:
            return (now - first_end) / (done - 1)
        return (now - started) / max(done, 1)

    def stop_for_notice(self, step_s: float) -> int:
        """The notice: save now or let the newest checkpoint (or the one being written) stand, by the rule
        the planner prices (costsim.contract.notice); rank 0 decides for all. Exits PREEMPTED_EXIT."""
        stopped_t = time.time()   # training has stopped: what follows is the notice's own cost
        self.leaving = True   # close() does not wait for removals started ahead (the next start finishes them)
        choice, figures = self.notice_choice(step_s)
        flag = torch.tensor([int(choice.save) if self.rank == 0 else 0], dtype=torch.int64)
        if self.world_size > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)   # the default group, as agree(): never the writer's
        if bool(flag.item()):
            self.checkpointer.save(self.step, self.state(), blocking=True, reason="notice")
        else:
            self.checkpointer.wait(hurry=True)   # the write in flight lands (the next life resumes from it)
        decided = {}   # rank 0's: the decision all ranks carried out, and what it weighed
        if self.rank == 0:
            print(f"runner: notice at step {self.step}: {choice.action}: {choice.reason}", file=sys.stderr, flush=True)
            decided = {"decision": choice.action, "reason": choice.reason, **figures}
        self.telemetry.event("preempted", step=self.step, kind="notice",
                             emergency_checkpoint=self.step if bool(flag.item()) else None,
                             abandoned_micro_batches=self.abandoned_micro_batches, stopped_t=stopped_t, **decided)
        return faults.PREEMPTED_EXIT

    def notice_choice(self, step_s: float) -> tuple[notice_rule.NoticeChoice, dict]:
        """This rank's view of the notice rule's inputs: the work since the newest checkpoint (the one in
        flight counts), what a save and the rest of the write take (this process's own measurements, else
        the job's earlier lives', else the plan's figure), and the plan's notice less what has passed since
        it came and a margin to exit."""
        measured, earlier = self.checkpointer.measured_s, self.earlier_saves
        save_s = (measured.get("save") or measured.get("write") or earlier.get("save") or earlier.get("write")
                  or self.spec.planned_save_s or 0.0)
        # A disk without room for one more checkpoint: the save first removes the oldest (10 s for 30.8 GB on
        # the H200 host's disk), measured like the saves; before any removal is, as long as a save.
        room_s = self.checkpointer.removals_before_next_save() * (measured.get("remove") or earlier.get("remove")
                                                                   or save_s)
        flight = self.checkpointer.in_flight()
        base, wait_s = self.saved_step, 0.0
        if flight is not None:
            base = flight[0]
            wait_s = max(0.0, (measured.get("write") or earlier.get("write") or save_s) - flight[1])
        save_s += room_s
        left_s = math.inf
        if self.spec.notice_s is not None:
            left_s = self.spec.notice_s - (time.monotonic() - (self.notice.at or time.monotonic())) - EXIT_MARGIN_S
        redo_s = max(0, self.step - base) * step_s
        figures = {"redo_s": round(redo_s, 3), "save_s": round(save_s, 3), "room_s": round(room_s, 3),
                   "wait_s": round(wait_s, 3),
                   "left_s": None if math.isinf(left_s) else round(left_s, 3)}
        return notice_rule.decide(redo_s=redo_s, save_s=save_s, wait_s=wait_s, left_s=left_s,
                                  mode=self.spec.notice_save), figures

    def mean_loss(self) -> float | None:
        """The last step's loss averaged over ranks and micro-batches (one all-reduce)."""
        if self.last_loss is None:
            return None
        total = self.last_loss.detach().float().reshape(1).clone()   # all_reduce works in place
        if self.world_size > 1:
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return float(total.item()) / self.world_size

    def finish(self, started: float) -> int:
        final_loss = self.mean_loss()
        digest = None   # hashing 30 GB of state takes tens of seconds: only for a state that is kept
        if self.built.validate:
            self.validate()
        if self.final_save:
            self.checkpointer.save(self.step, self.state(), blocking=True, reason="final")
            digest = state_sha256(self.model, self.built.optimizer)
            if self.built.export is not None and self.rank == 0:
                self.export()
        if self.compile_share is not None:   # a job that ends: its upload completes (a notice does not wait)
            self.compile_share.wait_upload()
        if self.rank == 0:
            self.telemetry.event("end", step=self.step, final_state_sha256=digest, final_loss=final_loss,
                                 samples=self.step * self.spec.global_batch, wall_s=time.monotonic() - started,
                                 gc_collections=self.garbage.collections, gc_s=round(self.garbage.seconds, 4),
                                 **speed.memory_report(self.device))
            self.progress(started, 0)
        return 0

    def export(self) -> None:
        """The workload's trained model into RUN/final, atomically: written to a temporary folder,
        fsynced, then renamed over any earlier export."""
        export = self.built.export
        if export is None:
            return
        started = time.monotonic()
        final = Path(self.telemetry.path.parent) / layout.FINAL
        needed = sum(p.numel() * p.element_size() for p in self.built.model.parameters())
        if _same_disk(final.parent, self.checkpointer.root):   # old checkpoints may make room, never the newest
            self.checkpointer.make_room(needed, f"the export {final}", collective=False)   # rank 0 alone
        elif free_bytes(final.parent) < needed:
            raise refuse(final.parent, f"the export {final}", needed, free_bytes(final.parent),
                         "free the run folder's disk, or give --run-dir on a larger one")
        try:
            written = layout.write_folder_atomic(final, export)
        except BaseException as exc:
            full = is_disk_full(exc, final.parent, needed)
            shutil.rmtree(final.with_name(f".{final.name}.tmp"), ignore_errors=True)   # nothing half-written stays
            if full:
                raise refuse(final.parent, f"the export {final} (the disk filled while it was written)", needed,
                             free_bytes(final.parent), "the final checkpoint is kept; free the disk and run "
                             "`runner execute` again to export it") from exc
            raise
        self.telemetry.event("export", step=self.step, path=str(final), bytes=written,
                             duration_s=time.monotonic() - started)
        print(f"runner: wrote the trained model to {final} ({written / 1e9:.2f} GB)", file=sys.stderr, flush=True)

    def progress(self, started: float, first_step: int) -> None:
        # the loss first: its read waits for the device (one sync every few seconds), so the rate is of the steps
        # the GPU has done, not of those the host has queued (measured after the queuing, an H100's line showed
        # 22.8 samples/s where the bench timed 16.3 over the same ten steps: 2026-12-06-h100-cuda-graphs)
        loss = float(self.last_loss.item()) if self.last_loss is not None else None
        elapsed = time.monotonic() - started
        done = self.step - first_step
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (self.total_steps - self.step) / rate if rate > 0 else float("inf")
        saved = self.checkpointer.steps()
        memory = speed.memory_report(self.device)
        self.telemetry.event("progress", step=self.step, loss_rank0=loss, **memory)
        shown = f"  loss {loss:.4g}" if loss is not None else ""
        if memory:
            shown += f"  peak {memory['peak_reserved_gb']:.1f} GB reserved"
        print(f"runner: step {self.step}/{self.total_steps}  {rate:.2f} steps/s  {rate * self.spec.global_batch:.1f} "
              f"samples/s  ETA {eta:.0f}s{shown}  last checkpoint {saved[0] if saved else 'none'}",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.built.close is not None:
            self.built.close()
        self.garbage.close()
        self.checkpointer.close(finish_removals=not self.leaving)
        self.telemetry.close()


def earlier_saves(run_dir: Path) -> dict[str, float]:
    """The median blocking save ("save"), async write ("write") and removal of a checkpoint to make room
    ("remove") of the job's earlier lives in this run folder: what a notice weighs before this process has
    measured its own."""
    events = read_events(run_dir)
    blocking, writes = save_durations(events)
    removals = [float(e["duration_s"]) for e in events if e.get("event") == "checkpoint_removed"
                and e.get("rank") == 0 and isinstance(e.get("duration_s"), (int, float))]
    return {name: statistics.median(values)
            for name, values in (("save", blocking), ("write", writes), ("remove", removals)) if values}


def start_phases(marks: dict[str, float]) -> dict:
    """The worker's start, phase by phase: seconds each took (the first from the process's start)."""
    names = list(marks)
    phases = {name: round(marks[name] - marks[before], 3) for before, name in zip(names, names[1:])}
    return {"process_start_t": marks.get("process"), "start_phases_s": phases}


def parse(argv: list[str] | None):
    parser = argparse.ArgumentParser(description="runner worker (started by torchrun; use `runner execute`)")
    parser.add_argument("--plan", required=True, help="the run folder's effective plan (runner.plan.effective_plan)")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--fault", help="this attempt's drill fault, e.g. kill@30")
    return parser.parse_args(argv)


def preload(argv: list[str]) -> list[str]:
    """For torchrun's agent before it forks the workers (runner.torchrun): the plan's workload's declared
    imports (`runner.workloads.preload`), so that each forked worker begins with them; the modules imported.
    Nothing where the plan or its workload does not load: the workers then meet that and report it."""
    try:
        spec = load_run_spec(parse(argv).plan)
        builder = resolve(spec.model, spec.workload_entry)
    except (Exception, SystemExit):   # the workers' own start says what is wrong, in the run's telemetry
        return []
    return preload_workload(builder)


def main(argv: list[str] | None = None, *, forked: bool = False) -> None:
    """A worker; `forked`: forked from torchrun's agent after its imports (runner.torchrun), which then took none."""
    started = process_start_t()
    gcstart.freeze()   # what the imports made lives as long as the process (runner.worker paused the collector)
    faults.die_with_parent()
    imported = (started or time.time()) if forked else IMPORTED_T
    marks = {"process": started, "imports": imported} if started else {"imports": imported}
    args = parse(argv)
    spec = load_run_spec(args.plan)
    quiet_disk_full_in_threads()
    backend = "gloo" if spec.cpu else "cpu:gloo,cuda:nccl"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if not spec.cpu and local_rank < torch.cuda.device_count():   # else the Trainer's check says so, in one line
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend)
    marks["process_group"] = time.time()
    rank, world_size = dist.get_rank(), dist.get_world_size()

    def fatal(reason: str, kind: str = "configuration", **figures) -> None:
        Telemetry(Path(args.run_dir), args.run_id, rank, world_size).event("fatal", kind=kind, reason=reason, **figures)

    trainer = None
    try:
        trainer = Trainer(args, spec, rank, world_size, local_rank, marks)
        code = trainer.train()
    except (SharedStorageError, StoreError, speed.RuntimeConfigError, WorkloadOptionError) as exc:
        fatal(str(exc))   # the supervisor prints it, once for all ranks
        code = faults.FATAL_EXIT
    except DiskFullError as exc:   # restarting would fill the disk again: one line, no restart
        fatal(str(exc), kind="disk")
        code = faults.FATAL_EXIT
    except torch.OutOfMemoryError:
        # Not a preemption: the same start would run out again. The supervisor prints the one line.
        split = spec.split(world_size)
        fatal(out_of_memory_message(split.micro_batch, rank, spec), kind="out_of_memory", **split.as_dict())
        code = faults.FATAL_EXIT
    finally:
        if trainer is not None:
            trainer.close()
    if code == faults.PREEMPTED_EXIT:
        # The node is being reclaimed and the checkpoint decided on is durable (close() waited for it, the
        # telemetry is flushed): every second to the exit counts against the notice. The process group's and
        # the interpreter's teardown (freeing the device's and the pinned host memory one object at a time)
        # only cost time here; the operating system frees it all at once.
        faults.leave(code)
    dist.destroy_process_group()
    sys.exit(code)


def out_of_memory_message(micro_batch: int, rank: int, spec) -> str:
    """One line: where memory ran out, the GPU's memory, and what to try."""
    where = "the CPU"
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory / 2**30
        peak = torch.cuda.max_memory_reserved(index) / 2**30
        where = f"GPU {index} ({torch.cuda.get_device_name(index)}, {total:.1f} GiB, {peak:.1f} GiB reserved at the peak)"
    return (f"out of memory on rank {rank}, {where}, at {micro_batch} samples per micro-batch per GPU "
            f"(global batch {spec.global_batch}): try --runtime activation_checkpointing=true, a plan with a "
            "smaller per_gpu_batch (a profile's max_batch_per_gpu), or more GPUs")



def _same_disk(a: Path, b: Path) -> bool:
    """Whether two folders are on one filesystem (their nearest existing folders' devices)."""
    def device(path: Path) -> int:
        path = path.resolve()
        while not path.exists():
            path = path.parent
        return os.stat(path).st_dev
    return device(a) == device(b)


if __name__ == "__main__":
    main()
