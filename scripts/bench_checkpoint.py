"""Checkpoint cost of a workload's full training state, measured through the runner's Checkpointer.

One process, world size 1: build the workload through the runner's Trainer, train two steps (the
optimizer state then exists and the host staging buffers start allocating in the background), then
  1. the time the background allocation of the host staging buffers took (--staging: pageable or pinned),
  2. an async save: the training stall (the device-to-host copy) and its background write,
  3. a synchronous save of the same state (timed after the async write has finished),
  4. (--load) loading the newest checkpoint back,
  5. (--async-compare) async saves streamed (written as copied, the default) and staged first (the whole copy,
     then the write), side by side in the order A B B A, each checkpoint removed after it is timed,
  6. (--notice THREADS,...) the spot notice's blocking save, side by side: through the staging buffers
     (--staging) each tensor copied as its writer reaches it (pipelined, the default) and the whole state
     copied first, in the order A B B A, then from the device tensors (DCP's own copy, the runner before
     2026-12-01), the CRCs computed while writing, at each writer thread count, each checkpoint removed
     after it is timed (one at a time fits a 64 GiB disk), printed as ratios to the first; then the disk's
     own bound: the staged bytes written raw by as many threads (os.write + fsync, no serialisation),
  7. (--early-notice) the notice's blocking save right after the staging buffers are mapped (a notice at a life's
     second step: the thread faulting them in stopped, the rest faulted in by the copy) against one after they are
     all faulted in, each with fresh buffers, A B B A, then (unless --skip-device) from the device tensors.
Each figure is printed as soon as it is measured (a JSON line), so a run cut short still reports.

Usage (GPU machine): python3 scripts/bench_checkpoint.py --workload sdxl --batch 8 --dir /tmp/ckpt-bench
                     python3 scripts/bench_checkpoint.py --workload sdxl --batch 8 --notice 4,16 --dir /tmp/b
                     python3 scripts/bench_checkpoint.py --workload sdxl --batch 8 --steps 8 --staging pinned
                     python3 scripts/bench_checkpoint.py --workload sdxl --batch 8 --skip-sync --async-compare
                     python3 scripts/bench_checkpoint.py --workload sdxl --batch 4 --steps 1 --skip-async --skip-sync \
                         --early-notice --skip-device
On CPU, for trying it: python3 scripts/bench_checkpoint.py --workload tiny --batch 8 --load --async-compare --notice 1,4
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def say(**figures) -> None:
    print(json.dumps(figures), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="sdxl")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dir", help="run folder (default: a new temporary folder); the storage measured")
    parser.add_argument("--load", action="store_true", help="also time loading the checkpoint back")
    parser.add_argument("--option", action="append", default=[])
    parser.add_argument("--notice", help="writer thread counts for the blocking-save comparison, e.g. 4,16")
    parser.add_argument("--steps", type=int, default=2, help="training steps before the saves (each one's time printed)")
    parser.add_argument("--staging", choices=("pinned", "pageable"), default="pageable",
                        help="the host staging buffers: pageable (the runner's) or page-locked")
    parser.add_argument("--skip-async", action="store_true", help="leave out the async save (2.)")
    parser.add_argument("--skip-sync", action="store_true", help="leave out the synchronous save (3.)")
    parser.add_argument("--early-notice", action="store_true",
                        help="a notice's save right after the buffers are mapped, and once they are faulted in (7.)")
    parser.add_argument("--async-compare", action="store_true",
                        help="async saves streamed and staged first, side by side (5.)")
    parser.add_argument("--skip-device", action="store_true",
                        help="leave out the notice's save from the device tensors (5.; 30 s for SDXL on the H200 host)")
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    from costsim import io as cio
    from costsim.contract.telemetry import read_events
    from costsim.runtime import Runtime
    from runner import train
    from runner.plan import effective_plan, load_run_spec
    from runner.profile import synthetic_plan

    cuda = torch.cuda.is_available()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="bench-ckpt-"))
    folder.mkdir(parents=True, exist_ok=True)
    workload = cio.load_workload(args.workload)
    synthetic = synthetic_plan(workload, cio.load_profile(workload.profile), "H200" if cuda else "cpu", 1, args.batch)
    synthetic = replace(synthetic, checkpoint=replace(synthetic.checkpoint, async_=True, keep=3))
    options = dict(o.split("=", 1) for o in args.option)
    plan = effective_plan(synthetic, runtime=Runtime(), steps=args.steps, options=options, final_save=False).write(
        folder / "plan.json")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if cuda:
        torch.cuda.set_device(0)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if cuda else "gloo")
    worker = train.parse(["--plan", str(plan), "--run-dir", str(folder / "run"), "--run-id", "ckpt-bench"])
    trainer = train.Trainer(worker, load_run_spec(plan), 0, 1, 0)
    if args.staging == "pinned":
        from runner.staging import HostStager
        trainer.checkpointer._stager = HostStager(pin=True)
    prepared = time.perf_counter()
    trainer.train()                               # staging buffers start allocating after the first step
    trainer.checkpointer.wait_staging()
    say(figure="staging_alloc_done_after_s", value=time.perf_counter() - prepared, staging=args.staging,
        note="from the start of training; the allocation runs beside the steps")
    say(figure="step_times_s", staging=args.staging,
        values=[round(e["step_time_s"], 3) for e in read_events(folder / "run") if e["event"] == "step"])
    if not args.skip_async:
        trainer.checkpointer.save(trainer.step, trainer.state())
        trainer.checkpointer.wait()
        save = [e for e in read_events(folder / "run") if e["event"] == "checkpoint_save"][-1]
        say(figure="async", staging=args.staging, stall_s=save["stall_s"], write_s=save["duration_s"],
            bytes=save.get("bytes"))
    if not args.skip_sync:
        trainer.checkpointer.save(trainer.step + 1, trainer.state(), blocking=True, reason="final")
        save = [e for e in read_events(folder / "run") if e["event"] == "checkpoint_save"][-1]
        say(figure="sync", save_s=save["duration_s"], bytes=save.get("bytes"))
    if args.load:
        trainer.checkpointer.load(trainer.step + 1, trainer.state())
        load = [e for e in read_events(folder / "run") if e["event"] == "checkpoint_load"][-1]
        say(figure="load", load_s=load["duration_s"])
    if args.async_compare:
        async_saves(trainer, folder / "run")
    if args.notice:
        notice_saves(trainer, folder / "run", [int(n) for n in args.notice.split(",")], device=not args.skip_device)
    if args.early_notice:
        early_notice_saves(trainer, folder / "run", device=not args.skip_device)
    trainer.close()
    dist.destroy_process_group()


def async_saves(trainer, run: Path) -> None:
    """Async saves of the same state streamed and staged first, A B B A, each removed once timed; the write's
    duration (from the save's start to its commit) and the training stall, each as a ratio to the first."""
    import shutil

    from costsim.contract.telemetry import read_events
    checkpointer, step, first = trainer.checkpointer, trainer.step + 100, None
    for mode in ("streaming", "first", "first", "streaming"):
        for old in checkpointer.steps():          # room for one more on a small disk
            shutil.rmtree(checkpointer.folder(old), ignore_errors=True)
        step += 1
        checkpointer.set_async_staging(mode)
        checkpointer.save(step, trainer.state())
        checkpointer.wait()
        save = [e for e in read_events(run) if e["event"] == "checkpoint_save"][-1]
        first = first or save["duration_s"]
        say(figure="async_save", staging=save["staging"], stall_s=save["stall_s"], write_s=save["duration_s"],
            commit_s=save["commit_s"], bytes=save["bytes"], ratio_to_first=save["duration_s"] / first)
    checkpointer.set_async_staging("streaming")


def notice_saves(trainer, run: Path, thread_counts: list[int], *, device: bool = True) -> None:
    """Blocking saves of the same state from the device tensors and from the staging buffers, at each
    writer thread count, then the raw write bound; every figure also as a ratio to the first save."""
    import shutil

    from costsim.contract.telemetry import read_events
    checkpointer, step, first = trainer.checkpointer, trainer.step + 10, None
    for threads in thread_counts:
        checkpointer.set_write_threads(threads)
        # the staging buffers used as each tensor is written (pipelined) and the whole state copied first, side
        # by side in the order A B B A (a save's place in the sequence, the disk's state after the one before,
        # weighs on both alike), then once from the device tensors; the CRCs computed while writing (the default)
        for stage, staging in ((True, "pipelined"), (True, "first"), (True, "first"), (True, "pipelined"),
                               (False, "first"))[:None if device else 4]:
            for old in checkpointer.steps():          # room for one more on a small disk
                shutil.rmtree(checkpointer.folder(old), ignore_errors=True)
            step += 1
            checkpointer.set_crc_mode("blocking")
            checkpointer.set_staging(staging)
            checkpointer.save(step, trainer.state(), blocking=True, reason="notice", stage=stage)
            save = [e for e in read_events(run) if e["event"] == "checkpoint_save"][-1]
            first = first or save["duration_s"]
            say(figure="notice_save", staged=save["staged"], staging=save.get("staging"), write_threads=threads,
                save_s=save["duration_s"], commit_s=save["commit_s"], commit_read_bytes=save["commit_read_bytes"],
                bytes=save["bytes"], ratio_to_first=save["duration_s"] / first)
    checkpointer.set_crc_mode("0")
    for old in checkpointer.steps():
        shutil.rmtree(checkpointer.folder(old), ignore_errors=True)
    tensors = [t for t in _tensors(checkpointer._stager.stage(checkpointer._share(trainer.state())[1]))]
    for threads in sorted(set(thread_counts)):
        seconds, total = raw_write(run / "raw", tensors, threads)
        say(figure="raw_write", write_threads=threads, seconds=seconds, gb_per_s=total / seconds / 1e9,
            ratio_to_first=seconds / first)


def early_notice_saves(trainer, run: Path, *, device: bool = True) -> None:
    """The notice's blocking save (pipelined staging) with fresh buffers, right after they are mapped ("early": the
    faulting thread has just started, as at a life's second step) and once it has faulted them all in ("faulted"),
    A B B A, each checkpoint removed once timed; then from the device tensors; each as a ratio to the first."""
    import shutil

    from costsim.contract.telemetry import read_events
    from runner.staging import HostStager
    checkpointer, step, first = trainer.checkpointer, trainer.step + 200, None
    for when in ("early", "faulted", "faulted", "early", *(("device",) if device else ())):
        for old in checkpointer.steps():          # room for one more on a small disk
            shutil.rmtree(checkpointer.folder(old), ignore_errors=True)
        checkpointer._stager = HostStager()       # fresh buffers: the previous ones' pages are all in
        if when != "device":
            checkpointer.prepare(trainer.state())
        if when == "faulted":
            checkpointer.wait_staging()
        step += 1
        checkpointer.save(step, trainer.state(), blocking=True, reason="notice", stage=when != "device")
        save = [e for e in read_events(run) if e["event"] == "checkpoint_save"][-1]
        first = first or save["duration_s"]
        say(figure="early_notice_save", when=when, staged=save["staged"], prefaulted=save.get("prefaulted"),
            save_s=save["duration_s"], bytes=save["bytes"], ratio_to_first=save["duration_s"] / first)
    for old in checkpointer.steps():
        shutil.rmtree(checkpointer.folder(old), ignore_errors=True)


def _tensors(value):
    import torch
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def raw_write(folder: Path, tensors, threads: int) -> tuple[float, int]:
    """Write the host tensors' bytes into `threads` files in parallel, fsync each; (seconds, bytes)."""
    import shutil
    import threading

    import torch
    folder.mkdir(parents=True, exist_ok=True)
    bins: list[list] = [[] for _ in range(threads)]
    for t in sorted(tensors, key=lambda t: -t.numel() * t.element_size()):
        min(bins, key=lambda b: sum(x.numel() * x.element_size() for x in b)).append(t)

    def write(i: int) -> None:
        with open(folder / f"raw-{i}", "wb") as handle:
            for t in bins[i]:
                handle.write(memoryview(t.contiguous().reshape(-1).view(torch.uint8).numpy()))
            handle.flush()
            os.fsync(handle.fileno())

    started = time.perf_counter()
    workers = [threading.Thread(target=write, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - started
    shutil.rmtree(folder, ignore_errors=True)
    return seconds, sum(t.numel() * t.element_size() for t in tensors)


if __name__ == "__main__":
    main()
