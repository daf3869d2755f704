#!/usr/bin/env python3
"""Inductor's generated modules loaded from kept bytecode (runner.inductor_bytecode, the default) against compiled from
source at every start (COSTSIM_INDUCTOR_BYTECODE=0), side by side: the SDXL UNet built from its config (random
weights) under compile=model, from one warm compile cache, each start a process of its own
(scripts/bench_precompile.py's), in the order on off off on after one cold start that fills the cache:

    python3 scripts/bench_inductor_bytecode.py [--device cuda] [--mode default|reduce-overhead] [--config FILE|narrow]
        [--batch N] [--way precompile|plain] [--rounds N]

Prints each start's first step, the seconds its process spent in PyCodeCache.load_by_key_path (torch's loader of
the generated modules: the wrapper code and, on a GPU, each Triton kernel's module) and what the kept bytecode did,
then the ratios kept / compiled of the means, and whether the losses agree. On the 2-core CPU machine:
`--config narrow --batch 1` (SDXL's blocks and depth at a narrow width: the wrappers' size of the whole model;
its cold start takes about 5 minutes there); on a GPU the defaults (the full SDXL UNet) with `--device cuda --mode
reduce-overhead`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRECOMPILE_BENCH = ROOT / "scripts" / "bench_precompile.py"


def start(child: list[str], cache: str, kept: bool) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "COSTSIM_INDUCTOR_BYTECODE": "1" if kept else "0"}
    done = subprocess.run(child, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": done.stderr.strip()[-800:]}


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--mode", default="default", choices=["default", "reduce-overhead"])
    parser.add_argument("--config", default=None, help="the UNet's config (default: SDXL's), or narrow")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="steady steps after the first (default 2)")
    parser.add_argument("--way", default="precompile", choices=["precompile", "plain"],
                        help="runtime.precompile on (the H100 profile's graphs) or off (Inductor's caches alone)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of on off off on (default 1)")
    args = parser.parse_args()
    if args.mode == "reduce-overhead" and not args.device.startswith("cuda"):
        parser.error("--mode reduce-overhead records CUDA graphs: give --device cuda, or use --mode default")
    if args.rounds < 1 or args.batch < 1 or args.steps < 0:
        parser.error("--rounds and --batch take 1 or more, --steps 0 or more")
    child = [sys.executable, str(PRECOMPILE_BENCH), "--device", args.device, "--mode", args.mode, "--batch",
             str(args.batch), "--steps", str(args.steps), "--one", args.way,
             *(["--config", args.config] if args.config else [])]
    runs: dict[bool, list[dict]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="bench-inductor-bytecode-") as cache:
        print("cold start (fills the compile cache and the kept bytecode): running", file=sys.stderr, flush=True)
        cold = start(child, cache, kept=True)
        print(f"cold       {json.dumps(cold)}", flush=True)
        if "error" in cold:
            sys.exit(f"error: the cold start failed: {cold['error']}")
        for kept in [True, False, False, True] * args.rounds:
            result = start(child, cache, kept)
            label = "kept" if kept else "compiled"
            print(f"{label:10} {json.dumps(result)}", flush=True)
            if "error" in result:
                sys.exit(f"error: a {label} start failed: {result['error']}")
            runs[kept].append(result)
    on, off = runs[True], runs[False]
    for figure in ("first_step_s", "module_loads_s"):
        a, b = [r[figure] or 0.0 for r in on], [r[figure] or 0.0 for r in off]
        ratio = f"{mean(a) / mean(b):.3f}" if mean(b) else "n/a"
        print(f"{figure}: kept {mean(a):.3f} s against compiled {mean(b):.3f} s (kept / compiled {ratio}; "
              f"each: {', '.join(f'{x:.3f}' for x in a)} against {', '.join(f'{x:.3f}' for x in b)})")
    losses = [r["losses"] for r in on + off]
    worst = max(abs(x - y) / max(abs(y), 1e-12) for other in losses[1:] for x, y in zip(other, losses[0]))
    print(f"losses, the largest relative difference between the starts: {worst:.2e}")


if __name__ == "__main__":
    main()
