"""Checkpoint cost of a workload's full training state, measured through the runner's Checkpointer.

One process, world size 1: build the workload through the runner's Trainer, train two steps (the
optimizer state then exists and the host staging buffers start allocating in the background), then
  1. the time the background allocation of the (pinned) host buffers took,
  2. an async save: the training stall (the device-to-host copy) and its background write,
  3. a synchronous save of the same state (timed after the async write has finished),
  4. (--load) loading the newest checkpoint back.
Each figure is printed as soon as it is measured (a JSON line), so a run cut short still reports.

Usage (GPU machine): python3 scripts/bench_checkpoint.py --workload sdxl --batch 8 --dir /tmp/ckpt-bench
On CPU, for trying it: python3 scripts/bench_checkpoint.py --workload tiny --batch 8 --load
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
    plan = effective_plan(synthetic, runtime=Runtime(), steps=2, options=options, final_save=False).write(
        folder / "plan.json")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if cuda:
        torch.cuda.set_device(0)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if cuda else "gloo")
    worker = train.parse(["--plan", str(plan), "--run-dir", str(folder / "run"), "--run-id", "ckpt-bench"])
    trainer = train.Trainer(worker, load_run_spec(plan), 0, 1, 0)
    prepared = time.perf_counter()
    trainer.train()                               # two steps; staging buffers start allocating after the first
    trainer.checkpointer.wait_staging()
    say(figure="staging_alloc_done_after_s", value=time.perf_counter() - prepared,
        note="from the start of training; the allocation runs beside the steps")
    trainer.checkpointer.save(trainer.step, trainer.state())
    trainer.checkpointer.wait()
    save = [e for e in read_events(folder / "run") if e["event"] == "checkpoint_save"][-1]
    say(figure="async", stall_s=save["stall_s"], write_s=save["duration_s"], bytes=save.get("bytes"))
    trainer.checkpointer.save(trainer.step + 1, trainer.state(), blocking=True, reason="final")
    save = [e for e in read_events(folder / "run") if e["event"] == "checkpoint_save"][-1]
    say(figure="sync", save_s=save["duration_s"], bytes=save.get("bytes"))
    if args.load:
        trainer.checkpointer.load(trainer.step + 1, trainer.state())
        load = [e for e in read_events(folder / "run") if e["event"] == "checkpoint_load"][-1]
        say(figure="load", load_s=load["duration_s"])
    trainer.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
