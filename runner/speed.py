"""Apply the runner's speed settings (costsim.runtime.Runtime) to a built workload.

Everything applies to the bare model before DDP wraps it. `nn.Module.compile` compiles in place,
so state-dict keys, and with them checkpoints, are the same with and without compilation. Under DDP,
TorchDynamo still sees the compiled model run inside DDP's forward and splits its graph at the
gradient buckets (its DDP optimizer) so the all-reduce overlaps the backward pass, unless
ddp_graph=whole (configure_backends): measured on H200, the split graphs cost the restart, not the
step.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from costsim.runtime import CUDA_GRAPH_MODES, Runtime
from runner import autotune_kept, gcstart, graph_trees, inductor_bytecode


class RuntimeConfigError(RuntimeError):
    """A setting this workload or device cannot honour: restarting cannot help."""


def env_switch(env, name: str, default: str, one: str, zero: str) -> bool:
    """An environment switch that takes 1 or 0 (`default` when unset); anything else is a RuntimeConfigError
    saying what each means (`one`, `zero`)."""
    text = env.get(name, default)
    if text not in ("0", "1"):
        raise RuntimeConfigError(f"{name}={text!r}: expected 1 ({one}) or 0 ({zero})")
    return text == "1"


def check_device(runtime: Runtime, device: torch.device) -> None:
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        shown = torch.cuda.device_count()
        raise RuntimeConfigError(f"GPU {device.index or 0} asked for, and CUDA shows this process {shown}: runner "
                                 f"execute counted more (a container's or a scheduler's limit it could not see): give "
                                 f"--nproc-per-node {max(shown, 1)}, or set CUDA_VISIBLE_DEVICES")
    if device.type != "cuda" and runtime.sdpa not in ("auto", "math"):
        raise RuntimeConfigError(f"runtime.sdpa={runtime.sdpa} needs a CUDA GPU; on CPU use auto or math")
    if device.type != "cuda" and runtime.ddp_comm == "bf16":
        raise RuntimeConfigError("runtime.ddp_comm=bf16 needs CUDA GPUs (NCCL); on CPU use fp32")
    if runtime.fp8 != "off" and device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        name = torch.cuda.get_device_name(device)
        raise RuntimeConfigError(f"runtime.fp8={runtime.fp8} needs fp8 matrix units (compute capability 8.9 or "
                                 f"later: L4, L40, H100, H200, B200); {name} has none: use fp8=off")
    if device.type != "cuda" and runtime.compile_mode in CUDA_GRAPH_MODES:
        raise RuntimeConfigError(f"runtime.compile_mode={runtime.compile_mode} uses CUDA graphs; on CPU use "
                                 "default or max-autotune-no-cudagraphs")


# the settings that change what a compiled graph computes (runtime.precompile's file is made per their values); the
# others (DDP's buckets, cuDNN's autotuning, the allocator, garbage collection) act outside the graph
GRAPH_SETTINGS = ("compile_mode", "coordinate_descent_tuning", "geglu", "channels_last", "sdpa",
                  "activation_checkpointing", "activation_memory_budget", "fp8", "fp8_select")


def prepare_model(model: torch.nn.Module, runtime: Runtime, warn=None) -> int:
    """Settings applied to the bare model before DDP; returns the number of modules compiled. `warn`: where
    runtime.precompile reports a file it could not use (stderr by default)."""
    if runtime.activation_checkpointing:
        enable = getattr(model, "enable_gradient_checkpointing", None)
        if enable is None:
            raise RuntimeConfigError("runtime.activation_checkpointing: this workload's model has no "
                                     "enable_gradient_checkpointing() (diffusers/transformers models do)")
        enable()
    if runtime.fp8 != "off":
        to_fp8(model, runtime.fp8, runtime.fp8_select)
    if runtime.geglu == "split":
        split_geglu(model)
    if runtime.channels_last:
        # parameters keep their identity: the optimizer is unaffected (Module.to accepts it; its stubs do not say so)
        model.to(memory_format=torch.channels_last)   # type: ignore[call-overload]
    # the switches read at every start, so that a bad value stops it whatever the settings (a RuntimeConfigError)
    from runner import precompile  # it imports this module
    bytecode, timings, index = inductor_bytecode.enabled(), autotune_kept.enabled(), graph_trees.enabled()
    tensor_guards = precompile.tensor_guards_enabled()
    if runtime.compile != "off" and bytecode:
        inductor_bytecode.install(inductor_bytecode.default_folder())   # runner.inductor_bytecode
    if runtime.compile != "off" and timings:
        autotune_kept.install(autotune_kept.default_folder())   # Triton's timings kept (runner.autotune_kept)
    if runtime.cuda_graphs and index:
        graph_trees.install()   # their recording without its quadratic scans (runner.graph_trees)
    if runtime.compile == "model" and runtime.precompile:
        settings = {name: value for name, value in runtime.as_dict().items() if name in GRAPH_SETTINGS}
        precompile.install(model, runtime.compile_mode, settings, precompile.default_folder(), warn,
                           tensor_guards=tensor_guards)
        return 1
    if runtime.compile == "model":
        if type(model).__module__.startswith("torch.nn."):
            # Dynamo does not trace into torch.nn's own modules from their _call_impl (its trace rules skip
            # torch's files): Module.compile() of an nn.Sequential compiles nothing, silently. Its forward does.
            model.forward = torch.compile(model.forward, mode=runtime.compile_mode)
        else:
            model.compile(mode=runtime.compile_mode)
        return 1
    if runtime.compile != "blocks":
        return 0
    blocks = _blocks(model, "compile")
    for block in blocks:
        block.compile(mode=runtime.compile_mode, fullgraph=True)
    return len(blocks)


def _blocks(model: torch.nn.Module, setting: str) -> list[torch.nn.Module]:
    names = set(getattr(model, "_repeated_blocks", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:
        raise RuntimeConfigError(f"runtime.{setting}=blocks: this model names no repeated blocks (a "
                                 "`_repeated_blocks` list of class names, as diffusers models have); use "
                                 f"{setting}=model")
    return blocks


def split_geglu(model: torch.nn.Module) -> int:
    """geglu=split: every GEGLU feed-forward (diffusers' `GEGLU`: a linear projection to twice the width, whose
    output's first half is multiplied by the gelu of its second) computes the two halves as two linear layers on
    its one weight's halves. The parameters, their names and the checkpoint stay as they are, and the values are
    the same but for rounding; the backward then sums two input gradients instead of concatenating the halves'
    output gradients, a concatenation Inductor writes as one kernel computing the gelu and its derivative for
    every element of both halves (1.033x the step under whole-model compilation on an H200:
    data/measurements/2026-12-06-h200-geglu-split). Each such module becomes a SplitGEGLU, a subclass of its own
    class defined here (a class, not a forward set on the instance: runtime.precompile's saved function pickles
    the modules, and a method bound to an instance does not pickle). Returns how many were changed."""
    changed = 0
    for module in model.modules():
        if type(module).__name__ == "GEGLU" and type(getattr(module, "proj", None)) is torch.nn.Linear:
            module.__class__ = _split_class(type(module))
            changed += 1
    if not changed:
        raise RuntimeConfigError("runtime.geglu=split: this model has no GEGLU feed-forward with a plain linear "
                                 "projection (diffusers' GEGLU, as SDXL's transformer blocks have); leave geglu at fused")
    return changed


def _split_geglu_forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    # diffusers' GEGLU.forward takes (and ignores) a deprecated `scale`; so does this
    w_h, w_g = self.proj.weight.chunk(2, dim=0)
    b_h, b_g = self.proj.bias.chunk(2, dim=0) if self.proj.bias is not None else (None, None)
    return F.linear(hidden_states, w_h, b_h) * F.gelu(F.linear(hidden_states, w_g, b_g))


def _split_class(base: type) -> type:
    """SplitGEGLU: `base` with the split forward, made once and kept in this module's namespace under its own
    name, so that pickle finds it by reference (in any process that has split a model: the loading one has)."""
    made = globals().get("SplitGEGLU")
    if made is None or made.__bases__ != (base,):
        made = type("SplitGEGLU", (base,), {"forward": _split_geglu_forward, "__module__": __name__,
                                           "__qualname__": "SplitGEGLU"})
        globals()["SplitGEGLU"] = made
    return made


FP8_MULTIPLE = 16   # fp8 matrix multiplies need both of a weight's dimensions divisible by 16
# fp8_select=large: torchao's threshold for tensor-wise scaling (its float8 README's benchmarks, H100): a layer
# with out_features <= 4096 and in_features <= 1024 runs slower in fp8, the amax and cast kernels costing more
# than the faster multiply saves
FP8_SMALL_OUT, FP8_SMALL_IN = 4096, 1024


def to_fp8(model: torch.nn.Module, scope: str, select: str = "all") -> int:
    """fp8=blocks|model: the linear layers of the repeated blocks (or of the whole model) compute their
    three matrix multiplies in fp8 with tensor-wise dynamic scales (torchao's Float8Linear: e4m3 forward,
    e5m2 gradients; weights, optimizer state and checkpoints stay in their own precision and keys).
    Layers with a dimension not divisible by 16, and cross-attention's key and value projections, stay as
    they are; with select=large also the small ones (FP8_SMALL_OUT, FP8_SMALL_IN). Returns how many were
    converted."""
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError as exc:
        raise RuntimeConfigError(f"runtime.fp8={scope} needs torchao (pip install 'costsim[fp8]'); "
                                 "or use fp8=off") from exc
    roots = _blocks(model, "fp8") if scope == "blocks" else [model]
    # Cross-attention's key and value projections read the text's tokens (77 a prompt): the weight gradient's
    # matrix multiply runs over batch x 77 rows, which fp8 needs divisible by 16 (616 at a batch of 8 is not),
    # and they are a negligible share of the work. diffusers' Attention says which attention is cross.
    text_side = {id(getattr(m, name)) for m in model.modules() if getattr(m, "is_cross_attention", False)
                 for name in ("to_k", "to_v") if isinstance(getattr(m, name, None), torch.nn.Linear)}
    converted = 0

    def eligible(module: torch.nn.Module, fqn: str) -> bool:
        nonlocal converted
        ok = (isinstance(module, torch.nn.Linear) and id(module) not in text_side
              and module.in_features % FP8_MULTIPLE == 0 and module.out_features % FP8_MULTIPLE == 0
              and (select == "all" or not (module.out_features <= FP8_SMALL_OUT and module.in_features <= FP8_SMALL_IN)))
        converted += ok
        return ok

    for root in roots:
        if isinstance(root, torch.nn.Linear):
            raise RuntimeConfigError(f"runtime.fp8={scope}: the model itself is one linear layer; wrap it")
        convert_to_float8_training(root, module_filter_fn=eligible)
    if not converted:
        which = "" if select == "all" else f", outside fp8_select={select}'s small ones,"
        raise RuntimeConfigError(f"runtime.fp8={scope}: no linear layer with both dimensions divisible by "
                                 f"{FP8_MULTIPLE}{which} in the {'repeated blocks' if scope == 'blocks' else 'model'}")
    return converted


def fp8_layers(model: torch.nn.Module) -> int:
    """How many linear layers multiply in fp8 (torchao's Float8Linear)."""
    return sum(type(m).__name__ == "Float8Linear" for m in model.modules())


def configure_backends(runtime: Runtime) -> None:
    """Process-wide settings. cuDNN's benchmark mode picks convolution algorithms by timing them, so a
    restarted process may pick others: its results then differ in the last bits from an uninterrupted
    run's (fine for training, not for bit-exact drills).

    ddp_graph: TorchDynamo sees a compiled model run inside DDP's forward and by default splits its
    graph at the gradient buckets (`split`, its DDP optimizer) so that each bucket's all-reduce
    overlaps the rest of the backward pass. `whole` compiles one graph: the gradients are all-reduced
    after the backward pass, but the compile caches return it whole, so a restart's first step is
    much shorter at the same step time (SDXL on 2 x H200: data/measurements/2026-11-30-h200-sdxl-restart).
    A whole graph is per world size: a 1-GPU run's cache does not serve a 2-GPU run.

    activation_memory_budget: below 1, AOTAutograd's partitioner keeps that share of a compiled graph's
    activations for the backward and recomputes the rest, choosing what is cheapest to recompute
    (pointwise before matrix multiplies): selective checkpointing for compiled models, to fit larger batches."""
    torch.backends.cudnn.benchmark = runtime.cudnn_benchmark
    import torch._functorch.config as functorch_config
    functorch_config.activation_memory_budget = runtime.activation_memory_budget
    import torch._dynamo as dynamo
    dynamo.config.optimize_ddp = "no_optimization" if runtime.ddp_graph == "whole" else "ddp_optimizer"


def configure_ddp(model, runtime: Runtime) -> str:
    """Gradient communication: `bf16` halves the bytes of each all-reduce (PyTorch's bf16 compression
    hook: each bucket is divided by the world size, cast to bf16, all-reduced and cast back). Returns how DDP's
    buckets were made (buckets_now): "at the wrap" or "rebuilt" (torch's way)."""
    if runtime.ddp_comm == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook
        model.register_comm_hook(None, bf16_compress_hook)
    made = runtime.compile == "model" and runtime.ddp_graph == "whole" and buckets_now(model)
    return "at the wrap" if made else "rebuilt"


def buckets_now(model) -> bool:
    """DDP's gradient buckets made at the wrap, at their configured size, where the order of their all-reduces
    cannot matter; returns whether they were.

    By default DDP holds every gradient in one bucket for the first step (it does not yet know the order the backward
    makes them in). At the second step's forward it makes the sized buckets in that order and copies the gradients
    across, and the one bucket lives until the last gradient has moved: for that moment the gradients are held twice
    (torch's own comment: "it may allocate new buckets before deallocating old buckets"; on the CPU
    `_get_ddp_logging_data()` shows one bucket of every gradient, then the rebuilt ones). Under CUDA graphs the
    graphs' pool keeps the activations' memory at that moment, and it set the peak: SDXL in DDP at one process on an
    H100, 79.4 against 69.1 GB reserved (data/measurements/2026-12-06-h100-ddp-memory).

    When the whole model is one compiled graph kept whole under DDP (compile=model ddp_graph=whole), its backward hands
    every gradient over at its end, so no bucket can be all-reduced early and their order buys no overlap: they are
    made now, in the parameters' order, while no gradient exists, and DDP does not rebuild them. (Eager, compile=blocks
    or a graph split at the buckets make gradients block by block, and torch's order overlaps the last backward's
    all-reduce with it: torch's way stays there.) The reducer's methods for this are private; without them torch's way
    stays."""
    reducer = getattr(model, "reducer", None)
    push, rebuild = (getattr(reducer, name, None) for name in ("_push_all_rebuilt_params", "_rebuild_buckets"))
    if push is None or rebuild is None:
        return False
    push()
    return bool(rebuild())   # a collective: every rank wraps, and so calls this, at the same point


class GarbageCollection:
    """gc_every=N: Python's automatic collection off, a young-generation collection every N steps
    (torchtitan's practice: an automatic full collection, whenever it falls, stalls the step it
    falls in). Either way it counts collections and the time they took, for the end-of-run report.
    A worker's start runs with automatic collection paused (runner.gcstart): `settle` after the first
    step ends the pause."""

    def __init__(self, every: int):
        self.every, self.collections, self.seconds, self._began = every, 0, 0.0, 0.0
        gc.callbacks.append(self._timed)
        if every and not gcstart.paused():   # paused: settle() collects, after the first step
            gc.collect()
            gc.disable()

    def settle(self) -> dict | None:
        """The start's pause ended (runner.gcstart.settle): what it did, or None where nothing was paused."""
        return gcstart.settle(automatic=not self.every)

    def _timed(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.collections += 1
            self.seconds += time.perf_counter() - self._began

    def step(self, step: int) -> None:
        if self.every and step % self.every == 0:
            gc.collect(1)

    def close(self) -> None:
        if self.every:
            gc.enable()
        if self._timed in gc.callbacks:
            gc.callbacks.remove(self._timed)


def device_name(device: torch.device) -> str:
    """What the process trains on, as the driver names it ("NVIDIA H100 80GB HBM3"), or "cpu": the runtime event
    records it, and `costsim calibrate` refits the figures of the GPU type a run ran on, not only the plan's."""
    return "cpu" if device.type == "cpu" else torch.cuda.get_device_name(device)


def memory_report(device: torch.device) -> dict:
    """Peak memory and how often the CUDA caching allocator had to free its cache and retry (each
    retry synchronises the device: a stalled step)."""
    if device.type != "cuda":
        return {}
    stats = torch.cuda.memory_stats(device)
    return {"peak_allocated_gb": stats.get("allocated_bytes.all.peak", 0) / 1e9,
            "peak_reserved_gb": stats.get("reserved_bytes.all.peak", 0) / 1e9,
            "alloc_retries": stats.get("num_alloc_retries", 0)}


def attention(runtime: Runtime):
    """A context that pins the scaled-dot-product-attention backend, or does nothing for auto."""
    if runtime.sdpa == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[runtime.sdpa]
    return sdpa_kernel([backend])


# torch.compile's counters worth keeping per start: did it trace, and did its caches answer?
COMPILE_COUNTERS = {"frames": ("total", "ok"), "stats": ("unique_graphs", "calls_captured"),
                    "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass"),
                    "inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass",
                                 # CUDA graphs: graphs that fell back to running without them, and inputs each
                                 # replay copies into the recorded graph's own (a cost the step pays every time)
                                 "cudagraph_skips", "cudagraph_recorded_non_static_inputs"),
                    # under TORCH_CACHING_PRECOMPILE=1 (torch's, experimental; not faster on SDXL:
                    # data/measurements/2026-12-04-h200-dynamo-cache)
                    "dynamo_cache": ("dynamo_cache_hit", "dynamo_cache_miss")}
COMPILE_PHASES = 10   # the slowest phases kept


def compile_report() -> dict:
    """What torch.compile did in this process so far (after a start's first step: what a warm cache still
    cost): Dynamo's frames and graphs, recompiles, the AOTAutograd and FX-graph cache hits and misses, and
    its slowest phases in seconds (torch._dynamo.utils.compile_times: nested phases overlap)."""
    from torch._dynamo.utils import compile_times, counters
    kept = {f"{group}.{name}": int(counters[group][name]) for group, names in COMPILE_COUNTERS.items()
            for name in names if counters[group][name]}
    recompiles = sum(int(v) for v in counters["recompiles"].values())
    if recompiles:
        kept["recompiles"] = recompiles
    names, values = compile_times(repr="csv", aggregate=True)
    phases = {str(n): float(str(v)) for n, v in zip(names, values)}   # compile_times gives text
    slowest = sorted(phases, key=lambda n: phases[n], reverse=True)[:COMPILE_PHASES]
    return {"counters": kept, "phases_s": {n: round(phases[n], 3) for n in slowest}}


# COSTSIM_AUTOTUNE_REPORT=1: the compile event of each start carries autotune_report() (a diagnostic: it walks the
# process's objects once, after the first step)
AUTOTUNE_REPORT_ENV = "COSTSIM_AUTOTUNE_REPORT"


def autotune_report() -> dict:
    """What Triton's autotuner did in this process, read off its live kernels (Inductor's CachingAutotuner objects):
    how many by the state of their autotune cache (hit: the kept best configuration taken; miss: none taken, so the
    candidates are timed at the object's first launch; only 1 config), and for the first few kernels with a miss why:
    whether the kept best-config file exists, whether the configurations it was saved for (its configs_hash) are the
    ones this kernel was asked to choose from, and whether the kernel can save its choice (a save hook). A GPU
    diagnosis (the CPU has no Triton kernels): the precompiled SDXL resume on an H100 timed some kernels' candidates
    again at every start (1.1-1.4 s).
    One kernel can be held by several objects (the precompiled bundle's and the code cache's, say), not all of them
    launched: `states` counts kernels (by file, which torch names by a hash of the source, and function) under the
    states of their objects joined ("hit+miss": some objects hit, some missed), `object_states` counts objects. A
    miss is not a timing: an object that is never launched is never timed (runner.autotune_kept counts the timings).
    It walks every object of the process (gc), so it runs only where asked: scripts/bench_precompile.py on a GPU, and
    the runner's compile event under COSTSIM_AUTOTUNE_REPORT=1."""
    import json
    import warnings
    from collections import Counter

    from torch._inductor.runtime import triton_heuristics
    from torch._inductor.runtime.autotune_cache import AutotuneCache
    from torch._inductor.runtime.runtime_utils import cache_dir
    with warnings.catch_warnings():   # isinstance on a deprecated alias (torch.distributed.reduce_op) warns
        warnings.simplefilter("ignore")
        objects = [obj for obj in gc.get_objects() if _is_a(obj, triton_heuristics.CachingAutotuner)]

    def state(obj) -> str:
        return str((getattr(obj, "autotune_cache_info", None) or {}).get("autotune_cache_state", "unknown"))

    by_kernel: dict = {}
    for obj in objects:
        key = (obj.filename, getattr(getattr(obj, "fn", None), "__name__", None)) if obj.filename else id(obj)
        by_kernel.setdefault(key, []).append(obj)
    states = Counter("+".join(sorted({state(obj) for obj in held})) for held in by_kernel.values())
    missed: list[dict] = []
    # the kernels whose every object missed first (those are timed at every start), then those that also hit
    for held in sorted(by_kernel.values(), key=lambda held: any(state(obj) != "miss" for obj in held)):
        obj = next((obj for obj in held if state(obj) == "miss"), None)
        if obj is None or not obj.filename:
            continue
        results = getattr(obj, "compile_results", None) or []
        asked = [r.config for r in results] or list(obj.configs or ())
        asked_hash = triton_heuristics.hash_configs(asked)
        # where torch keeps this kernel's best configuration (its own lookup; the key's making differs by version)
        local = getattr(AutotuneCache.create(obj.inductor_meta, obj.filename, asked_hash), "local_cache", None)
        path = local[1] if local else ""
        kept = json.loads(Path(path).read_text()) if path and os.path.exists(path) else None
        hook = obj.save_cache_hook
        missed.append({"kernel": os.path.basename(obj.filename), "objects": len(held),
                       "states": "+".join(sorted({state(o) for o in held})), "configs": len(obj.configs or ()),
                       "compile_results": len(results), "best_config_file": kept is not None,
                       "kept_hash_is_asked": kept is not None and kept.get("configs_hash") == asked_hash,
                       "hook_hash_is_asked": getattr(getattr(hook, "__self__", None), "configs_hash", None) ==
                       asked_hash,
                       "save_hook": hook is not None,
                       "static": bool(results) and all(type(r).__name__ == "StaticTritonCompileResult"
                                                       for r in results)})
        if len(missed) >= 8:
            break
    files = sum(1 for _ in Path(cache_dir()).rglob("*.best_config"))
    return {"states": dict(states), "object_states": dict(Counter(state(obj) for obj in objects)),
            "best_config_files": files, "missed": missed}


def _is_a(obj, cls: type) -> bool:
    """isinstance, False for a dead weak proxy (gc finds them: asking their class raises ReferenceError)."""
    try:
        return isinstance(obj, cls)
    except ReferenceError:
        return False


# COSTSIM_PROFILE_FIRST_STEP=FILE: rank 0's first step of each start under cProfile, and the step after it (a
# steady one: the baseline), their statistics appended to FILE as text and dumped beside it as FILE.<pid>.<step>.prof
# for `scripts/profile_diff.py` (a diagnostic: what the first step after a resume spends beyond a steady one is
# interpreter time, data/measurements/2026-12-04-h200-warm-up)
PROFILE_FIRST_STEP_ENV = "COSTSIM_PROFILE_FIRST_STEP"


@contextlib.contextmanager
def profiled(path: str, heading: str, dump: str | None = None):
    """The block under cProfile (the calling thread only), its slowest functions appended to `path` as text:
    by cumulative time, then by own time; the raw statistics to `dump` if given (pstats' format). A file that
    cannot be written is a warning on stderr, never a failed step."""
    import cProfile
    import pstats
    import sys
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        try:
            with open(path, "a") as out:
                out.write(f"== {heading}\n")
                stats = pstats.Stats(profile, stream=out)
                stats.sort_stats("cumulative").print_stats(60)
                stats.sort_stats("tottime").print_stats(40)
            if dump:
                profile.dump_stats(dump)
        except OSError as exc:
            print(f"runner: warning: {PROFILE_FIRST_STEP_ENV}={path}: {exc.strerror or exc}", file=sys.stderr,
                  flush=True)


def cache_bytes(env=os.environ) -> int:
    from runner.compile_share import folder_bytes
    root = env.get("TORCHINDUCTOR_CACHE_DIR")
    return folder_bytes(Path(root)) if root else 0
