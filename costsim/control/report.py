"""What a controlled run cost, and what the simulator predicts for the same capacity and overheads.

The bill is read off the journal only: each instance from start to release, billed by the offering's
rule (increment, minimum) at the plan's price per node-hour times its nodes. The prediction runs the
job model (costsim.sim) once on the capacity this run saw (the replayed trace, else the outages the
controller observed) with the figures this run measured, so the difference is what the model leaves
out (poll delay, the spread of step times, process exit) rather than a difference of inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costsim.control.controller import Measured
from costsim.control.journal import Journal
from costsim.cost import instance_cost
from costsim.policies import Policy
from costsim.sim.job import JobParams
from costsim.sim.market import Timeline
from costsim.sim.trial import MarketPrice, run_trial


@dataclass(frozen=True)
class Prices:
    per_node_h: dict[str, float]
    nodes: int
    increment_s: float = 1.0
    minimum_s: float = 0.0
    currency: str = "USD"

    def market(self, market: str) -> MarketPrice:
        return MarketPrice(per_hour=self.per_node_h[market], count=self.nodes, increment_s=self.increment_s,
                           minimum_s=self.minimum_s)


def bill(journal: Journal, prices: Prices) -> dict:
    """Hours and cost per market, and the total, from the journal's instances."""
    per: dict[str, dict] = {}
    end_default = journal.end_s if journal.end_s is not None else journal.updated_s
    for instance in journal.instances:
        end = instance.end_s if instance.end_s is not None else end_default
        held_s = max(0.0, end - instance.start_s)
        price = prices.market(instance.market)
        cost = instance_cost(held_s, price.per_hour, increment_s=price.increment_s, minimum_s=price.minimum_s,
                             count=price.count)
        entry = per.setdefault(instance.market, {"hours": 0.0, "cost": 0.0, "instances": 0})
        entry["hours"] += held_s / 3600.0
        entry["cost"] += cost
        entry["instances"] += 1
    return {"markets": per, "cost": sum(e["cost"] for e in per.values()), "currency": prices.currency}


class ObservedTimeline(Timeline):
    """Spot capacity as the controller saw it: available except in the journal's outages (an outage
    still open at the end lasts to the end; after the end, capacity is taken as available)."""

    def __init__(self, outages: list[dict], end_s: float):
        super().__init__()
        start = 0.0
        for outage in sorted(outages, key=lambda o: o["start_s"]):
            self._append(start, outage["start_s"])
            start = outage["end_s"] if outage["end_s"] is not None else end_s
        self._append(start, math.inf)
        self._known_until = math.inf


def predict(journal: Journal, policy: Policy, timeline: Timeline, m: Measured, *, total_steps: int,
            prices: Prices, notice_s: float | None = None) -> dict:
    """One simulated trial of this job on this capacity with this run's figures (`notice_s`: the
    notice as the job had it, default the journal's)."""
    notice_s = journal.notice_s if notice_s is None else notice_s
    first_s = m.resume_s if m.start_s is None else min(m.start_s, m.resume_s)
    params = JobParams(work_s=total_steps * m.step_s, deadline_s=journal.deadline_s,
                       checkpoint_interval_s=m.interval_s, checkpoint_s=m.checkpoint_s,
                       checkpoint_stall_s=m.checkpoint_stall_s, changeover_s=first_s,
                       restart_s=max(0.0, m.resume_s - first_s),   # every start pays the changeover
                       notice_s=notice_s, release_s=m.release_s,
                       horizon_s=4.0 * max(journal.deadline_s, total_steps * m.step_s))
    markets = {market: prices.market(market) for market in prices.per_node_h}
    outcome = run_trial(params, policy, timeline, markets, record_log=True)
    return {
        "cost": outcome.cost,
        "finish_s": outcome.makespan_s if outcome.finished else None,
        "deadline_met": outcome.met_deadline,
        "preemptions": outcome.preemptions,
        "markets": [{"market": s.market, "start_s": round(s.start_s, 3), "end_s": round(s.end_s, 3)}
                    for s in outcome.record.stints],
        "inputs": {"work_s": params.work_s, "step_s": m.step_s, "start_s": first_s, "resume_s": m.resume_s,
                   "checkpoint_s": m.checkpoint_s, "checkpoint_stall_s": m.checkpoint_stall_s,
                   "interval_s": m.interval_s, "notice_s": notice_s, "release_s": m.release_s},
    }


def relative(actual: float | None, predicted: float | None) -> float | None:
    """(actual - predicted) / predicted; None when either is missing or the prediction is zero."""
    if actual is None or predicted is None or predicted == 0:
        return None
    return (actual - predicted) / predicted


def summary(journal: Journal, prices: Prices, prediction: dict | None) -> dict:
    """The report written into control.json: the bill, the outcome, the prediction and the errors."""
    billed = bill(journal, prices)
    finish = journal.end_s if journal.status == "done" else None
    restarts = max(0, len(journal.instances) - 1)
    out = {
        "bill": billed, "cost": billed["cost"], "finish_s": finish, "deadline_s": journal.deadline_s,
        "deadline_met": finish is not None and finish <= journal.deadline_s + 1e-6,
        "restarts": restarts, "preemptions": sum(1 for i in journal.instances if i.ended == "preempted"),
        "predicted": None, "error": {"cost_rel": None, "finish_rel": None},
    }
    if prediction is not None:
        out["predicted"] = prediction
        out["error"] = {"cost_rel": relative(billed["cost"], prediction["cost"]),
                        "finish_rel": relative(finish, prediction["finish_s"])}
    return out
