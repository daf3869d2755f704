"""Run one trial of the job model and cost it from its instance log."""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from costsim.cost import instance_cost
from costsim.policies import Policy
from costsim.sim.job import Job, JobParams, JobRecord
from costsim.sim.market import Timeline


def events_scheduled(env: simpy.Environment) -> int:
    """How many events SimPy scheduled, read from its own event-id counter (no per-event hook)."""
    return next(env._eid)  # noqa: SLF001 - SimPy numbers every scheduled event with this counter


@dataclass(frozen=True, kw_only=True, slots=True)
class MarketPrice:
    """Billing of one market: price per instance-hour, instances in the gang, billing rule."""

    per_hour: float
    count: int = 1
    increment_s: float = 1.0
    minimum_s: float = 0.0


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    makespan_s: float
    cost: float
    finished: bool
    met_deadline: bool
    preemptions: int
    lost_work_s: float
    events: int
    record: JobRecord


def stints_cost(record: JobRecord, prices: dict[str, MarketPrice], until_s: float) -> float:
    """Bill every stint in the record by its market's rule; open stints end at `until_s`."""
    total = 0.0
    for stint in record.stints:
        end = until_s if math.isnan(stint.end_s) else stint.end_s
        price = prices[stint.market]
        total += instance_cost(end - stint.start_s, price.per_hour, increment_s=price.increment_s,
                               minimum_s=price.minimum_s, count=price.count)
    return total


def run_trial(params: JobParams, policy: Policy, spot: Timeline, prices: dict[str, MarketPrice],
              *, record_log: bool = False, fast_forward: bool = True) -> TrialOutcome:
    """Simulate the job once, up to its horizon, and cost what it held (fast_forward: see Job)."""
    env = simpy.Environment()
    job = Job(env, params, policy, spot, record_log=record_log, fast_forward=fast_forward)
    if math.isfinite(params.horizon_s):
        env.run(until=env.any_of([job.process, env.timeout(params.horizon_s)]))
    else:
        env.run(until=job.process)
    record = job.record
    finished = math.isfinite(record.finished_s)
    makespan = record.finished_s if finished else math.inf
    return TrialOutcome(
        makespan_s=makespan,
        cost=stints_cost(record, prices, env.now),
        finished=finished,
        met_deadline=finished and makespan <= params.deadline_s + 1e-6,
        preemptions=record.preemptions,
        lost_work_s=record.lost_work_s,
        events=events_scheduled(env),
        record=record,
    )
