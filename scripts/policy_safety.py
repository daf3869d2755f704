"""What deadline safety costs: the safe Greedy and Uniform Progress against the authors' rules (Can't
Be Late, NSDI'24: tests/cbl_reference.py) on all 1,000 real windows, under every corner of the grid of
overheads of tests/policy_grid.py (the drill's 12.9 h job), and in the paper's own setting.

    python3 scripts/policy_safety.py [--jobs 2]

Prints per corner and policy: deadlines met of 1,000 and the mean cost, safe and the authors'; then,
per policy, the windows met in all and the mean cost over the corners where the authors' rules met
every deadline (what safety costs where it was not needed) and over all corners.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costsim import policies  # noqa: E402
from costsim.sim.job import JobParams  # noqa: E402
from costsim.sim.market import TraceTimeline  # noqa: E402
from costsim.sim.trial import run_trial  # noqa: E402
from tests.cbl_reference import REFERENCE  # noqa: E402
from tests.policy_grid import PRICES, run_grid, windows  # noqa: E402

H = 3600.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    started = time.time()
    safe, authors = run_grid(jobs=args.jobs), run_grid(reference=True, jobs=args.jobs)
    print(f"{'policy':17} {'corner':76} {'met':>5} {'cost':>7} | {'authors met':>11} {'cost':>7} | on-demand")
    for s, a in zip(safe, authors):
        print(f"{s.policy:17} {s.corner.label():76} {int(s.met.sum()):5d} {s.cost.mean():7.2f} | "
              f"{int(a.met.sum()):11d} {a.cost.mean():7.2f} | {s.on_demand_cost:8.2f}")
    for name in ("greedy", "uniform-progress"):
        pairs = [(s, a) for s, a in zip(safe, authors) if s.policy == name]
        both = [(s, a) for s, a in pairs if a.met.all()]
        print(f"{name}: safe met {sum(int(s.met.sum()) for s, _ in pairs)} of {1000 * len(pairs)} window-corners, "
              f"the authors' rules {sum(int(a.met.sum()) for _, a in pairs)}; mean cost over all corners "
              f"{np.mean([s.cost.mean() for s, _ in pairs]):.2f} against {np.mean([a.cost.mean() for _, a in pairs]):.2f}; "
              f"over the {len(both)} corners where the authors' rules met every deadline "
              f"{np.mean([s.cost.mean() for s, _ in both]):.2f} against {np.mean([a.cost.mean() for _, a in both]):.2f} "
              f"({np.mean([s.cost.mean() for s, _ in both]) / np.mean([a.cost.mean() for _, a in both]) - 1:+.1%})")
    params = JobParams(work_s=48 * H, deadline_s=52 * H, checkpoint_interval_s=H, checkpoint_s=0.0,
                       changeover_s=0.1 * H, horizon_s=400 * H)
    traces = windows()
    for name in ("greedy", "uniform-progress"):
        ours = [run_trial(params, policies.get(name), TraceTimeline(t, g), PRICES) for t, g in traces]
        theirs = [run_trial(params, REFERENCE[name], TraceTimeline(t, g), PRICES) for t, g in traces]
        a, b = np.mean([r.cost for r in ours]), np.mean([r.cost for r in theirs])
        print(f"paper's setting (48 h job, 52 h deadline, 0.1 h changeover), {name}: mean cost {a:.2f} against the "
              f"authors' {b:.2f} ({a / b - 1:+.2%}); met {sum(r.met_deadline for r in ours)} and "
              f"{sum(r.met_deadline for r in theirs)} of 1000")
    print(f"({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
