#!/usr/bin/env python3
"""How far apart in time `costsim validate --recent-past` puts a gang's windows (2 nodes unless --nodes).

Told the recent capacity, the validation replays a gang's other nodes on other windows of the same bin (the same
past share, state and state age, binned: costsim.validate._told_replays). A bin's windows may lie close together
on one trace; where two nodes' windows overlap, the nodes saw some of the same hours, and the gang is more like one
node than the plan's independent nodes. `costsim.validate.apart_partners` moves each partner on to a window that
shares no hour with the gang's where the bin has one (the fewest hours where it has none; where the bin has fewer
windows than the gang, the windows whose past the told plan weighs most). This prints, for each shipped group, the
windows told and their bins, and for the partners spread evenly over the bin (`even`) and as validate pairs them
(`apart`): the share of gangs with two windows that start within `--within` of each other on the same trace, within
the horizon, and that are the same window (`itself`).

    PYTHONPATH=. python3 scripts/gang_partners.py --horizon 144h --within 36h [--nodes 4]

The validation's windows are as long as the plan's horizon (costsim.planner: 4 deadlines, 144 h for the shipped
SDXL workload); the job itself runs in their first hours (its deadline, 36 h).
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from costsim import ensemble
from costsim import validate as V
from costsim.catalog import offerings_for
from costsim.io.specs import load_workload
from costsim.units import parse_duration_s


def _gap(group, told, a: int, b: int) -> float:
    """How far apart windows a and b of `told` start: infinite on different traces (0: one window twice)."""
    if a == b:
        return 0.0
    same = group.windows[told[a][0]].starts is group.windows[told[b][0]].starts
    return abs(told[a][1] - told[b][1]) if same else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="sdxl")
    parser.add_argument("--gpu", default="H200")
    parser.add_argument("--horizon", default="144h", help="the windows' length (the plan's horizon)")
    parser.add_argument("--stride", default="6h")
    parser.add_argument("--past", default="72h", help="--recent-past")
    parser.add_argument("--within", default="36h", help="partners starting closer than this count as overlapping")
    parser.add_argument("--home-weight", type=float, default=3.0)
    parser.add_argument("--nodes", type=int, default=2, help="the gang's nodes")
    parser.add_argument("--bandwidth", type=float, default=ensemble.DEFAULT_RECENT_BANDWIDTH, help="--recent-bandwidth")
    args = parser.parse_args()
    horizon, stride, past, within = (parse_duration_s(getattr(args, f), source="gang_partners", field=f"--{f}")
                                     for f in ("horizon", "stride", "past", "within"))
    spec = V.market_of(offerings_for(load_workload(args.workload), (args.gpu,)))
    print(f"{'group':<18} {'told':>5} {'bins':>5} {'median bin':>10}   even: within, horizon, itself"
          f"   apart: within, horizon, itself")
    for name in spec.group_names:
        _, group_spec = V.without_group(spec, name, args.home_weight)
        group = ensemble.build_group(group_spec)
        starts = V.window_starts(group, horizon, stride)
        shares, states = V.window_past_shares(group, horizon, stride, past, starts), V.window_states(group, past, starts)
        bins = V._recent_bins(shares, states)
        gaps: dict[str, list[float]] = {"even": [], "apart": []}
        for b in np.unique(bins[bins >= 0]).tolist():
            members = np.flatnonzero(bins == b)
            told_past = ensemble.Recent(share=float(np.mean(shares[members])), past_s=past, bandwidth=args.bandwidth,
                                        state=V._mean_state([states[i] for i in members.tolist()]))
            pool, rank = V._partner_pool(members, V._likeness(told_past, shares, states), args.nodes)
            told = [starts[i] for i in pool]
            paired = {"even": [V.spread_partners(j, len(members), args.nodes) for j in range(len(members))],
                      "apart": V.apart_partners(group, told, horizon, args.nodes, heads=len(members), rank=rank)}
            for way, partners in paired.items():
                for j, others in enumerate(partners):
                    gang = [j, *others]   # the closest two of the gang's windows
                    gaps[way].append(min(_gap(group, told, gang[x], gang[y]) for x in range(len(gang))
                                         for y in range(x + 1, len(gang))))
        sizes = collections.Counter(bins[bins >= 0].tolist())
        cells = []
        for way in ("even", "apart"):
            g = np.array(gaps[way])
            cells.append(f"{np.mean(g < within):>6.0%} {np.mean(g < horizon):>8.0%} {np.mean(g == 0):>7.0%}")
        print(f"{name:<18} {len(gaps['even']):>5} {len(sizes):>5} {int(np.median(list(sizes.values()))):>10}   "
              f"{cells[0]}   {cells[1]}")

if __name__ == "__main__":
    main()
