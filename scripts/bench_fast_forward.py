"""The job model's fast-forward against its stepwise form, side by side in one run: every corner of the
safety grid (tests/policy_grid.py: the drill's 12.9 h job, saves every minute or hour, blocking) under both
deadline-aware policies, on Can't Be Late's 1,000 windows or on windows cut from other traces. Per corner:
the trials whose outcomes differ (finish, cost, preemptions, lost work; tests/test_fast_forward.py's
tolerance), the SimPy events and the wall time of each form, and the speed-up.

    PYTHONPATH=. python3 scripts/bench_fast_forward.py [--jobs 2]
    PYTHONPATH=. python3 scripts/bench_fast_forward.py --traces data/traces/aws-2023-02-15/*.json --every 24h
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costsim import io, policies  # noqa: E402
from costsim.sim.market import TraceTimeline  # noqa: E402
from costsim.sim.trial import run_trial  # noqa: E402
from costsim.units import parse_duration_s  # noqa: E402
from tests.policy_grid import PRICES, corners, windows  # noqa: E402
from tests.test_fast_forward import same  # noqa: E402

POLICIES = ("greedy", "uniform-progress")


def cut(paths: list[str], span_s: float, every_s: float) -> list[tuple[list[int], float]]:
    """Windows of span_s (the grid's windows' length) every every_s from each trace, as they happened."""
    found = []
    for path in paths:
        ticks, gap = io.load_trace(path)
        length, step = int(span_s // gap), max(1, int(every_s // gap))
        found += [(ticks[start:start + length], gap) for start in range(0, len(ticks) - length + 1, step)]
    return found


def corner(job: tuple[int, str, list[tuple[list[int], float]]]) -> tuple[int, str, int, list[float], list[int]]:
    index, name, traces = job
    params, policy = corners()[index].params(), policies.get(name)
    seconds, events, outcomes = [0.0, 0.0], [0, 0], []
    for fast_forward in (False, True):
        started = time.perf_counter()
        runs = [run_trial(params, policy, TraceTimeline(ticks, gap), PRICES, fast_forward=fast_forward)
                for ticks, gap in traces]
        seconds[fast_forward] = time.perf_counter() - started
        events[fast_forward] = sum(r.events for r in runs)
        outcomes.append(runs)
    differ = sum(not same(a, b) for a, b in zip(*outcomes))
    return index, name, differ, seconds, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--traces", nargs="+", help="trace files to cut windows from (default: the grid's 1,000)")
    parser.add_argument("--every", default="24h", help="with --traces: a window starts this often (default 24h)")
    args = parser.parse_args()
    grid = windows()
    span_s = len(grid[0][0]) * grid[0][1]
    every_s = parse_duration_s(args.every, source="bench_fast_forward", field="--every")
    traces = cut(args.traces, span_s, every_s) if args.traces else grid
    print(f"{len(traces)} windows of {span_s / 3600:.0f} h; {len(corners())} corners x "
          f"{len(POLICIES)} policies", flush=True)
    print(f"{'corner':76} {'policy':17} {'differ':>6} {'events step/fast':>19} {'s step':>7} {'s fast':>7} {'x':>5}")
    total_differ, total = 0, [0.0, 0.0]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        jobs = [(i, name, traces) for i in range(len(corners())) for name in POLICIES]
        for index, name, differ, seconds, events in pool.map(corner, jobs):
            total_differ += differ
            total = [total[0] + seconds[0], total[1] + seconds[1]]
            print(f"{corners()[index].label():76} {name:17} {differ:>6} {events[0]:>9,}/{events[1]:<9,} "
                  f"{seconds[0]:7.2f} {seconds[1]:7.2f} {seconds[0] / seconds[1]:5.2f}", flush=True)
    print(f"trials whose outcomes differ: {total_differ} of {len(traces) * len(jobs)}; stepwise {total[0]:.1f} s, "
          f"fast-forward {total[1]:.1f} s ({total[0] / total[1]:.2f}x)")


if __name__ == "__main__":
    main()
