"""How much the last day of a zone's spot capacity says about the next day and a half: for every shipped 2023
trace (data/traces/aws-2023-02-15), windows every 6 h, the share of the past 24 h with capacity against the
share of the next 36 h (the flagship's deadline), their correlation within each zone and pooled over zones.

A question for issue #39's per-group goal (a group-blind market cannot meet it, docs/model.md): would a plan
that knows the recent capacity where it will run come closer? `costsim plan --recent-trace` now uses it.

    PYTHONPATH=. python3 scripts/recent_capacity_signal.py [--past 24h] [--future 36h] [--stride 6h]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from costsim.errors import InputError
from costsim.io import data_dir
from costsim.io.specs import load_trace, traces_in
from costsim.units import parse_duration_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=data_dir() / "traces" / "aws-2023-02-15")
    parser.add_argument("--past", default="24h", help="how far back each window looks")
    parser.add_argument("--future", default="36h", help="how far ahead")
    parser.add_argument("--stride", default="6h", help="time between windows")
    args = parser.parse_args()
    pooled_x: list[float] = []
    pooled_y: list[float] = []
    try:
        hours = [parse_duration_s(getattr(args, name), source=f"--{name}", field=name) / 3600.0
                 for name in ("past", "future", "stride")]
        paths = traces_in(args.folder)
        traces = [(path, *load_trace(path)) for path in paths]
    except InputError as exc:
        raise SystemExit(f"recent_capacity_signal: {exc}") from None
    print(f"{'trace':<28} {'windows':>7} {'next share':>10} {'corr':>6}")
    for path, ticks, gap_s in traces:
        up = 1.0 - np.asarray(ticks, dtype=float)   # ticks: 0 = spot could be had, 1 = not
        per_h = 3600.0 / gap_s
        past, future, stride = (int(h * per_h) for h in hours)
        starts = range(past, len(up) - future + 1, max(stride, 1))
        if not starts:
            raise SystemExit(f"recent_capacity_signal: {path}: {len(up) / per_h:.0f} h, shorter than --past plus "
                             "--future")
        x = np.array([up[t - past:t].mean() for t in starts])
        y = np.array([up[t:t + future].mean() for t in starts])
        pooled_x += x.tolist()
        pooled_y += y.tolist()
        corr = np.corrcoef(x, y)[0, 1] if x.std() > 0 and y.std() > 0 else float("nan")
        print(f"{path.name:<28} {len(x):>7} {y.mean():>10.2f} {corr:>+6.2f}")
    print(f"{'pooled':<28} {len(pooled_x):>7} {np.mean(pooled_y):>10.2f} {np.corrcoef(pooled_x, pooled_y)[0, 1]:>+6.2f}")
    print(f"corr: the share of the past {args.past} with capacity against the share of the next {args.future}, "
          f"windows {args.stride} apart")


if __name__ == "__main__":
    main()
