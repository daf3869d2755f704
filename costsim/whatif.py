"""`costsim simulate`: one configuration, from bare numbers or from a workload and an offering."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from costsim import ensemble, io
from costsim.errors import InputError
from costsim.montecarlo import SimConfig, quantile, run_trials
from costsim.planner import checkpoints_for, job_params, sim_config, workload_gpu
from costsim.policies import POLICY_MARKETS
from costsim.sim.job import JobParams
from costsim.sim.market import HazardModel
from costsim.sim.trial import MarketPrice
from costsim.spec import ON_DEMAND, OWNED, SPOT, Offering, Workload
from costsim.storage import load_storage, unsuitable
from costsim.throughput import Infeasible, step_model


@dataclass(frozen=True, kw_only=True, slots=True)
class BareJob:
    """A what-if job stated in numbers (seconds, prices per hour)."""

    work_s: float
    deadline_s: float
    checkpoint_interval_s: float
    checkpoint_s: float = 0.0
    checkpoint_stall_s: float | None = None
    restart_s: float = 0.0
    changeover_s: float = 0.0
    notice_s: float = 0.0
    on_demand_price: float | None = None
    spot_price: float | None = None
    owned_price: float | None = None   # the owned server's cost of ownership per hour
    mtbf_s: float | None = None
    capacity_wait_s: float = 0.0
    weibull_shape: float = 1.0


def bare_config(job: BareJob, policy: str, traces: list[str]) -> SimConfig:
    """SimConfig of a bare what-if job; checks that the policy's markets have prices and capacity."""
    markets = POLICY_MARKETS[policy]
    prices = {}
    for market, price, flag in ((ON_DEMAND, job.on_demand_price, "--on-demand-price"),
                                (SPOT, job.spot_price, "--spot-price"), (OWNED, job.owned_price, "--owned-price")):
        if market in markets:
            if price is None:   # never a silent 0.00: an owned server costs its ownership by the hour
                raise InputError(flag, flag.lstrip("-"), f"policy {policy} runs on {market}; give its price per hour")
            prices[market] = MarketPrice(per_hour=price)
    if SPOT in markets and not traces and job.mtbf_s is None:
        raise InputError("--preemption-mtbf", "preemption-mtbf",
                         f"policy {policy} uses spot: give --preemption-mtbf or --trace FILE...")
    params = JobParams(work_s=job.work_s, deadline_s=job.deadline_s,
                       checkpoint_interval_s=min(job.checkpoint_interval_s, job.work_s),
                       checkpoint_s=job.checkpoint_s, checkpoint_stall_s=job.checkpoint_stall_s,
                       restart_s=job.restart_s, changeover_s=job.changeover_s, notice_s=job.notice_s,
                       horizon_s=max(4 * job.deadline_s, 4 * job.work_s))
    loaded = load_traces(traces)
    hazard = None
    if job.mtbf_s is not None and not traces:
        hazard = HazardModel(mtbf_s=job.mtbf_s, wait_mean_s=job.capacity_wait_s, shape=job.weibull_shape)
    return SimConfig(params=params, policy=policy, prices=prices, hazard=hazard, traces=loaded)


def load_traces(traces: list[str], nodes: int = 1) -> tuple:
    """Capacity traces as SimConfig carries them: (ticks, gap_s) each, one per trial, cycled: the gang's capacity,
    a multi-node count trace's read as `nodes` instances (io.specs.load_trace)."""
    from costsim.io.specs import load_gang_trace
    return tuple((tuple(ticks), gap_s) for ticks, gap_s in (load_gang_trace(path, nodes) for path in traces))


