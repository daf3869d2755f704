"""Benchmark the runner's overhead: the tiny workload through `runner execute` and through a bare
hand-written DDP loop of the same model, interleaved in one run (2 CPU processes, gloo).

Prints samples/s of each, their ratio with checkpointing off (aim >= 0.97), and the cost of
checkpointing at the plan's interval (sync and async). Steady state only: the first WARMUP steps
are excluded from both.

Usage: python scripts/bench_runner.py [--steps 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from costsim.contract.plan import Plan  # noqa: E402
from costsim.contract.telemetry import read_events  # noqa: E402

WARMUP = 100


def planned(folder: Path) -> Path:
    out = folder / "plan.json"
    subprocess.run([sys.executable, "-m", "costsim", "plan", "--workload", "tiny", "--trials", "10", "--out", str(out)],
                   check=True, capture_output=True)
    return out


def make_plan(folder: Path, *, interval_s: float | None, async_mode: bool) -> Path:
    out = planned(folder)
    plan = Plan.read(out)
    # no interval: checkpointing off (only the final save, which is not measured)
    checkpoint = replace(plan.checkpoint, interval_s=1e9 if interval_s is None else interval_s, async_=async_mode)
    return replace(plan, checkpoint=checkpoint).write(out)


def runner_rate(plan: Path, steps: int, run_dir: Path) -> tuple[float, float]:
    subprocess.run([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run_dir), "--steps",
                    str(steps)], check=True, capture_output=True)
    events = read_events(run_dir)
    step_events = [e for e in events if e["event"] == "step" and e["step"] > WARMUP]
    seconds = sum(e["step_time_s"] for e in step_events)
    stall = sum(e.get("stall_s", 0) for e in events if e["event"] == "checkpoint_save" and e.get("rank") == 0
                and e.get("reason") == "interval")
    return len(step_events) * 64 / seconds, stall


def bare_rate(steps: int) -> float:
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          str(ROOT / "scripts" / "bare_ddp_loop.py"), "--steps", str(steps), "--warmup", str(WARMUP)],
                         check=True, capture_output=True, text=True, env={**__import__("os").environ,
                                                                          "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in ("plan", "off", "sync", "async"):
            (tmp / name).mkdir()
        interval_s = Plan.read(planned(tmp / "plan")).checkpoint.interval_s
        plans = {"off": make_plan(tmp / "off", interval_s=None, async_mode=False),
                 "sync": make_plan(tmp / "sync", interval_s=interval_s, async_mode=False),
                 "async": make_plan(tmp / "async", interval_s=interval_s, async_mode=True)}
        rows = {name: [] for name in ("bare", "off", "sync", "async")}
        stalls = {"sync": [], "async": []}
        for repeat in range(args.repeats):
            rows["bare"].append(bare_rate(args.steps))
            for name in ("off", "sync", "async"):
                rate, stall = runner_rate(plans[name], args.steps, tmp / f"{name}-{repeat}")
                rows[name].append(rate)
                if name in stalls:
                    stalls[name].append(stall)
            print(f"repeat {repeat}: " + "  ".join(f"{k} {v[-1]:,.0f}" for k, v in rows.items()) + " samples/s",
                  file=sys.stderr)
        bare = statistics.median(rows["bare"])
        print(f"tiny workload, {args.steps} steps ({WARMUP} warm-up excluded), 2 gloo processes, median of {args.repeats}")
        print(f"{'loop':<34}{'samples/s':>12}{'ratio to bare':>15}{'ckpt stall s':>14}")
        print(f"{'bare hand-written DDP loop':<34}{bare:>12,.0f}{1.0:>15.3f}{'':>14}")
        labels = {"off": "runner, checkpointing off", "sync": f"runner, sync ckpt every {interval_s:g} s",
                  "async": f"runner, async ckpt every {interval_s:g} s"}
        for name, label in labels.items():
            rate = statistics.median(rows[name])
            stall = f"{statistics.median(stalls[name]):.3f}" if name in stalls else ""
            print(f"{label:<34}{rate:>12,.0f}{rate / bare:>15.3f}{stall:>14}")
        print(f"(checkpoint interval {interval_s:g} s: the plan's, from data/workloads/tiny.yaml)")


if __name__ == "__main__":
    main()
