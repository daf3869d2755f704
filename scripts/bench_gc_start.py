"""A worker's start with Python's garbage collector paused until its first step (runner.gcstart, the default)
against the collector as Python has it (COSTSIM_GC_START=0), side by side in one run: same-node resumes of one
run folder, the two ways alternating, each its own `runner execute` from the last life's final checkpoint.

The job is the flagship's as an H200 runs it (sdxl-unet, compile=blocks, gc_every=50, bf16, the warm step beside
the checkpoint's read) on the SDXL UNet's structure with narrow layers (scripts/bench_restore_parts.py's: its
1,680 parameters and 6,700 checkpoint records at a fraction of the bytes, latents of 32 x 32), on CPU with
one worker process, so that the interpreter's share of each part shows. The first life compiles (half a minute on
two cores) and is not counted; every later life starts from the run folder's compile cache, as a same-node
restart does.

Prints, per way, the median over its lives of: `runner execute`'s start to the first step's end; the worker's
start (process start, imports, build ...); the making of the state the checkpoint loads into, the load and
its planning; the warm step; the first step; the collection that ends the pause (gc_settle); then each figure's
ratio paused / Python's.

    python3 scripts/bench_gc_start.py [--lives 6] [--narrow 10] [--gc-every 50] [--worker-start exec]
                                      [--threads N] [--dir /tmp/bench-gc-start]
    python3 scripts/bench_gc_start.py --parts 3   (the imports, and the read's planning, alone: on against off)
(needs the runner and sdxl extras: torch, diffusers)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from costsim.contract.lives import split_lives  # noqa: E402
from costsim.contract.plan import Plan  # noqa: E402
from costsim.contract.telemetry import read_job_events  # noqa: E402

WAYS = {"paused": "1", "python's": "0"}   # COSTSIM_GC_START
STEPS_A_LIFE = 2
SAMPLE_SIZE = 32   # latents 32 x 32 (SDXL's 128): a CPU step in seconds, the same modules and records


def narrow_config(factor: int) -> dict:
    """bench_restore_parts's narrow UNet config, latents SAMPLE_SIZE square."""
    from bench_restore_parts import narrow_config as narrow
    return {**narrow(factor), "sample_size": SAMPLE_SIZE}


def make_plan(folder: Path, gc_every: int) -> Path:
    """The planner's tiny plan made the flagship's job: sdxl-unet, global batch 4, bf16, compile=blocks with
    `gc_every` (the shipped H200 configuration's: 50), no periodic checkpoint (each life ends with its final save,
    which the next resumes from)."""
    out = folder / "plan.json"
    subprocess.run([sys.executable, "-m", "costsim", "plan", "--workload", "tiny", "--trials", "10", "--out", str(out),
                    "--format", "json"], check=True, capture_output=True)
    plan = Plan.read(out)
    plan = replace(plan, checkpoint=replace(plan.checkpoint, interval_steps=None, interval_s=1e9, async_=False))
    plan.write(out)
    doc = json.loads(out.read_text())
    doc["workload"].update(model="sdxl-unet", global_batch=4, precision="bf16")
    doc["runtime"] = {"compile": "blocks", "gc_every": gc_every}
    doc["resources"]["gpus_per_node"] = 1   # one worker, as on one H200
    out.write_text(json.dumps(doc))
    return out


def life(plan: Path, run: Path, config: Path, steps: int, gc_start: str, worker_start: str | None,
         threads: int) -> None:
    env = {**os.environ, "COSTSIM_GC_START": gc_start, "OMP_NUM_THREADS": str(threads)}
    if worker_start:
        env["COSTSIM_WORKER_START"] = worker_start
    done = subprocess.run([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run), "--steps",
                           str(steps), "--option", f"config={config}"], env=env, capture_output=True, text=True,
                          timeout=3600)
    if done.returncode != 0:
        sys.exit(f"runner execute failed ({done.returncode}):\n{done.stderr[-3000:]}")


def figures(events: list[dict]) -> dict[str, float]:
    """One life's figures, seconds."""
    rank0 = lambda kind: next((e for e in events if e["event"] == kind and e.get("rank") in (0, None)), None)  # noqa: E731
    start = events[0].get("process_start_t") or events[0]["t"]
    steps = [e for e in events if e["event"] == "step" and e.get("rank") == 0]
    runtime, load, warm, settle = rank0("runtime"), rank0("checkpoint_load"), rank0("warm_step"), rank0("gc_settle")
    out = {"execute to the first step": steps[0]["t"] - start}
    if runtime and runtime.get("process_start_t"):
        out["  to the worker's process"] = runtime["process_start_t"] - start
    for name, seconds in ((runtime or {}).get("start_phases_s") or {}).items():
        out[f"  worker: {name}"] = seconds
    if load and "sized_s" in load:
        out["  sizing the state to load into"] = load["sized_s"]
    if load:
        out["  load"] = load["duration_s"]
        if "planned_s" in load:
            out["    its planning"] = load["planned_s"]
    if warm and "seconds" in warm:
        out["  warm step"] = warm["seconds"]
    out["  first step"] = steps[0]["step_time_s"]
    if len(steps) > 1:
        out["  second step"] = steps[1]["step_time_s"]
    if settle:
        out["  the pause's collection"] = settle["collected_s"]
    return out


