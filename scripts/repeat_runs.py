"""How well this machine repeats one run: the planner's plan for a workload, executed N times in a
row, with each run's wall time, start-up (launch to the first step) and mean steady step time, and
their spread. On a shared or virtual machine that spread, not the model, bounds how closely any
prediction can match one run (tests/test_calibrate_loop.py interleaves its runs for this reason).

Usage: python scripts/repeat_runs.py [--workload tiny] [--runs 6] [--steps 2000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from costsim.contract.telemetry import read_summary  # noqa: E402
from runner.report import measure  # noqa: E402


def spread(label: str, values: list[float], unit: str = "s") -> str:
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    jump = max((abs(b / a - 1) for a, b in zip(values, values[1:])), default=0.0)
    return (f"{label:<22} mean {mean:8.4g} {unit}  sd {sd / mean:6.1%}  range {min(values):.4g}-{max(values):.4g} {unit}"
            f"  largest change from one run to the next {jump:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="tiny", help="workload file or built-in name (CPU: tiny)")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=None, help="stop each run after this many steps")
    args = parser.parse_args()
    if args.runs < 2:
        parser.error("--runs: at least 2 (a spread needs two runs)")
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.json"
        subprocess.run([sys.executable, "-m", "costsim", "plan", "--workload", args.workload, "--trials", "10",
                        "--out", str(plan)], check=True, capture_output=True)
        walls, starts, steps = [], [], []
        for i in range(args.runs):
            run_dir = Path(tmp) / f"run{i}"
            extra = ["--steps", str(args.steps)] if args.steps else []
            subprocess.run([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run_dir), *extra],
                           check=True, capture_output=True)
            report = measure(run_dir)
            walls.append(read_summary(run_dir)["wall_s"])
            starts.append(report["startup_to_first_step_s"])
            steps.append(report["step_time_s"] * 1000)
            print(f"run {i + 1}: wall {walls[-1]:.2f} s, start-up {starts[-1]:.2f} s, step {steps[-1]:.3f} ms",
                  file=sys.stderr)
    print(f"{args.workload}: {args.runs} runs of one plan in a row on this machine")
    print(spread("wall time", walls))
    print(spread("start-up", starts))
    print(spread("steady step", steps, "ms"))


if __name__ == "__main__":
    main()
