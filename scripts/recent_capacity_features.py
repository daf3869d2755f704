"""Would more than the recent share help? An offline check on the nine shipped 2023 zones, leave one zone out.

For every hourly start with 72 h of past in a zone's trace, the outcome proxy is whether the next 36 h (the
flagship's deadline) had capacity more than half the time. Each held-out zone's starts (every sixth) are told,
from the other zones' starts, the kernel-weighted mean outcome of starts whose past was alike: by the 72 h share
alone (width 0.1, as `costsim plan --recent-share`), by it and whether capacity is there at the start, or by it and
the last 6 h's share (width 0.2). Prints each way's mean |predicted - realised| over the zones and each zone's error.
No torch, no simulation: a quick screen before building a feature into costsim.ensemble.Recent.

    python3 scripts/recent_capacity_features.py
"""

from __future__ import annotations

import glob

import numpy as np

from costsim.io.files import data_dir
from costsim.io.specs import load_trace

PAST_S, HORIZON_S, STRIDE_S, SHORT_S = 72 * 3600, 36 * 3600, 3600, 6 * 3600


def features(available: np.ndarray, gap_s: float) -> np.ndarray:
    """Rows of (72 h share, available at the start, 6 h share, outcome) for every start STRIDE_S apart."""
    past, horizon, stride, short = (int(x / gap_s) for x in (PAST_S, HORIZON_S, STRIDE_S, SHORT_S))
    return np.array([(available[i - past:i].mean(), available[i - 1], available[i - short:i].mean(),
                      float(available[i:i + horizon].mean() > 0.5))
                     for i in range(past, len(available) - horizon, stride)])


def kernel(distance: np.ndarray, width: float) -> np.ndarray:
    return np.exp(-0.5 * (distance / width) ** 2)


def main() -> None:
    zones = {}
    for path in sorted(glob.glob(str(data_dir() / "traces" / "aws-2023-02-15" / "*.json"))):
        ticks, gap_s = load_trace(path)
        zones[path.rsplit("/", 1)[-1].split("_")[0]] = features((np.array(ticks) == 0).astype(float), gap_s)
    for way in ("share", "share+state", "share+6h"):
        errors = []
        for zone, mine in zones.items():
            others = np.vstack([rows for other, rows in zones.items() if other != zone])
            predicted = []
            for row in mine[::6]:
                weight = kernel(others[:, 0] - row[0], 0.1)
                if way == "share+state":
                    weight = weight * (others[:, 1] == row[1])
                elif way == "share+6h":
                    weight = weight * kernel(others[:, 2] - row[2], 0.2)
                predicted.append(float(np.sum(weight * others[:, 3]) / max(float(weight.sum()), 1e-12)))
            errors.append(float(np.mean(predicted)) - float(mine[::6, 3].mean()))
        print(f"{way:<12} mean |error| {np.mean(np.abs(errors)):.3f}  " +
              " ".join(f"{zone} {e:+.2f}" for zone, e in zip(zones, errors)))


if __name__ == "__main__":
    main()