def workload_config(workload: Workload, offering: Offering, nodes: int, policy: str,
                    interval_s: float | None, deadline_s: float | None, variant: str | None = None) -> SimConfig:
    """SimConfig of a workload on one offering, as the planner would build it; `variant` picks one of
    the profile's runner configurations for the GPU (default: the main one)."""
    profile = io.load_profile_for(workload.model, workload.profile)
    gpus = profile.configurations(offering.gpu)
    if not gpus:
        why = profile.unsupported.get(offering.gpu, "no entry; add gpus." + offering.gpu)
        raise InputError(profile.path, f"gpus.{offering.gpu}", why)
    gpu = gpus[0]
    if variant is not None:
        gpu = next((g for g in gpus if g.variant == variant), None)
        if gpu is None:
            named = ", ".join(g.variant for g in gpus if g.variant) or "none: the profile has one configuration"
            raise InputError("--variant", "variant", f"{offering.gpu} in {profile.path} has no configuration "
                             f"{variant!r}; allowed: {named}")
    if not set(POLICY_MARKETS[policy]) <= set(offering.markets):
        raise InputError("--policy", "policy", f"{policy} needs {', '.join(POLICY_MARKETS[policy])}; "
                         f"{offering.id} sells {', '.join(offering.markets)}")
    gpu = workload_gpu(workload, profile, gpu)
    try:
        step = step_model(gpu, global_batch=workload.global_batch, gpus_per_node=offering.gpus_per_node,
                          nodes=nodes, inter_node_gbps=offering.inter_node_gbps)
    except Infeasible as why:
        raise InputError("--nodes", "nodes", str(why)) from None
    checkpoints = checkpoints_for(workload, profile, offering, gpu, load_storage())
    refusal = unsuitable(checkpoints.store, uses_spot=SPOT in POLICY_MARKETS[policy], nodes=nodes)
    if refusal is not None:
        raise InputError(workload.source, "checkpoint.storage", refusal)
    params = job_params(workload, offering, gpu, step, deadline_s or workload.deadline_s,
                        interval_s or workload.checkpoint_interval_s or 3600.0, workload.checkpoint_async, checkpoints)
    return sim_config(params, policy, offering, nodes, storage_per_h=checkpoints.usd_per_h)


def summary(config: SimConfig, trials: int, seed: int, per_trial: bool) -> dict:
    """Run the trials and summarise them as the documented JSON."""
    samples = run_trials(config, trials, seed)
    hours = samples.makespan_s / 3600.0

    def stat(values):
        mean = float(values.mean())
        return {"mean": mean if math.isfinite(mean) else None, "p10": _none_if_inf(quantile(values, 0.1)),
                "p50": _none_if_inf(quantile(values, 0.5)), "p90": _none_if_inf(quantile(values, 0.9))}

    doc = {"makespan_h": stat(hours), "cost": stat(samples.cost), "deadline_met": float(samples.met.mean()),
           "trials": trials, "preemptions": float(samples.preemptions.mean()),
           "unfinished": int((~np.isfinite(hours)).sum()), "events": samples.events,
           "deadline_h": config.params.deadline_s / 3600.0}
    if config.traces:   # trial i replays trace i mod n; past a trace's end it assumes no spot, which nobody saw
        ends = np.array([len(ticks) * gap_s for ticks, gap_s in config.traces])
        doc["past_trace_end"] = int(np.sum(samples.makespan_s > ends[np.arange(trials) % len(ends)]))
    if per_trial:
        assert samples.on_demand_from_s is not None
        doc["per_trial"] = [{"cost": float(c), "makespan_h": _none_if_inf(float(h)), "met_deadline": bool(m),
                             "preemptions": int(n), "on_demand_from_h": _none_if_inf(float(od) / 3600.0)}
                            for c, h, m, n, od in zip(samples.cost, hours, samples.met, samples.preemptions,
                                                      samples.on_demand_from_s)]
    return doc


def _none_if_inf(value: float):
    return value if math.isfinite(value) else None


def _capacity(spec: ensemble.MarketSpec) -> list[tuple[str, tuple[str, ...]]]:
    """A market's groups as what capacity they hold (names and traces), not how they are labelled: a plan made
    before groups had regions names the same traces."""
    return [(g.name, g.paths) for g in spec.groups]


