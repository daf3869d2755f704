"""Benchmark a workload's build for a fresh start against a resume's, side by side in one run.

A resume builds the model empty for the checkpoint to fill (`BuildContext.restoring`: built on the meta
device, then given storage; no initialisation, no weights read); a fresh start initialises it. Each
build runs in a fresh process, the two alternating, `--rounds` times: the workload's imports (the
worker's lean imports), then the build itself (model, optimizer, schedule), synchronised with the GPU.

Prints each round's figures and the medians, and the resume's build as a ratio to the fresh start's.
`--imports-against PACKAGES` adds, alternating with those, resumes whose build hides only PACKAGES (a
comma-separated list; empty: nothing) instead of the workload's declared `unused`, and prints the
imports' ratio: what hiding the others saves.

Usage (from the repository root):
  python scripts/bench_build.py                                     # sdxl-unet, the full 2.57B UNet (a GPU)
  python scripts/bench_build.py --option config=tests/data/tiny_unet_config.json --rounds 2   # a CPU check
  python scripts/bench_build.py --option config=tests/data/tiny_unet_config.json --imports-against peft,transformers
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import torch
from runner.workloads import BuildContext, build_workload, lean_imports, resolve
workload, restoring, options = sys.argv[1], sys.argv[2] == "resume", json.loads(sys.argv[3])
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
builder = resolve(workload)
if len(sys.argv) > 4:   # --imports-against: these packages hidden instead of the ones the workload declares
    builder.unused = tuple(name for name in sys.argv[4].split(",") if name)
ctx = BuildContext(rank=0, world_size=1, device=device, micro_batch=8, accumulation=8, seed=0, precision="bf16",
                   options=options, total_steps=100, restoring=restoring)
started = time.perf_counter()
with lean_imports(builder):
    if workload == "sdxl-unet":
        from diffusers import UNet2DConditionModel  # noqa: F401
imported = time.perf_counter()
with lean_imports(builder):
    built = build_workload(builder, ctx)
if device.type == "cuda":
    torch.cuda.synchronize()
done = time.perf_counter()
print(json.dumps({"imports_s": imported - started, "build_s": done - imported, "empty": built.empty}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="sdxl-unet")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a workload option, as `runner execute --option` takes it")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--imports-against", metavar="PACKAGES",
                        help="also resumes hiding only these packages (comma-separated) while they build")
    args = parser.parse_args()
    options = dict(item.split("=", 1) for item in args.option)
    figures: dict[str, list[dict]] = {"fresh": [], "resume": []}
    if args.imports_against is not None:
        figures["against"] = []
    for round_ in range(args.rounds):
        for kind in figures:
            against = [args.imports_against] if kind == "against" else []
            child = subprocess.run([sys.executable, "-c", CHILD, args.workload, "resume" if kind == "against" else kind,
                                    json.dumps(options), *against], capture_output=True, text=True)
            if child.returncode != 0:
                raise SystemExit(f"{kind} build failed:\n{child.stderr[-3000:]}")
            result = json.loads(child.stdout.strip().splitlines()[-1])
            figures[kind].append(result)
            print(f"round {round_ + 1} {kind:<7} imports {result['imports_s']:6.2f} s   build {result['build_s']:6.2f} s"
                  f"   empty {result['empty']}", flush=True)
    medians = {kind: statistics.median(r["build_s"] for r in rows) for kind, rows in figures.items()}
    for kind in figures:
        print(f"{kind:<6} median build {medians[kind]:6.2f} s")
    print(f"resume build / fresh build: {medians['resume'] / medians['fresh']:.2f}")
    if "against" in figures:
        imports = {kind: statistics.median(r["imports_s"] for r in figures[kind]) for kind in ("resume", "against")}
        print(f"imports: {imports['resume']:.2f} s hiding the workload's unused packages, {imports['against']:.2f} s "
              f"hiding {args.imports_against or 'nothing'}: {imports['resume'] / imports['against']:.2f}")


if __name__ == "__main__":
    main()
