#!/usr/bin/env python3
"""How far apart in time `costsim validate --recent-past` puts a 2-node gang's two windows.

Told the recent capacity, the validation replays a gang's other node on another window of the same bin (the same
past share, state and state age, binned: costsim.validate._told_replays). A bin's windows may lie close together
on one trace; where the two nodes' windows overlap, the nodes saw some of the same hours, and the gang is more
like one node than the plan's independent nodes. `costsim.validate.apart_partners` moves the partner on to a
window that shares no hour with the first where the bin has one. This prints, for each shipped group, the windows
told and their bins, and for the partners spread evenly over the bin (`even`) and as validate pairs them (`apart`):
the share whose partner starts within `--within` of the window on the same trace, and within the horizon.

    PYTHONPATH=. python3 scripts/gang_partners.py --horizon 144h --within 36h

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="sdxl")
    parser.add_argument("--gpu", default="H200")
    parser.add_argument("--horizon", default="144h", help="the windows' length (the plan's horizon)")
    parser.add_argument("--stride", default="6h")
    parser.add_argument("--past", default="72h", help="--recent-past")
    parser.add_argument("--within", default="36h", help="partners starting closer than this count as overlapping")
    parser.add_argument("--home-weight", type=float, default=3.0)
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
        bins = V._recent_bins(V.window_past_shares(group, horizon, stride, past, starts),
                              V.window_states(group, past, starts))
        gaps: dict[str, list[float]] = {"even": [], "apart": []}
        for b in np.unique(bins[bins >= 0]).tolist():
            members = np.flatnonzero(bins == b).tolist()
            told = [starts[i] for i in members]
            paired = {"even": [V.spread_partners(j, len(told), 2) for j in range(len(told))],
                      "apart": V.apart_partners(group, told, horizon, 2)}
            for way, partners in paired.items():
                for j, (k,) in enumerate(partners):
                    same = group.windows[told[j][0]].starts is group.windows[told[k][0]].starts
                    gaps[way].append(abs(told[j][1] - told[k][1]) if same else float("inf"))
        sizes = collections.Counter(bins[bins >= 0].tolist())
        cells = []
        for way in ("even", "apart"):
            g = np.array(gaps[way])
            cells.append(f"{np.mean(g < within):>6.0%} {np.mean(g < horizon):>8.0%} {np.mean(g == 0):>7.0%}")
        print(f"{name:<18} {len(gaps['even']):>5} {len(sizes):>5} {int(np.median(list(sizes.values()))):>10}   "
              f"{cells[0]}   {cells[1]}")

if __name__ == "__main__":
    main()
