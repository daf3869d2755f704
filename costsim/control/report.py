"""What a controlled run cost, and what the simulator predicts for the same capacity and overheads.

The bill is read off the journal only: each instance from start to release, billed by the offering's
rule (increment, minimum) at the plan's price per node-hour times its nodes. The prediction runs the
job model (costsim.sim) once on the capacity this run saw (the replayed trace, else the outages the
controller observed) with the figures this run measured, so the difference is what the model leaves
out (poll delay, the spread of step times, process exit) rather than a difference of inputs.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from costsim.control.controller import Measured, ran
from costsim.control.journal import Journal
from costsim.cost import instance_cost
from costsim.policies import Decision, Figures, Policy, View, build_view
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
    """Hours and cost per market, and the total, from the journal's instances (a request withdrawn before it
    ran is not billed: not even the billing minimum)."""
    per: dict[str, dict] = {}
    end_default = journal.end_s if journal.end_s is not None else journal.updated_s
    for instance in ran(journal):
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


def hindsight_params(journal: Journal, m: Measured, *, total_steps: int, notice_s: float | None = None,
                     stints: tuple[tuple[float, float], ...] = ()) -> JobParams:
    """The job model's parameters from this run's final figures (`notice_s`: the notice as the job had
    it, default the journal's; `stints`: what each instance really cost, in order)."""
    notice_s = journal.notice_s if notice_s is None else notice_s
    first_s = m.resume_s if m.start_s is None else min(m.start_s, m.resume_s)
    return JobParams(work_s=total_steps * m.step_s, deadline_s=journal.deadline_s,
                     checkpoint_interval_s=m.interval_s, checkpoint_s=m.checkpoint_s,
                     checkpoint_stall_s=m.checkpoint_stall_s, changeover_s=first_s,
                     restart_s=max(0.0, m.resume_s - first_s),   # every start pays the changeover
                     notice_s=notice_s, release_s=m.release_s, stints=stints,
                     horizon_s=4.0 * max(journal.deadline_s, total_steps * m.step_s))


def as_known(policy: Policy, known: list[dict], actual: Figures) -> Policy:
    """`policy` deciding on the figures the controller had at each moment (its journal's `figures`)
    while the job runs as it really did (`actual`): its progress, counted in steps, is read at the
    figures then in force."""
    times = [k["t"] for k in known]
    records = [_figures(k) for k in known]

    def decide(view: View) -> Decision:
        at = bisect.bisect_right(times, view.t)
        f = records[max(at - 1, 0)]
        scale = f.work_total_s / actual.work_total_s
        live = (actual.work_total_s - view.work_left_s) * scale
        decision = policy(build_view(f, t=view.t, deadline_s=view.deadline_s, live_work_s=live,
                                     durable_work_s=live - view.at_risk_s * scale, running=view.running,
                                     spot_available_at=view.spot_available_at))
        if at < len(times) and times[at] < decision.reconsider_at:   # the controller asked again then
            return Decision(decision.market, times[at], decision.reason)
        return decision
    return decide


def _figures(record: dict) -> Figures:
    fields = {k: v for k, v in record.items() if k != "t"}
    if fields.get("interval_s") is None:   # JSON has no infinity
        fields["interval_s"] = math.inf
    return Figures(**fields)


def replay(params: JobParams, policy: Policy, timeline: Timeline, prices: Prices) -> dict:
    """One simulated trial of this job on this capacity."""
    markets = {market: prices.market(market) for market in prices.per_node_h}
    outcome = run_trial(params, policy, timeline, markets, record_log=True)
    return {
        "cost": outcome.cost,
        "finish_s": outcome.makespan_s if outcome.finished else None,
        "deadline_met": outcome.met_deadline,
        "preemptions": outcome.preemptions,
        "markets": [{"market": s.market, "start_s": round(s.start_s, 3), "end_s": round(s.end_s, 3)}
                    for s in outcome.record.stints],
        "inputs": {"work_s": params.work_s, "start_s": params.changeover_s,
                   "resume_s": params.changeover_s + params.restart_s, "checkpoint_s": params.checkpoint_s,
                   "checkpoint_stall_s": params.checkpoint_stall_s, "interval_s": params.checkpoint_interval_s,
                   "notice_s": params.notice_s, "release_s": params.release_s},
    }


def predict(journal: Journal, policy: Policy, timeline: Timeline, m: Measured, *, total_steps: int,
            prices: Prices, notice_s: float | None = None, stints: tuple[tuple[float, float], ...] = ()) -> dict:
    """The hindsight replay: this job on this capacity, deciding on this run's final figures."""
    params = hindsight_params(journal, m, total_steps=total_steps, notice_s=notice_s, stints=stints)
    return replay(params, policy, timeline, prices)


def predict_as_known(journal: Journal, policy: Policy, timeline: Timeline, m: Measured, *, total_steps: int,
                     prices: Prices, notice_s: float | None = None,
                     stints: tuple[tuple[float, float], ...] = ()) -> dict | None:
    """The as-known replay: the job as it ran (the final figures, each instance's own start and step
    time), each decision on the figures the controller had then; it differs from the run only by what
    the model leaves out, so its error measures the controller. None before any decision."""
    if not journal.figures:
        return None
    params = hindsight_params(journal, m, total_steps=total_steps, notice_s=notice_s, stints=stints)
    return replay(params, as_known(policy, journal.figures, params.figures), timeline, prices)


def relative(actual: float | None, predicted: float | None) -> float | None:
    """(actual - predicted) / predicted; None when either is missing or the prediction is zero."""
    if actual is None or predicted is None or predicted == 0:
        return None
    return (actual - predicted) / predicted


def summary(journal: Journal, prices: Prices, prediction: dict | None, hindsight: dict | None = None,
            plan: dict | None = None) -> dict:
    """The report written into control.json: the bill, the outcome, the three predictions (`predicted`:
    as known, `hindsight`, `plan`) and the errors against the first two."""
    billed = bill(journal, prices)
    finish = journal.end_s if journal.status == "done" else None
    restarts = max(0, len(ran(journal)) - 1)   # a withdrawn request never started the job
    out = {
        "bill": billed, "cost": billed["cost"], "finish_s": finish, "deadline_s": journal.deadline_s,
        "deadline_met": finish is not None and finish <= journal.deadline_s + 1e-6,
        "restarts": restarts, "preemptions": sum(1 for i in journal.instances if i.ended == "preempted"),
        "moves": journal.moves, "margin_max_s": max((e["margin_s"] for e in journal.timeline if "margin_s" in e),
                                                    default=None),
        "predicted": prediction, "hindsight": hindsight, "plan": plan,
        "error": _errors(billed["cost"], finish, prediction),
        "error_hindsight": _errors(billed["cost"], finish, hindsight),
    }
    return out


def _errors(cost: float, finish: float | None, prediction: dict | None) -> dict:
    if prediction is None:
        return {"cost_rel": None, "finish_rel": None}
    return {"cost_rel": relative(cost, prediction["cost"]), "finish_rel": relative(finish, prediction["finish_s"])}


def plan_band(plan, policy: str, journal: Journal, *, total_steps: int, time_scale: float, prices: Prices,
              trials: int = 200, seed: int = 0) -> dict | None:
    """The plan's band for this policy: P50 and P90 cost and finish of the plan's own figures (in the
    drill's trace time) on the plan's spot market (its capacity ensemble, else its spot model), over
    `trials`; None when the plan names a spot model the catalog does not have (a fitted file's)."""
    from costsim import ensemble
    from costsim.io.specs import load_spot_models
    from costsim.montecarlo import SimConfig, run_trials, summarise
    from costsim.sim.market import HazardModel
    from costsim.spec import SPOT
    p, c, r = plan.prediction, plan.checkpoint, plan.resources
    hazard, market = None, None
    if p.market and SPOT in prices.per_node_h:
        market = ensemble.build(ensemble.MarketSpec.from_dict(p.market))
    elif r.spot_model is not None and SPOT in prices.per_node_h:
        model = load_spot_models().get(r.spot_model)
        if model is None:
            return None
        hazard = HazardModel(mtbf_s=model.mtbf_s, wait_mean_s=model.wait_mean_s, shape=model.weibull_shape)
    params = JobParams(work_s=total_steps * p.step_time_s * time_scale, deadline_s=journal.deadline_s,
                       checkpoint_interval_s=c.interval_s * time_scale, checkpoint_s=(p.checkpoint_save_s or 0) * time_scale,
                       checkpoint_stall_s=None if not c.async_ or p.checkpoint_stall_s is None
                       else p.checkpoint_stall_s * time_scale,
                       changeover_s=(plan.policy.changeover_s or p.startup_s or 0.0) * time_scale,
                       restart_s=(p.restart_s or 0.0) * time_scale, notice_s=journal.notice_s,
                       horizon_s=4.0 * max(journal.deadline_s, total_steps * p.step_time_s * time_scale))
    config = SimConfig(params=params, policy=policy, prices={m: prices.market(m) for m in prices.per_node_h},
                       nodes=r.nodes, hazard=hazard, market=market)
    stats = summarise(run_trials(config, trials, seed))
    finite = lambda x: x if math.isfinite(x) else None  # noqa: E731
    return {"trials": trials, "cost_p50": stats.cost_p50, "cost_p90": stats.cost_p90,
            "finish_p50_s": finite(stats.makespan_p50_s), "finish_p90_s": finite(stats.makespan_p90_s),
            "p_deadline": stats.p_deadline, "spot_model": r.spot_model}