# --parts: two parts of a start alone, each in a fresh interpreter, with automatic collection and without
IMPORTS = """
import gc, sys, time
if sys.argv[1] == "off":
    gc.disable()
began = time.perf_counter()
import torch, diffusers
from diffusers import UNet2DConditionModel
import torch._dynamo, torch._inductor.compile_fx
seconds, collections = time.perf_counter() - began, sum(s["collections"] for s in gc.get_stats())
tracked = len(gc.get_objects())
print(seconds, collections, gc.collect(), tracked)   # then: what a full collection finds unreachable, of how many
"""
# what a compiled forward leaves unreachable, the collector paused as a worker's start has it: how many objects,
# and whether any is a tensor (the pause's one collection must free those before the freeze)
LEFTOVERS = """
import gc, json, sys, warnings, weakref
warnings.filterwarnings("ignore")
gc.disable()
import torch
from diffusers import UNet2DConditionModel
config = json.loads(open(sys.argv[1]).read())
model = UNet2DConditionModel.from_config(config)
model.compile_repeated_blocks()
text = config["projection_class_embeddings_input_dim"] - 6 * config["addition_time_embed_dim"]
size = config["sample_size"]
gc.freeze()
with torch.autocast("cpu", dtype=torch.bfloat16):
    out = model(torch.randn(4, 4, size, size), torch.randint(0, 1000, (4,)),
                torch.randn(4, 77, config["cross_attention_dim"]),
                added_cond_kwargs={"text_embeds": torch.randn(4, text), "time_ids": torch.randn(4, 6)}).sample
del out
gc.set_debug(gc.DEBUG_SAVEALL)
freed = gc.collect()
tensors = 0
for o in gc.garbage:
    if type(o) not in (weakref.ProxyType, weakref.CallableProxyType) and isinstance(o, torch.Tensor):
        tensors += 1
print(freed, tensors)
"""
PLANNING = """
import gc, json, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[3])
import torch, torch.distributed.checkpoint as dcp
from diffusers import UNet2DConditionModel
from runner import checkpoint_reader
from runner.state import training_state
model = UNet2DConditionModel.from_config(json.loads(open(sys.argv[2]).read()))
state = training_state(model, torch.optim.AdamW(model.parameters(), lr=1e-4), None, 0, 0)
if sys.argv[1] == "off":
    gc.disable()
before = sum(s["collections"] for s in gc.get_stats())
reader = checkpoint_reader.SafeFileSystemReader(sys.argv[4])
dcp.load(state, storage_reader=reader, planner=checkpoint_reader.SafeLoadPlanner(), no_dist=True)
print(reader.timings["planned_s"], sum(s["collections"] for s in gc.get_stats()) - before)
"""