def plan_config(path: str) -> tuple[SimConfig, dict, list[str]]:
    """The plan's chosen configuration exactly as it was priced: its figures, policy, interval, deadline,
    nodes and dated prices from plan.json; its market model (the offering's spot model) and checkpoint
    store's bill rebuilt from its workload and catalog. Returns the configuration, the plan's own
    prediction (trials, seed, figures) and notes on what the rebuild found changed since the plan."""
    from dataclasses import replace

    from costsim.catalog import find_offering
    from costsim.contract.plan import Plan
    from costsim.io.catalog import load_catalog
    plan = Plan.read(path)
    w, r, pol, c, p = plan.workload, plan.resources, plan.policy, plan.checkpoint, plan.prediction
    missing = [name for name, v in (("prediction.work_s", p.work_s), ("prediction.checkpoint_save_s", p.checkpoint_save_s),
                                    ("resources.price_per_node_h", r.price_per_node_h)) if v is None]
    if missing:
        raise InputError(path, missing[0], "missing: a plan written by `costsim plan` carries it; replay needs it")
    source = w.source if w.source and Path(w.source).is_file() else w.name
    spec = io.load_workload(source)
    catalog = None if r.catalog in (None, "built-in") else r.catalog
    offering = find_offering(r.offering, spec, load_catalog(catalog))
    rebuilt = workload_config(spec, offering, r.nodes, pol.name, c.interval_s, pol.deadline_s, plan.profile.variant)
    notes = []
    if offering.spot_model is not None and r.spot_model and offering.spot_model.name != r.spot_model:
        notes.append(f"the offering's spot model is {offering.spot_model.name} now, {r.spot_model} in the plan")
    assert p.work_s is not None and p.checkpoint_save_s is not None   # checked above
    params = replace(rebuilt.params, work_s=p.work_s, deadline_s=pol.deadline_s, checkpoint_interval_s=c.interval_s,
                     checkpoint_s=p.checkpoint_save_s, checkpoint_stall_s=p.checkpoint_stall_s if c.async_ else None,
                     restart_s=p.restart_s or 0.0, changeover_s=pol.changeover_s, notice_s=r.spot_notice_s or 0.0,
                     notice_save=c.notice_save, speed_spread=p.step_time_spread or 0.0)
    for name in ("work_s", "checkpoint_s", "restart_s"):
        was, now = getattr(params, name), getattr(rebuilt.params, name)
        if now and abs(was - now) > 1e-6 * max(abs(was), 1.0):
            notes.append(f"{name}: {was:.6g} s in the plan, {now:.6g} s from today's profile and catalog")
    prices = {}
    for market, price in rebuilt.prices.items():
        planned = (r.price_per_node_h or {}).get(market)
        if planned is None:
            raise InputError(path, f"resources.price_per_node_h.{market}", f"missing: the {pol.name} policy uses it")
        if abs(planned - price.per_hour) > 1e-9:
            notes.append(f"{market}: {planned:g}/h in the plan ({r.price_read_date}), {price.per_hour:g}/h in the "
                         "catalog now")
        billing = r.billing
        prices[market] = replace(price, per_hour=planned, increment_s=billing.increment_s if billing else price.increment_s,
                                 minimum_s=billing.minimum_s if billing else price.minimum_s)
    # the market the plan's trials drew from, as the plan names it (not today's catalog's)
    drawn = ensemble.build(ensemble.MarketSpec.from_dict(p.market)) if p.market else None
    if drawn is not None and rebuilt.market is not None and _capacity(drawn.spec) != _capacity(rebuilt.market.spec):
        notes.append(f"the offering's capacity groups are {rebuilt.market.spec.name} now; the plan's were "
                     f"{drawn.spec.name}")
    config = replace(rebuilt, params=params, prices=prices, market=drawn)
    return config, {"trials": p.trials, "seed": p.seed, "p_deadline": p.p_deadline,
                    "cost_mean": p.cost.mean if p.cost else None, "currency": r.currency}, notes
