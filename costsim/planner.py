"""The planner: search space -> analytic screen -> Monte Carlo -> a ranked list and a choice.

Candidates are offerings x runner configurations (a profile may measure several per GPU type) x
node counts x recovery policies x checkpoint intervals. A screen drops what cannot win (its best case
misses the deadline, or its cheapest possible cost is above a safe on-demand plan's), then ranks the
rest by an analytic estimate and keeps a shortlist for the Monte Carlo. The choice is the cheapest
mean cost whose probability of meeting the deadline reaches
the target (ties: the faster P50).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from costsim import checkpoint as ckpt
from costsim import ensemble
from costsim.errors import InputError, ModelError
from costsim.io.specs import ema_enabled
from costsim.montecarlo import Samples, SimConfig, run_many, summarise
from costsim.policies import POLICY_MARKETS
from costsim.sim.job import JobParams
from costsim.sim.market import HazardModel
from costsim.sim.trial import MarketPrice
from costsim.spec import ON_DEMAND, SPOT, Candidate, GpuProfile, Offering, Profile, Stats, Workload
from costsim.storage import CheckpointCosts, Storage, checkpoint_costs, load_storage, unsuitable
from costsim.throughput import Infeasible, StepModel, step_model
from costsim.units import format_duration

# Without preemptions a checkpoint only insures against failures the model does not simulate.
INSURANCE_INTERVAL_S = 3600.0
MIN_INTERVAL_S = 60.0
SPOT_POLICIES = ("spot-only", "greedy", "uniform-progress")
# The second stage simulates the other checkpoint intervals of every group whose mean cost is within this share of
# the choice's (the screen picks one interval a group by an analytic estimate, which can be off by a few per cent:
# p5en greedy at the screen's 2.6 min cost 121.61 USD where 41.3 min cost 120.04 on the flagship), so that a group
# that another interval makes the cheapest, or makes meet the target, is chosen. A group that misses the target by
# more than REFINE_MISS is not refined: an interval moves a group's P(deadline) by a few points. `python3
# scripts/refine_check.py` plans five cases both ways (these margins, and every interval of every group): the same
# choice in each; a group's cheapest interval lay up to 2.7% below the screen's pick, and its P(deadline) moved up to
# 6.2 points across its intervals (Azure ND96amsr_A100_v4 spot-only).
REFINE_MARGIN = 0.10
REFINE_MISS = 0.10


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanOptions:
    trials: int = 400
    seed: int = 0
    risk: float | None = None          # acceptable probability of missing; None: the workload's
    deadline_s: float | None = None    # None: the workload's
    budget: float | None = None        # upper bound on P90 cost
    shortlist: int = 16
    screen: bool = True                # False: every feasible group goes to the Monte Carlo (slower)
    jobs: int | None = None
    policies: tuple[str, ...] | None = None   # only these recovery policies; None: every one
    nodes: tuple[int, ...] | None = None      # only these node counts; None: 1, 2, 4 ... up to max_nodes


@dataclass(frozen=True, kw_only=True, slots=True)
class Configured:
    """A candidate with its throughput and the job model's parameters."""

    candidate: Candidate
    step: StepModel
    config: SimConfig
    estimate_cost: float
    estimate_makespan_s: float
    gpu: GpuProfile          # the figures (and runner settings) this candidate was costed with
    checkpoints: CheckpointCosts   # where its checkpoints live and what they cost it


