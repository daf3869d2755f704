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


class ArrayTimeline(Timeline):
    """Stretches known up front (a replayed window, a drawn one, a gang's): none after the last."""

    def __init__(self, starts, ends) -> None:
        super().__init__()
        for start, end in zip(starts, ends):
            self._append(float(start), float(end))
        self._known_until = math.inf


WAIT_FAMILIES = ("exponential", "weibull", "lognormal")


@dataclass(frozen=True, kw_only=True, slots=True)
class HazardModel:
    """Drawn capacity for one node: up-times with mean `mtbf_s`, waits with mean `wait_mean_s`.

    shape == 1 gives exponential up-times; other shapes a Weibull of the same mean. For a gang of
    n nodes with independent reclaims, the gang's up-time is the minimum of n draws. Waits are
    exponential, or a Weibull (`wait_shape` its shape) or a lognormal (`wait_shape` its sigma) of
    the same mean: day-long outages are commoner than an exponential allows.
    """

    mtbf_s: float
    wait_mean_s: float = 0.0
    shape: float = 1.0
    wait_family: str = "exponential"
    wait_shape: float = 1.0

    def draw_waits(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n outage lengths of mean `wait_mean_s`."""
        mean = self.wait_mean_s
        if mean <= 0:
            return np.zeros(n)
        if self.wait_family == "weibull":
            return mean / math.gamma(1.0 + 1.0 / self.wait_shape) * rng.weibull(self.wait_shape, n)
        if self.wait_family == "lognormal":
            sigma = self.wait_shape
            return rng.lognormal(math.log(mean) - 0.5 * sigma * sigma, sigma, n)
        return rng.exponential(mean, n)

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
        self._cursor = float(model.draw_waits(rng, 1)[0]) if rng.random() < p_down else 0.0

    def _extend(self) -> None:
        ups = self._scale_s * self._rng.weibull(self._model.shape, self._BLOCK)
        waits = self._model.draw_waits(self._rng, self._BLOCK)
        for up, wait in zip(ups.tolist(), waits.tolist()):
            self._append(self._cursor, self._cursor + up)
            self._cursor += up + wait
        self._known_until = self._cursor


def drawn_stretches(model: HazardModel, rng: np.random.Generator, start_s: float,
                    until_s: float) -> tuple[np.ndarray, np.ndarray]:
    """One node's available stretches drawn from `model` over [start_s, until_s), starting in its
    stationary state (inside an outage with the long-run share of outage time)."""
    scale_s = model.gang_scale_s(1)
    p_down = model.wait_mean_s / (model.mtbf_s + model.wait_mean_s)
    cursor = start_s + (float(model.draw_waits(rng, 1)[0]) if rng.random() < p_down else 0.0)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    # enough cycles for the span on average, then more until it is covered
    block = max(8, int(2 * (until_s - start_s) / max(model.mtbf_s + model.wait_mean_s, 1.0)) + 1)
    while cursor < until_s:
        ups = scale_s * rng.weibull(model.shape, block)
        waits = model.draw_waits(rng, block)
        begin = cursor + np.concatenate([[0.0], np.cumsum(ups + waits)[:-1]])
        starts.append(begin)
        ends.append(begin + ups)
        cursor = float(begin[-1] + ups[-1] + waits[-1])
    s, e = (np.concatenate(starts), np.concatenate(ends)) if starts else (np.zeros(0), np.zeros(0))
    keep = s < until_s
    return s[keep], np.minimum(e[keep], until_s)


def intersect(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stretches when both a and b are available: a gang runs only while every node can."""
    starts: list[float] = []
    ends: list[float] = []
    (a_s, a_e), (b_s, b_e) = a, b
    i = j = 0
    while i < len(a_s) and j < len(b_s):
        start, end = max(a_s[i], b_s[j]), min(a_e[i], b_e[j])
        if end - start > _EPS:
            starts.append(float(start))
            ends.append(float(end))
        if a_e[i] < b_e[j]:
            i += 1
        else:
            j += 1
    return np.array(starts), np.array(ends)
