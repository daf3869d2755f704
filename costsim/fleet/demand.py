"""Demand: jobs over a horizon from recurring schedules, Poisson arrivals and replayed traces."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Job:
    """One job: when it arrives, how many GPUs, how long on the reference GPU, its deadline."""

    name: str
    submit_s: float
    gpus: int
    duration_s: float
    deadline_s: float | None = None   # relative to submission
    ref: str = ""                     # the job's id where it came from (a history's JobID)


@dataclass(frozen=True, kw_only=True, slots=True)
class Recurring:
    """`every` period, `at` offset into it (e.g. every 1d at 20h): a job of `duration` on `gpus`."""

    name: str
    period_s: float
    offset_s: float
    duration_s: float
    gpus: int
    deadline_s: float | None = None

    def jobs(self, horizon_s: float, rng: np.random.Generator) -> list[Job]:
        count = math.ceil((horizon_s - self.offset_s) / self.period_s)
        return [Job(self.name, self.offset_s + i * self.period_s, self.gpus, self.duration_s, self.deadline_s)
                for i in range(max(count, 0)) if self.offset_s + i * self.period_s < horizon_s]


@dataclass(frozen=True, kw_only=True, slots=True)
class Poisson:
    """Arrivals at `rate_per_s`; GPU counts drawn from `gpu_choices` by weight; log-normal durations."""

    name: str
    rate_per_s: float
    gpu_choices: tuple[tuple[int, float], ...]
    duration_median_s: float
    duration_sigma: float = 0.0
    deadline_s: float | None = None

    def jobs(self, horizon_s: float, rng: np.random.Generator) -> list[Job]:
        t, out = 0.0, []   # type: float, list[Job]
        gpus, weights = zip(*self.gpu_choices)
        p = np.array(weights, dtype=float) / sum(weights)
        while True:
            t += rng.exponential(1.0 / self.rate_per_s)
            if t >= horizon_s:
                return out
            duration = self.duration_median_s * math.exp(self.duration_sigma * rng.standard_normal())
            out.append(Job(self.name, t, int(gpus[rng.choice(len(gpus), p=p)]), duration, self.deadline_s))


@dataclass(frozen=True, kw_only=True, slots=True)
class Replay:
    """Jobs read from a CSV trace (submit, GPUs, duration, deadline)."""

    name: str
    rows: tuple[Job, ...]

    def jobs(self, horizon_s: float, rng: np.random.Generator) -> list[Job]:
        return [job for job in self.rows if job.submit_s < horizon_s]

    @property
    def span_s(self) -> float:
        """The time the trace covers: up to its last job's end (a horizon past it has no demand there)."""
        return max((job.submit_s + job.duration_s for job in self.rows), default=0.0)


def generate(sources, horizon_s: float, seed: int) -> list[Job]:
    """Every source's jobs within the horizon, by submission time; each source has its own stream."""
    jobs = []
    for index, source in enumerate(sources):
        jobs += source.jobs(horizon_s, np.random.default_rng([seed, index]))
    return sorted(jobs, key=lambda job: (job.submit_s, job.name))


WEEK_S = 7 * 86400.0


def resampled_weeks(jobs: list[Job], span_s: float, rng: np.random.Generator) -> tuple[list[Job], float]:
    """A history of as many whole weeks as `jobs` spans, each drawn with replacement from its weeks
    (a block bootstrap: a week keeps its days, nights and bursts). Returns the jobs and the span."""
    weeks = max(1, int(span_s // WEEK_S))
    by_week: list[list[Job]] = [[] for _ in range(weeks)]
    for job in jobs:
        by_week[min(int(job.submit_s // WEEK_S), weeks - 1)].append(job)
    out = []
    for slot, week in enumerate(rng.integers(0, weeks, size=weeks)):
        shift = (slot - int(week)) * WEEK_S
        out += [Job(job.name, job.submit_s + shift, job.gpus, job.duration_s, job.deadline_s, job.ref)
                for job in by_week[week]]
    return sorted(out, key=lambda job: (job.submit_s, job.name)), weeks * WEEK_S