@dataclass(frozen=True, kw_only=True, slots=True)
class Ranked:
    configured: Configured
    stats: Stats
    meets_target: bool
    saving_vs_on_demand: float | None
    # the trials `stats` summarises (run_trials(config, options.trials, options.seed)): what a caller judging
    # the plan's bands needs, without drawing them again
    samples: Samples = field(repr=False, compare=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanResult:
    workload: Workload
    profile: Profile
    deadline_s: float
    target: float
    ranked: list[Ranked]
    chosen: Ranked | None
    skipped: list[tuple[str, str]]
    screened: int
    trials: int
    events: int
    wall_s: float
    seed: int
    extra: dict = field(default_factory=dict)


def target_probability(workload: Workload, options: PlanOptions) -> float:
    return 1.0 - options.risk if options.risk is not None else workload.p_deadline


def workload_gpu(workload: Workload, profile: Profile, gpu: GpuProfile) -> GpuProfile:
    """A GPU's figures for this workload: with the option ema, the profile's smaller batch limit."""
    if not ema_enabled(workload.options):
        return gpu
    if not profile.ema_supported:
        raise InputError(workload.source, "options.ema", f"the profile {profile.path} has no `ema` figures "
                         "(checkpoint_bytes, max_batch_per_gpu): measure them, or leave ema out")
    limit = profile.ema_max_batch.get(gpu.gpu, gpu.max_batch_per_gpu)
    return replace(gpu, max_batch_per_gpu=min(limit, gpu.max_batch_per_gpu))


def checkpoints_for(workload: Workload, profile: Profile, offering: Offering, gpu: GpuProfile,
                    storage: Storage) -> CheckpointCosts:
    """Where this candidate's checkpoints live (the workload's store, else its provider's) and their cost."""
    store = storage.for_offering(offering.provider, workload.checkpoint_storage, workload.source)
    if store.name in profile.storage:   # measured by `costsim calibrate`: over the catalog's figures
        store = replace(store, **profile.storage[store.name])
    size = profile.ema_checkpoint_bytes if ema_enabled(workload.options) else profile.checkpoint_bytes
    return checkpoint_costs(gpu, profile_bytes=profile.checkpoint_bytes, bytes_=size or profile.checkpoint_bytes,
                            store=store, keep=workload.checkpoint_keep, export_bytes=profile.export_bytes)


def job_params(workload: Workload, offering: Offering, gpu, step: StepModel, deadline_s: float,
               interval_s: float, asynchronous: bool, checkpoints: CheckpointCosts) -> JobParams:
    """The job model's parameters for one candidate."""
    work_s = workload.samples / step.samples_per_s
    return JobParams(
        work_s=work_s, deadline_s=deadline_s, checkpoint_interval_s=min(interval_s, work_s),
        checkpoint_s=checkpoints.save_s,
        checkpoint_stall_s=checkpoints.stall_s if asynchronous else None,
        restart_s=checkpoints.restart_s, changeover_s=offering.provision_s + gpu.startup_s,
        notice_s=offering.spot_notice_s, horizon_s=max(4.0 * deadline_s, 4.0 * work_s),
        speed_spread=gpu.step_time_spread)


def intervals_for(params: JobParams, policy: str, offering: Offering, nodes: int,
                  fixed_s: float | None) -> list[float]:
    """Checkpoint intervals to try: the workload's, or Daly's optimum and longer ones."""
    if fixed_s is not None:
        return [fixed_s]
    if policy not in SPOT_POLICIES:
        return [INSURANCE_INTERVAL_S]
    mtbf_s = offering.spot_capacity.mtbf_s / nodes
    paid_s = params.paid_checkpoint_s
    optimum = max(ckpt.daly_interval_s(max(paid_s, 1e-3), mtbf_s), MIN_INTERVAL_S)
    # With a notice long enough for an emergency save, periodic checkpoints matter less: try longer.
    return sorted({round(optimum), round(4 * optimum), round(16 * optimum)})


def analytic_estimate(params: JobParams, policy: str, offering: Offering, nodes: int) -> tuple[float, float]:
    """(expected makespan, expected cost) from Daly's formula; a ranking aid, not a result.

    Spot runs at Daly's expected rate, interrupted by mean capacity waits; Greedy and Uniform
    Progress are costed as spot until the on-demand remainder just fits, then on-demand.
    """
    rate = {p: offering.price_per_h(p) * nodes / 3600.0 for p in offering.markets}
    paid_s = params.paid_checkpoint_s
    if policy not in SPOT_POLICIES:
        wall = params.changeover_s + ckpt.expected_wall_no_failures_s(
            params.work_s, params.checkpoint_interval_s, paid_s)
        return wall, wall * rate[POLICY_MARKETS[policy][0]]
    model = offering.spot_capacity
    mtbf_s = model.mtbf_s / nodes
    held_s = params.changeover_s + ckpt.daly_expected_wall_s(
        params.work_s, params.checkpoint_interval_s, paid_s, mtbf_s, params.changeover_s + params.restart_s)
    spot_makespan = held_s + (held_s / mtbf_s) * model.wait_mean_s
    if policy == "spot-only" or spot_makespan <= params.deadline_s:
        return spot_makespan, held_s * rate[SPOT]
    progress_rate = params.work_s / spot_makespan
    on_demand_need = params.changeover_s + params.restart_s
    switch_s = max(0.0, (params.deadline_s - on_demand_need - params.work_s) / (1.0 - progress_rate))
    on_demand_s = params.work_s - progress_rate * switch_s + on_demand_need
    spot_held_s = switch_s * held_s / spot_makespan
    return switch_s + on_demand_s, spot_held_s * rate[SPOT] + on_demand_s * rate[ON_DEMAND]


def configure(workload: Workload, profile: Profile, offerings: list[Offering], deadline_s: float,
              storage: Storage | None = None) -> tuple[list[Configured], list[tuple[str, str]]]:
    """Every candidate that can run, and why the others cannot."""
    storage = storage or load_storage()
    configured: list[Configured] = []
    skipped: list[tuple[str, str]] = []
    for offering in offerings:
        gpus = profile.configurations(offering.gpu)
        if not gpus:
            why = profile.unsupported.get(offering.gpu, f"no profile for GPU {offering.gpu} in {profile.path}")
            skipped.append((offering.id, why))
            continue
        max_nodes = offering.owned_nodes if offering.owned_per_h is not None else workload.max_nodes
        for gpu in gpus:   # each runner configuration: faster steps may come with a dearer restart
            gpu = workload_gpu(workload, profile, gpu)
            checkpoints = checkpoints_for(workload, profile, offering, gpu, storage)
            for nodes in _node_counts(max_nodes):
                try:
                    step = step_model(gpu, global_batch=workload.global_batch, gpus_per_node=offering.gpus_per_node,
                                      nodes=nodes, inter_node_gbps=offering.inter_node_gbps)
                except Infeasible as why:
                    named = f" [{gpu.variant}]" if gpu.variant else ""
                    skipped.append((f"{offering.id} x{nodes}{named}", str(why)))
                    continue
                configured.extend(_candidates(workload, offering, gpu, step, nodes, deadline_s, checkpoints, skipped))
    return configured, skipped


def _check_profile_covers(profile: Profile, offerings: list[Offering], configured: list[Configured]) -> None:
    """A profile that covers none of the GPU types on offer is bad input, not an empty plan."""
    if configured:
        return
    offered = sorted({o.gpu for o in offerings})
    if not offered:
        raise InputError("--gpu", "gpu", "no offering matches the workload's clouds and GPU types")
    usable = [g for g in offered if g in profile.gpus]
    if not usable:
        reasons = {g: profile.unsupported[g] for g in offered if g in profile.unsupported}
        detail = "; ".join(f"{g}: {why}" for g, why in reasons.items())
        raise InputError(profile.path, "gpus", f"no figures for any GPU type on offer ({', '.join(offered)})"
                         + (f" [{detail}]" if detail else "") + "; add gpus.<TYPE> or choose other GPUs")
    raise ModelError(f"no configuration of {', '.join(usable)} can run this workload (node counts, "
                     "batch split or checkpoint storage); see the skipped list in --format json")


def _only_asked(configured: list[Configured], options: PlanOptions) -> list[Configured]:
    """The candidates of the policies and node counts asked for (--policy, --nodes); none left is bad input."""
    kept = [c for c in configured if (options.policies is None or c.candidate.policy in options.policies)
            and (options.nodes is None or c.candidate.nodes in options.nodes)]
    if not kept:
        have = sorted({(c.candidate.policy, c.candidate.nodes) for c in configured})
        flag = "nodes" if options.nodes and not options.policies else "policy"
        raise InputError(f"--{flag}", flag, "no candidate has " + " and ".join(
            part for part in (f"policy {'/'.join(options.policies)}" if options.policies else "",
                              f"{'/'.join(map(str, options.nodes))} nodes" if options.nodes else "") if part)
            + "; allowed pairs: " + ", ".join(f"{p} x{n}" for p, n in have))
    return kept


def _node_counts(max_nodes: int) -> list[int]:
    counts, n = [], 1
    while n <= max_nodes:
        counts.append(n)
        n *= 2
    return counts


def _candidates(workload, offering, gpu, step, nodes, deadline_s, checkpoints: CheckpointCosts,
                skipped: list[tuple[str, str]]) -> list[Configured]:
    result = []
    for policy, markets in POLICY_MARKETS.items():
        if not set(markets) <= set(offering.markets):
            continue
        why = unsuitable(checkpoints.store, uses_spot=SPOT in markets, nodes=nodes)
        if why is not None:
            named = f" [{gpu.variant}]" if gpu.variant else ""
            skipped.append((f"{offering.id} x{nodes}{named} {policy}", why))
            continue
        base = job_params(workload, offering, gpu, step, deadline_s, INSURANCE_INTERVAL_S,
                          workload.checkpoint_async, checkpoints)
        for interval_s in intervals_for(base, policy, offering, nodes, workload.checkpoint_interval_s):
            params = replace(base, checkpoint_interval_s=min(interval_s, base.work_s))
            candidate = Candidate(offering=offering, nodes=nodes, policy=policy,
                                  checkpoint_interval_s=params.checkpoint_interval_s,
                                  checkpoint_async=workload.checkpoint_async, variant=gpu.variant)
            makespan, cost = analytic_estimate(params, policy, offering, nodes)
            config = sim_config(params, policy, offering, nodes, storage_per_h=checkpoints.usd_per_h)
            result.append(Configured(candidate=candidate, step=step, config=config, estimate_cost=cost
                                     + checkpoints.usd_per_h * makespan / 3600.0, estimate_makespan_s=makespan,
                                     gpu=gpu, checkpoints=checkpoints))
    return result


def sim_config(params: JobParams, policy: str, offering: Offering, nodes: int,
               storage_per_h: float = 0.0) -> SimConfig:
    """The Monte Carlo configuration of a candidate: prices per market and its spot market."""
    prices = {market: MarketPrice(per_hour=offering.price_per_h(market), count=nodes,
                                  increment_s=offering.billing_increment_s,
                                  minimum_s=offering.billing_minimum_s)
              for market in offering.markets}
    hazard, market = None, None
    if SPOT in offering.markets and offering.spot_model is not None:
        model = offering.spot_model
        hazard = HazardModel(mtbf_s=model.mtbf_s, wait_mean_s=model.wait_mean_s, shape=model.weibull_shape)
        if model.market is not None:
            market = ensemble.build(model.market)
    return SimConfig(params=params, policy=policy, prices=prices, nodes=nodes, hazard=hazard, market=market,
                     storage_per_h=storage_per_h)


def group_key(c: Configured) -> tuple:
    return (c.candidate.offering.id, c.candidate.variant, c.candidate.nodes, c.candidate.policy)


def screen(configured: list[Configured], deadline_s: float, shortlist: int) -> list[Configured]:
    """One interval per (offering, nodes, policy), the likely winners first, for the Monte Carlo.

    Drops what cannot meet the deadline even without preemptions, and what cannot rank among the table's
    `shortlist` rows: a group whose cheapest possible cost (all its work at its cheapest price) is above
    the costs of `shortlist` certain plans (on-demand or owned, meeting the deadline: their estimate is
    their cost). Ranks the rest by the analytic estimate (likely deadline misses last) and keeps
    `shortlist` groups, and besides them the certain plans that no other certain plan beats on both cost
    and finish: the safe alternatives, shown beside the risky choice (a certain plan dearer than the
    owned server, however fast, used to be dropped before it was looked at); they cost the Monte Carlo
    next to nothing (no preemptions). The owned servers that can meet the deadline are always kept.
    """
    feasible = [c for c in configured if c.config.params.work_s + c.config.params.changeover_s <= deadline_s]
    best: dict[tuple, Configured] = {}
    for c in feasible:
        key = group_key(c)
        if key not in best or c.estimate_cost < best[key].estimate_cost:
            best[key] = c
    certain = sorted((c for c in best.values() if _certain(c, deadline_s)), key=lambda c: c.estimate_cost)
    bound = certain[shortlist - 1].estimate_cost if len(certain) >= shortlist else math.inf
    ranked = sorted((c for c in best.values() if _cheapest_possible(c) <= bound),
                    key=lambda c: (c.estimate_makespan_s > deadline_s, c.estimate_cost))
    keep = ranked[:shortlist]
    keep += [c for c in _frontier(certain) if c not in keep]
    # the team's own servers (the workload's `owned:`), always: a user looks for them beside the cloud's plans,
    # even where a cloud plan beats them on both cost and finish (and they cost the Monte Carlo next to nothing)
    keep += [c for c in best.values() if c.candidate.policy == "owned" and c not in keep]
    return keep


def _frontier(certain: list[Configured]) -> list[Configured]:
    """The certain plans that no other beats on both cost and finish (cheapest first): the cheapest safe
    plan, then each that finishes sooner than every cheaper one."""
    out: list[Configured] = []
    for c in sorted(certain, key=lambda c: (c.estimate_cost, c.estimate_makespan_s)):
        if not out or c.estimate_makespan_s < out[-1].estimate_makespan_s:
            out.append(c)
    return out


def _certain(c: Configured, deadline_s: float) -> bool:
    """A plan with no preemption to fear that meets the deadline: its estimate is what it costs."""
    return c.candidate.policy in ("on-demand", "owned") and c.estimate_makespan_s <= deadline_s


def _cheapest_possible(c: Configured) -> float:
    prices = c.config.prices
    return min(p.per_hour * p.count for p in prices.values()) * c.config.params.work_s / 3600.0


def choice_order(stats: Stats) -> tuple[float, float]:
    """What the choice minimises: the mean cost to the cent, then the P50 finish."""
    return round(stats.cost_mean, 2), stats.makespan_p50_s


def choose(ranked: list[Ranked]) -> Ranked | None:
    """Cheapest mean cost among those meeting the target (ties: faster P50)."""
    meeting = [r for r in ranked if r.meets_target]
    if not meeting:
        return None
    return min(meeting, key=lambda r: choice_order(r.stats))


def could_be_chosen(ranked: list[Ranked], chosen: Ranked, target: float) -> set[tuple]:
    """The groups whose other checkpoint intervals the second stage simulates: within REFINE_MARGIN of the
    choice's mean cost and within REFINE_MISS of the target."""
    bar = chosen.stats.cost_mean * (1.0 + REFINE_MARGIN)
    return {group_key(r.configured) for r in ranked
            if r.stats.cost_mean <= bar and r.stats.p_deadline >= target - REFINE_MISS}


def plan(workload: Workload, profile: Profile, offerings: list[Offering], options: PlanOptions,
         progress: Callable[[int, int], None] | None = None) -> PlanResult:
    """Plan the workload: every feasible candidate screened, the shortlist simulated, one chosen."""
    started = time.perf_counter()
    deadline_s = options.deadline_s or workload.deadline_s
    target = target_probability(workload, options)
    configured, skipped = configure(workload, profile, offerings, deadline_s)
    _check_profile_covers(profile, offerings, configured)
    configured = _only_asked(configured, options)
    fastest = min(configured, key=lambda c: c.config.params.work_s + c.config.params.changeover_s)
    work_s, start_s = fastest.config.params.work_s, fastest.config.params.changeover_s
    if work_s + start_s > deadline_s:   # the screen would leave nothing to simulate
        where, field = ("--deadline", "deadline") if options.deadline_s else (workload.source, "deadline")
        raise InputError(where, field, f"{format_duration(deadline_s)} is shorter than the fastest configuration "
                         f"needs without a single preemption: {work_s / 3600:.2f}h of work and "
                         f"{format_duration(start_s)} to start on {fastest.candidate.label}; allow a later "
                         "deadline, fewer samples or more nodes")
    shortlist = (screen(configured, deadline_s, options.shortlist) if options.screen
                 else screen(configured, deadline_s, len(configured)))   # every group, one interval each
    simulate = _Simulator(options, progress)
    ranked = _rank(shortlist, simulate(shortlist), target, options.budget)
    chosen = choose(ranked)
    if chosen is not None:   # second stage: the other checkpoint intervals of the groups that could be chosen
        near = could_be_chosen(ranked, chosen, target)
        simulated = {id(r.configured) for r in ranked}
        siblings = [c for c in configured if group_key(c) in near and id(c) not in simulated]
        if siblings:
            ranked += _rank(siblings, simulate(siblings), target, options.budget,
                            reference=_best_on_demand(ranked))
            ranked.sort(key=_order)
            chosen = choose(ranked)
    return PlanResult(workload=workload, profile=profile, deadline_s=deadline_s, target=target,
                      ranked=ranked, chosen=chosen, skipped=skipped, screened=len(configured),
                      trials=options.trials, events=simulate.events,
                      wall_s=time.perf_counter() - started, seed=options.seed)


class _Simulator:
    """Simulates batches of configurations, counting the events it has simulated."""

    def __init__(self, options: PlanOptions, progress):
        self.options, self.progress, self.events = options, progress, 0

    def __call__(self, batch: list[Configured]) -> list[Samples]:
        o = self.options
        samples = run_many([c.config for c in batch], o.trials, o.seed, jobs=o.jobs, progress=self.progress)
        self.events += sum(s.events for s in samples)
        return samples


def _order(r: Ranked) -> tuple:
    return (not r.meets_target, r.stats.cost_mean, r.stats.makespan_p50_s)


def _best_on_demand(ranked: list[Ranked]) -> float | None:
    costs = [r.stats.cost_mean for r in ranked if r.meets_target and r.configured.candidate.policy == "on-demand"]
    return min(costs) if costs else None


def _rank(batch: list[Configured], samples: list[Samples], target: float, budget: float | None,
          reference: float | None = None) -> list[Ranked]:
    stats = [summarise(s) for s in samples]
    meets = [st.p_deadline >= target - 1e-12 and (budget is None or st.cost_p90 <= budget) for st in stats]
    ranked = [Ranked(configured=c, stats=st, meets_target=ok, saving_vs_on_demand=None, samples=s)
              for c, st, ok, s in zip(batch, stats, meets, samples)]
    best_od = reference if reference is not None else _best_on_demand(ranked)
    if best_od:
        ranked = [replace(r, saving_vs_on_demand=1.0 - r.stats.cost_mean / best_od) for r in ranked]
    ranked.sort(key=_order)
    return ranked
