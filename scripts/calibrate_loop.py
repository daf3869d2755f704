"""The closed loop with real runs on this machine: plan -> execute -> calibrate -> plan -> execute
(tiny workload, 2 CPU processes), printing how far each plan's P50 is from the runs it predicts.

A benchmark, not a test: a 2-vCPU VM repeats the same run only to 5-20% (`scripts/repeat_runs.py`),
so the runs are interleaved, A B A B A B, as side-by-side measurements are: the first plan's runs (A)
are calibrated and planned from; the second plan's runs (B) are what it predicts. No B run is in any
calibration. tests/test_calibrate_loop.py checks the same loop on telemetry made from known figures.

Usage: python scripts/calibrate_loop.py [--steps 2000] [--pairs 3] [--work DIR]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from costsim.contract.plan import Plan  # noqa: E402
from costsim.contract.telemetry import read_summary  # noqa: E402
from costsim.io.files import resolve  # noqa: E402


def run(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args[:3])} failed: {result.stderr[-2000:]}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="calibrate-loop-"))
    try:
        work.mkdir(parents=True, exist_ok=True)   # a folder named for the runs: made if it is not there yet
    except OSError as exc:
        raise SystemExit(f"calibrate_loop.py: --work {work}: cannot make it ({exc.strerror})") from None
    doc = yaml.safe_load(resolve("tiny", "workloads").read_text())
    doc.update(name=f"tiny-{args.steps}", samples=doc["global_batch"] * args.steps)
    workload = work / "workload.yaml"
    workload.write_text(yaml.safe_dump(doc))

    def plan(out: Path, *extra: str) -> Plan:
        run("costsim", "plan", "--workload", str(workload), "--trials", "10", "--out", str(out), *extra)
        return Plan.read(out)

    def execute(plan_path: Path, folder: Path) -> float:
        run("runner", "execute", str(plan_path), "--run-dir", str(folder))
        return read_summary(folder)["wall_s"]

    plan1 = plan(work / "plan1.json")
    a = [work / f"a{i}" for i in range(args.pairs)]
    a_walls = [execute(work / "plan1.json", a[0])]
    run("costsim", "calibrate", str(a[0]), "--out", str(work / "cal-a0.yaml"))
    plan(work / "plan2.json", "--profile", str(work / "cal-a0.yaml"))
    b_walls = []
    for i in range(args.pairs):
        b_walls.append(execute(work / "plan2.json", work / f"b{i}"))
        if i + 1 < args.pairs:
            a_walls.append(execute(work / "plan1.json", a[i + 1]))
    run("costsim", "calibrate", *map(str, a), "--out", str(work / "cal-a.yaml"))
    again = plan(work / "plan2-again.json", "--profile", str(work / "cal-a.yaml"))
    p1, p2 = plan1.prediction.makespan_s.p50, again.prediction.makespan_s.p50
    print(f"runs of {args.steps} steps in {work}")
    print(f"A (first plan, uncalibrated profile): walls {', '.join(f'{w:.2f}' for w in a_walls)} s; "
          f"plan P50 {p1:.2f} s = {p1 / statistics.median(a_walls):.3f} x their median")
    print(f"B (plan from the A runs' calibration): walls {', '.join(f'{w:.2f}' for w in b_walls)} s; "
          f"plan P50 {p2:.2f} s = {p2 / statistics.median(b_walls):.3f} x their median")
    print(f"run-to-run spread here: A {max(a_walls) / min(a_walls) - 1:.1%}, B {max(b_walls) / min(b_walls) - 1:.1%}")


if __name__ == "__main__":
    main()
