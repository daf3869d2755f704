#!/usr/bin/env python3
"""How close in time a told plan's gang draws its nodes' windows (4 nodes unless --nodes).

A plan told the recent capacity (`costsim plan --recent-share/--recent-trace`) replays, for each node of a gang,
a start of the group's traces weighed by how like the told past its own past was (costsim.ensemble.Starts).
Hourly starts next to each other are nearly one window, and a kernel that likes few pasts weighs a few runs of
them: drawn one by one by weight (`alone`, until 2026-12-07), two nodes of a gang often start within hours of each
other on one trace and in effect fail together. `Starts.gang` (the plan now) draws the other nodes among the starts
that share no hour with the gang's where those carry at least ensemble.MIN_APART of the weight. For a few told
pasts and every shipped group, this prints the share of gangs with two nodes starting within `--within` of each
other on one trace, both ways:

    PYTHONPATH=. python3 scripts/plan_gang_draws.py --horizon 144h --within 36h [--nodes 4]
"""

from __future__ import annotations

import argparse

import numpy as np

from costsim import ensemble
from costsim import validate as V
from costsim.catalog import offerings_for
from costsim.io.specs import load_workload
from costsim.units import parse_duration_s

PASTS = ((0.3, False), (0.6, True), (0.9, True))   # told shares, and whether capacity is there now (for 5 h)


def _closest(starts: ensemble.Starts, picks: list[int]) -> float:
    """The least time between two of the picks' starts on one trace (infinite where each is on its own)."""
    return min((abs(float(starts.offsets[a] - starts.offsets[b])) for i, a in enumerate(picks) for b in picks[i + 1:]
                if starts.traces[a] == starts.traces[b]), default=float("inf"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="sdxl")
    parser.add_argument("--gpu", default="H200")
    parser.add_argument("--horizon", default="144h", help="the plan's horizon (4 deadlines for the shipped SDXL)")
    parser.add_argument("--past", default="72h", help="--recent-past")
    parser.add_argument("--within", default="36h", help="nodes starting closer than this count as together")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gangs", type=int, default=300, help="gangs drawn a group and past")
    args = parser.parse_args()
    horizon, past, within = (parse_duration_s(getattr(args, f), source="plan_gang_draws", field=f"--{f}")
                             for f in ("horizon", "past", "within"))
    spec = V.market_of(offerings_for(load_workload(args.workload), (args.gpu,)))
    print(f"share of {args.nodes}-node gangs with two nodes starting within {args.within} on one trace: "
          f"drawn alone / Starts.gang")
    for share, up in PASTS:
        recent = ensemble.Recent(share=share, past_s=past, state=ensemble.State(up=up, age_s=5 * 3600.0))
        market = ensemble.build(ensemble.with_recent(spec, recent))
        told = market.conditioning(1)
        assert told is not None
        rng = np.random.default_rng(0)
        cells = []
        for name, starts in zip(market.names, told.starts):
            if starts is None:
                continue
            alone = [[int(rng.choice(len(starts.p), p=starts.p)) for _ in range(args.nodes)]
                     for _ in range(args.gangs)]
            apart = [starts.gang(rng, args.nodes, horizon) for _ in range(args.gangs)]
            together = [np.mean([_closest(starts, picks) < within for picks in way]) for way in (alone, apart)]
            cells.append(f"{name.split('/')[-1]} {together[0]:.0%}/{together[1]:.0%}")
        print(f"told {share:.0%} ({'up' if up else 'down'} 5 h): " + ", ".join(cells))


if __name__ == "__main__":
    main()
