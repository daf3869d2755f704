"""Would a plan that knows the last day's capacity where it runs state P(deadline) closer to each group's truth?

An offline check for issue #39's per-group goal, before any planner change. The flagship's spot-only
configuration (the shipped SDXL workload on H200, one node, the plan's own figures) is replayed on every real
window of every long trace of the shipped market (windows `--stride` apart, as `costsim validate` does), and
each window's past share (of the `--past` hours before its start, the share with capacity) is recorded. Then,
leaving each group out in turn, its windows' P(deadline) is stated two ways from the other groups' windows
only, each group weighing the same as in the ensemble:

- blind: the share of the other groups' windows that met the deadline (what a replay-only market that does not
  know the group states, the same for every window);
- recent: the same share, each window weighed by a Gaussian kernel (bandwidth `--bandwidth`) of how far its
  past share is from the held-out window's own past share (what a plan given the last day would state);
- state: as recent, each window's weight also times 0 where its state just before its start (capacity or not)
  differs from the held-out window's, and times a Gaussian kernel of the distance of the states' ages in
  log(1 + hours) (`ensemble.Recent.kernel`, width ensemble.AGE_BANDWIDTH): what a plan given a trace of its
  market up to now states (`costsim plan --recent-trace`).

With `--home-weight W`, each way weighs the other groups measured in the held-out group's region W times the rest
(what a plan for a job in that region states: costsim.ensemble.MarketSpec.at_home; 1, the default here, weighs
every group the same, as the check did before the planner had it).

Per group it prints the realised share and each statement's error (stated - realised); the per-group goal is
|error| <= 0.05. A bundle's windows (the 2022 period) are stitched into the trace they were cut from
(`io.specs.bundle_timeline`) and count where they have the past (947 of 1,000 with 24 h). It was the check before
the planner had it; `costsim plan --recent-trace` and `costsim validate --recent-past` now do this with whole
plans (docs/model.md).

    PYTHONPATH=. python3 scripts/recent_capacity_forecast.py [--past 24h] [--bandwidth 0.1] [--trials 200]
        [--home-weight 3]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np

from costsim import ensemble, io
from costsim.catalog import offerings_for
from costsim.errors import InputError
from costsim.io.catalog import load_catalog
from costsim.planner import PlanOptions, plan
from costsim.units import parse_duration_s
from costsim.validate import (
    market_for_validation,
    market_of,
    realised,
    replay_timelines,
    window_starts,
    window_states,
    without_group,
)
from costsim.validate import window_past_shares as past_shares

GOAL = 0.05


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--past", default="24h", help="how far back a window's past share looks")
    parser.add_argument("--stride", default="6h", help="real windows start this far apart")
    parser.add_argument("--bandwidth", type=float, default=0.1, help="the kernel's width, in past share")
    parser.add_argument("--trials", type=int, default=200, help="the plan's trials (its figures, not its market)")
    parser.add_argument("--home-weight", type=float, default=1.0,
                        help="how many times more the held-out group's region's other groups weigh")
    args = parser.parse_args()
    if not args.home_weight > 0:
        sys.exit(f"recent_capacity_forecast: --home-weight {args.home_weight}: allowed a number > 0")
    try:
        past_s = parse_duration_s(args.past, source="--past", field="past")
        stride_s = parse_duration_s(args.stride, source="--stride", field="stride")
    except InputError as exc:
        sys.exit(f"recent_capacity_forecast: {exc}")
    if not args.bandwidth > 0:
        sys.exit(f"recent_capacity_forecast: --bandwidth {args.bandwidth}: allowed a number > 0")
    if args.trials < 1:
        sys.exit(f"recent_capacity_forecast: --trials {args.trials}: allowed a whole number >= 1")

    spec = io.load_workload("sdxl")
    profile = io.load_profile_for(spec.model, spec.profile)
    offerings = market_for_validation(offerings_for(spec, ("H200",), load_catalog(None)), "ensemble", (), None)
    result = plan(spec, profile, offerings, PlanOptions(trials=args.trials, seed=0, policies=("spot-only",),
                                                         nodes=(1,)))
    chosen = result.chosen or result.ranked[0]
    config = chosen.configured.config
    horizon_s = config.params.horizon_s
    print(f"replaying {chosen.configured.candidate.label} (deadline {result.deadline_s / 3600:.1f} h) on every "
          f"window {args.stride} apart; past {args.past}, bandwidth {args.bandwidth:g}", file=sys.stderr)

    # name -> (met, past share, up, state's age) of its windows with a past
    groups: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    spec = market_of(offerings)
    for group_spec in spec.groups:
        group = ensemble.build_group(group_spec)
        starts = window_starts(group, horizon_s, stride_s)
        shares = past_shares(group, horizon_s, stride_s, past_s, starts)
        states = window_states(group, past_s, starts)
        _, _, met = realised(config, replay_timelines(group, horizon_s, stride_s, 1, starts))
        keep = ~np.isnan(shares)
        if keep.any():
            ups = np.array([s.up if s is not None else False for s in states])
            ages = np.array([s.age_s if s is not None else 0.0 for s in states])
            groups[group.name] = (met[keep].astype(float), shares[keep], ups[keep], ages[keep])
    if len(groups) < 2:
        sys.exit(f"recent_capacity_forecast: {len(groups)} group(s) have windows with {args.past} of past before "
                 "them: leaving one out needs two; give a shorter --past")

    print(f"{'left out':<22} {'windows':>7} {'realised':>8} {'blind':>7} {'error':>7} {'recent':>7} {'error':>7} "
          f"{'state':>7} {'error':>7}")
    rows = []
    for name, (met, shares, ups, ages) in groups.items():
        others = [groups[o] for o in groups if o != name]
        # the others' weights as a plan for a job in the held-out group's region gives them (in `groups`' order)
        home = without_group(replace(spec, groups=tuple(g for g in spec.groups if g.name in groups)), name,
                             args.home_weight)[0].prior()
        blind = float(np.average([o[0].mean() for o in others], weights=home))
        stated: dict[bool, list[float]] = {False: [], True: []}
        for share, up, age in zip(shares.tolist(), ups.tolist(), ages.tolist()):
            for with_state in (False, True):
                told = ensemble.Recent(share=share, past_s=past_s, bandwidth=args.bandwidth,
                                       state=ensemble.State(up=up, age_s=age) if with_state else None)
                num = den = 0.0
                for (m, s, u, a), w in zip(others, home.tolist()):
                    kernel = w * told.kernel(s, u, a) / len(m)   # each group weighs the same (but its region's)
                    num += float(np.sum(kernel * m))
                    den += float(np.sum(kernel))
                stated[with_state].append(num / den if den > 0 else blind)
        recent, state = (float(np.mean(stated[k])) for k in (False, True))
        truth = float(met.mean())
        rows.append((blind - truth, recent - truth, state - truth))
        print(f"{name:<22} {len(met):>7} {truth:>8.3f} {blind:>7.3f} {blind - truth:>+7.3f} {recent:>7.3f} "
              f"{recent - truth:>+7.3f} {state:>7.3f} {state - truth:>+7.3f}")
    errors = [np.abs([r[i] for r in rows]) for i in (0, 1, 2)]
    print("mean |error|: " + ", ".join(f"{label} {e.mean():.3f}" for label, e in zip(("blind", "recent", "state"), errors))
          + f"; groups within {GOAL}: " + ", ".join(f"{label} {int((e <= GOAL).sum())} of {len(rows)}"
                                                   for label, e in zip(("blind", "recent", "state"), errors)))


if __name__ == "__main__":
    main()
