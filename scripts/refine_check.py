"""How far the planner's second stage (costsim.planner.REFINE_MARGIN, REFINE_MISS) is from refining every group.

For each case, the plan as `costsim plan` makes it (the ensemble market, the default home weight, 400 trials), and
the same plan with every group's every checkpoint interval simulated (both margins unbounded, no screen): the
choice, its mean cost and the configurations simulated each way; then, over the exhaustive plan's spot groups, how
far one group's P(deadline) moves across its intervals (what REFINE_MISS must exceed) and how far the cheapest
interval's cost lies below the screen's pick (what REFINE_MARGIN must exceed for a group to win by an interval).
The flagship is the case the margins were set on; the others were not looked at when they were set.

Usage: python3 scripts/refine_check.py [--trials 400]
"""

from __future__ import annotations

import argparse
import time

import costsim.planner as planner
from costsim import io
from costsim.catalog import offerings_for, with_market
from costsim.ensemble import DEFAULT_HOME_WEIGHT
from costsim.io.catalog import load_catalog
from costsim.planner import SPOT_POLICIES, PlanOptions, group_key, plan

CASES = [   # (label, workload, GPU types or None, deadline h or None, risk or None)
    ("flagship (the margins were set on it)", "data/workloads/sdxl.yaml", None, None, None),
    ("H100 only", "data/workloads/sdxl.yaml", ("H100",), None, None),
    ("H200 only, deadline 12 h", "data/workloads/sdxl.yaml", ("H200",), 12.0, None),
    ("every GPU, risk 0.3", "data/workloads/sdxl.yaml", None, None, 0.3),
    ("tiny-drill", "data/workloads/tiny-drill.yaml", None, None, None),
]


def run(path: str, gpus, deadline_h, risk, trials: int, exhaustive: bool):
    spec = io.load_workload(path)
    profile = io.load_profile_for(spec.model, spec.profile)
    offerings = with_market(offerings_for(spec, gpus, load_catalog(None)), "ensemble", (), DEFAULT_HOME_WEIGHT)
    saved = planner.REFINE_MARGIN, planner.REFINE_MISS
    if exhaustive:
        planner.REFINE_MARGIN, planner.REFINE_MISS = float("inf"), 1.0
    try:
        started = time.perf_counter()
        result = plan(spec, profile, offerings, PlanOptions(
            trials=trials, seed=0, screen=not exhaustive, risk=risk,
            deadline_s=deadline_h * 3600.0 if deadline_h else None))
        return result, time.perf_counter() - started
    finally:
        planner.REFINE_MARGIN, planner.REFINE_MISS = saved


def describe(r) -> str:
    c = r.configured.candidate
    return f"{c.offering.id} {c.variant or '-'} x{c.nodes} {c.policy} ckpt={c.checkpoint_interval_s:.0f}s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=400)
    args = parser.parse_args()
    print(f"REFINE_MARGIN {planner.REFINE_MARGIN}, REFINE_MISS {planner.REFINE_MISS}, {args.trials} trials")
    for label, path, gpus, deadline_h, risk in CASES:
        default, t_default = run(path, gpus, deadline_h, risk, args.trials, exhaustive=False)
        every, t_every = run(path, gpus, deadline_h, risk, args.trials, exhaustive=True)
        print(f"\n== {label}")
        for name, result, wall in (("as planned", default, t_default), ("every interval", every, t_every)):
            chosen = (f"{describe(result.chosen)}  {result.chosen.stats.cost_mean:.2f} USD"
                      if result.chosen else "nothing meets the target")
            print(f"  {name:15s} {len(result.ranked):4d} simulated, {wall:5.1f} s: {chosen}")
        groups: dict = {}
        for r in every.ranked:
            if r.configured.candidate.policy in SPOT_POLICIES:
                groups.setdefault(group_key(r.configured), []).append(r)
        screened = {group_key(r.configured): r for r in screen_picks(every)}
        spread = [(max(x.stats.p_deadline for x in rows) - min(x.stats.p_deadline for x in rows), g)
                  for g, rows in groups.items() if len(rows) > 1]
        gain = [(1 - min(x.stats.cost_mean for x in rows) / screened[g].stats.cost_mean, g)
                for g, rows in groups.items() if len(rows) > 1]
        if spread:
            top, g = max(spread)
            print(f"  P(deadline) across one group's intervals: up to {100 * top:.1f} points ({' '.join(map(str, g))})")
            top, g = max(gain)
            print(f"  cheapest interval below the screen's pick: up to {100 * top:.1f}% ({' '.join(map(str, g))})")


def screen_picks(result) -> list:
    """The rows of `result` at the interval the analytic screen picks for each group (its lowest estimate)."""
    best: dict = {}
    for r in result.ranked:
        g = group_key(r.configured)
        if g not in best or r.configured.estimate_cost < best[g].configured.estimate_cost:
            best[g] = r
    return list(best.values())


if __name__ == "__main__":
    main()