def parts(folder: Path, narrow: int, rounds: int) -> None:
    """The imports of torch, diffusers and the compiler, and DCP's planning of the narrow UNet's checkpoint read,
    each in a fresh interpreter, alternating with Python's automatic collection on and off."""
    import torch
    import torch.distributed.checkpoint as dcp
    from diffusers import UNet2DConditionModel
    from torch.distributed.checkpoint import FileSystemWriter

    from runner.state import training_state
    config = folder / "unet_config.json"
    config.write_text(json.dumps(narrow_config(narrow)))
    model = UNet2DConditionModel.from_config(json.loads(config.read_text()))
    saved = folder / "checkpoint"
    dcp.save(training_state(model, torch.optim.AdamW(model.parameters(), lr=1e-4), None, 0, 0),
             storage_writer=FileSystemWriter(str(saved)), no_dist=True)
    runs = {"imports": [IMPORTS], "the read's planning": [PLANNING, str(config), str(ROOT), str(saved)]}
    table: dict[tuple[str, str], list[tuple[float, int]]] = {}
    unreachable: list[tuple[int, int]] = []   # after the imports without collection: (unreachable, tracked)
    for _ in range(rounds):
        for name, (code, *rest) in runs.items():
            for way in ("on", "off"):
                done = subprocess.run([sys.executable, "-c", code, way, *rest], capture_output=True, text=True,
                                      check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
                seconds, collections, *after = done.stdout.split()
                table.setdefault((name, way), []).append((float(seconds), int(collections)))
                if after and way == "off":
                    unreachable.append((int(after[0]), int(after[1])))
    print(f"{rounds} rounds alternating, {os.cpu_count()} cores; medians (range), then the collections in it "
          "(with automatic collection off, the libraries' own gc.collect() calls)")
    print(f"{'':<22} {'collector on':>24} {'off':>24} {'ratio':>7}")
    for name in runs:
        cells, medians = [], []
        for way in ("on", "off"):
            seconds = [x for x, _ in table[(name, way)]]
            medians.append(statistics.median(seconds))
            cells.append(f"{medians[-1]:.3f} ({min(seconds):.2f}-{max(seconds):.2f}) "
                         f"{statistics.median(c for _, c in table[(name, way)]):.0f}")
        print(f"{name:<22} {cells[0]:>24} {cells[1]:>24} {medians[1] / medians[0]:7.2f}")
    freed, tracked = sorted(unreachable)[len(unreachable) // 2]
    print(f"after the imports without collection, a full collection finds {freed:,} of {tracked:,} objects unreachable")
    done = subprocess.run([sys.executable, "-c", LEFTOVERS, str(config)], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    freed, tensors = done.stdout.split()[-2:]
    print(f"the narrow UNet's compiled forward, paused, leaves {int(freed):,} objects unreachable, {tensors} of them "
          "tensors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lives", type=int, default=6, help="resumes, half each way (after a first, compiling life)")
    parser.add_argument("--narrow", type=int, default=10, help="divide the UNet's widths by this")
    parser.add_argument("--gc-every", type=int, default=50,
                        help="the plan's gc_every: 50 as the shipped H200 configuration (automatic collection off "
                             "from the trainer's start either way), 0 for Python's automatic collection after it")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-gc-start"))
    parser.add_argument("--worker-start", choices=("fork", "exec"),
                        help="COSTSIM_WORKER_START: exec starts the worker as a new interpreter, as GPU plans do "
                             "(default: the runner's choice for a CPU plan, forked from torchrun's agent)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="the worker's OMP_NUM_THREADS (default: every core; the runner's own default is 1)")
    parser.add_argument("--parts", type=int, metavar="ROUNDS",
                        help="instead: the imports and the read's planning alone, with the collector on and off, "
                             "ROUNDS rounds")
    args = parser.parse_args()
    if (args.lives < 2 or args.narrow < 1 or args.gc_every < 0 or args.threads < 1
            or (args.parts is not None and args.parts < 1)):
        parser.error("--lives: a whole number >= 2; --narrow, --threads, --parts: >= 1; --gc-every: >= 0")
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    if args.parts:
        parts(args.dir, args.narrow, args.parts)
        return
    config = args.dir / "unet_config.json"
    config.write_text(json.dumps(narrow_config(args.narrow)))
    plan, run = make_plan(args.dir, args.gc_every), args.dir / "run"
    began = time.monotonic()
    life(plan, run, config, STEPS_A_LIFE, "1", args.worker_start, args.threads)
    print(f"first life (compiles): {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
    order = [list(WAYS)[i % 2] for i in range(args.lives)]
    for index, way in enumerate(order, start=2):
        life(plan, run, config, STEPS_A_LIFE * index, WAYS[way], args.worker_start, args.threads)
        print(f"life {index} ({way}) done", file=sys.stderr, flush=True)
    first, *lives = split_lives(list(read_job_events(run)))
    settled = next((e for e in first if e["event"] == "gc_settle"), None)
    if settled is not None:   # a cold compile's garbage waited for the pause's end too
        print(f"the compiling life's one collection after its first step freed {settled['freed']:,} objects in "
              f"{settled['collected_s']:.2f} s")
    if len(lives) != len(order):
        sys.exit(f"expected {len(order)} resumed lives in {run}, found {len(lives)}")
    table: dict[str, dict[str, list[float]]] = {}
    for way, events in zip(order, lives):
        for name, value in figures(events).items():
            table.setdefault(name, {}).setdefault(way, []).append(value)
    paused, python = WAYS
    print(f"{args.lives} same-node resumes alternating, narrow {args.narrow}, gc_every={args.gc_every}, "
          f"{os.cpu_count()} cores, {args.threads} OpenMP threads, "
          f"workers {args.worker_start or 'forked (the default)'}; medians (range):")
    print(f"{'':<32} {paused:>20} {python:>20} {'ratio':>7}")
    for name, ways in table.items():
        cells = []
        for way in (paused, python):
            values = ways.get(way, [])
            cells.append(f"{statistics.median(values):.3f} ({min(values):.2f}-{max(values):.2f})" if values else "-")
        ratio = (f"{statistics.median(ways[paused]) / statistics.median(ways[python]):.2f}"
                 if ways.get(paused) and ways.get(python) and statistics.median(ways[python]) > 0 else "")
        print(f"{name:<32} {cells[0]:>20} {cells[1]:>20} {ratio:>7}")


if __name__ == "__main__":
    main()
