"""Spot capacity as an alternating timeline of available and unavailable stretches.

One timeline per trial and offering. A spot instance acquired while capacity is available is
reclaimed when that available stretch ends; a new one can start when the next one begins. The
same reading fits a replayed trace (runs of 0 ticks are the stretches) and a hazard model (the
stretches are drawn: exponential or Weibull up-times, exponential waits). With exponential up-times
and no waits this is exactly a Poisson stream of preemptions, as Daly's analysis assumes.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

# Times closer than this are the same instant (timeouts accumulate rounding error).
_EPS = 1e-6


class Timeline:
    """Available stretches [start, end), in increasing order, extended lazily by `_extend`."""

    def __init__(self) -> None:
        self._starts: list[float] = []
        self._ends: list[float] = []
        self._known_until = 0.0
        self._exhausted = False

    def _extend(self) -> None:
        self._exhausted = True

    def _cover(self, t: float) -> None:
        while self._known_until <= t + _EPS and not self._exhausted:
            self._extend()

    def _index_after(self, t: float) -> int:
        """Index of the first stretch that ends after t."""
        self._cover(t)
        return bisect.bisect_right(self._ends, t + _EPS)

    def available(self, t: float) -> bool:
        """Whether a spot instance can be had at time t."""
        i = self._index_after(t)
        return i < len(self._starts) and self._starts[i] <= t + _EPS

    def next_available(self, t: float) -> float:
        """Earliest time >= t when capacity is available (inf if never again)."""
        i = self._index_after(t)
        if i >= len(self._starts):
            return math.inf
        return max(t, self._starts[i])

    def reclaim_time(self, t: float) -> float:
        """When an instance acquired at t (while available) is reclaimed (inf if never)."""
        i = self._index_after(t)
        if i >= len(self._starts) or self._starts[i] > t + _EPS:
            raise ValueError(f"no spot capacity at t={t}")
        return self._ends[i]

    def _append(self, start: float, end: float) -> None:
        if self._ends and start <= self._ends[-1] + _EPS:  # abutting stretches: a preemption
            if end - start > _EPS:                          # still separates them
                self._starts.append(self._ends[-1])
                self._ends.append(end)
        elif end - start > _EPS:
            self._starts.append(start)
            self._ends.append(end)
        self._known_until = max(self._known_until, end)


class AlwaysAvailable(Timeline):
    """On-demand and owned capacity: never reclaimed."""

    def __init__(self) -> None:
        super().__init__()
        self._append(0.0, math.inf)


class TraceTimeline(Timeline):
    """Replay of a 1-node capacity trace: 0 = spot available that tick, 1 = not."""

    def __init__(self, ticks: list[int], gap_s: float) -> None:
        super().__init__()
        run_start = None
        for index, value in enumerate(ticks):
            if value == 0 and run_start is None:
                run_start = index
            elif value != 0 and run_start is not None:
                self._append(run_start * gap_s, index * gap_s)
                run_start = None
        if run_start is not None:
            # Past the last tick nothing is known: capacity ends with the trace.
            self._append(run_start * gap_s, len(ticks) * gap_s)
        self._known_until = math.inf


@dataclass(frozen=True, kw_only=True, slots=True)
class HazardModel:
    """Drawn capacity for one node: up-times with mean `mtbf_s`, waits with mean `wait_mean_s`.

    shape == 1 gives exponential up-times; other shapes a Weibull of the same mean. For a gang of
    n nodes with independent reclaims, the gang's up-time is the minimum of n draws.
    """

    mtbf_s: float
    wait_mean_s: float = 0.0
    shape: float = 1.0

    def gang_scale_s(self, nodes: int) -> float:
        """Weibull scale of the minimum of `nodes` independent up-times."""
        scale_one = self.mtbf_s / math.gamma(1.0 + 1.0 / self.shape)
        return scale_one * nodes ** (-1.0 / self.shape)


class HazardTimeline(Timeline):
    """Capacity drawn from a HazardModel with a trial's own random stream."""

    _BLOCK = 64

    def __init__(self, model: HazardModel, rng: np.random.Generator, nodes: int = 1) -> None:
        super().__init__()
        self._model = model
        self._rng = rng
        self._scale_s = model.gang_scale_s(nodes)
        # Start in the stationary state: inside an outage with the long-run share of outage time.
        # (For Weibull up-times the first stretch is a fresh draw, not a residual life.)
        p_down = model.wait_mean_s / (model.mtbf_s + model.wait_mean_s)
        self._cursor = float(rng.exponential(model.wait_mean_s)) if rng.random() < p_down else 0.0

    def _extend(self) -> None:
        ups = self._scale_s * self._rng.weibull(self._model.shape, self._BLOCK)
        if self._model.wait_mean_s > 0:
            waits = self._rng.exponential(self._model.wait_mean_s, self._BLOCK)
        else:
            waits = np.zeros(self._BLOCK)
        for up, wait in zip(ups.tolist(), waits.tolist()):
            self._append(self._cursor, self._cursor + up)
            self._cursor += up + wait
        self._known_until = self._cursor
