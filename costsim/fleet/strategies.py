"""A strategy serves the demand with one kind of capacity; running it gives cost, waits and misses.

Kinds: `owned` (the team's servers), `on-demand` cloud nodes under a scaling policy (`always-on`,
`idle-timeout`, `queue-depth`, `schedule`), `spot` (each job simulated by the job model: preemptions,
restarts, Greedy fallback to on-demand), and `hybrid` (owned first; a job bursts to on-demand cloud
when its predicted wait for owned GPUs would break its deadline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import simpy

from costsim import cost
from costsim.checkpoint import daly_interval_s
from costsim.fleet.demand import Job
from costsim.fleet.pools import AlwaysOnPool, ElasticPool, OwnedPool, SchedulePool
from costsim.montecarlo import SimConfig, run_trials
from costsim.sim.job import JobParams
from costsim.sim.market import HazardModel
from costsim.sim.trial import MarketPrice

KINDS = ("owned", "on-demand", "spot", "hybrid")
SCALING = ("always-on", "idle-timeout", "queue-depth", "schedule")


@dataclass(frozen=True, kw_only=True, slots=True)
class SpotTerms:
    """What the job model needs to run one job on spot with an on-demand fallback."""

    spot_price_h: float
    on_demand_price_h: float
    mtbf_s: float
    wait_mean_s: float
    weibull_shape: float = 1.0
    notice_s: float = 120.0
    checkpoint_s: float = 60.0
    restart_s: float = 300.0
    policy: str = "greedy"


@dataclass(frozen=True, kw_only=True, slots=True)
class Strategy:
    name: str
    kind: str
    gpus_per_node: int
    scaling: str = "owned"
    node_price_h: float = 0.0        # cloud price per node-hour
    speed: float = 1.0               # GPU speed relative to the demand's reference GPU
    nodes: int = 1                   # owned servers; always-on and schedule node counts
    max_nodes: int | None = None     # queue-depth cap
    provision_s: float = 0.0
    idle_timeout_s: float = 0.0
    windows: tuple[tuple[float, float], ...] = ()
    ownership: cost.Ownership | None = None
    spot: SpotTerms | None = None
    burst: "Strategy | None" = None  # hybrid: the on-demand part
    prices: str = ""                 # where its price comes from: "<catalog>, read <date>" (cloud offerings)

    @property
    def cloud_part(self) -> Strategy:
        """The strategy whose cloud nodes serve jobs: a hybrid's burst part, else this one."""
        if self.kind != "hybrid":
            return self
        if self.burst is None:
            raise ValueError(f"hybrid strategy {self.name!r} has no burst part")
        return self.burst

    @property
    def owned_terms(self) -> cost.Ownership:
        if self.ownership is None:
            raise ValueError(f"strategy {self.name!r} owns no servers")
        return self.ownership

    @property
    def spot_terms(self) -> SpotTerms:
        if self.spot is None:
            raise ValueError(f"strategy {self.name!r} has no spot terms")
        return self.spot


@dataclass(slots=True)
class Result:
    name: str
    kind: str
    total_cost: float
    used_gpu_hours: float
    utilization: float | None
    waits_s: list[float] = field(default_factory=list)
    deadline_misses: int = 0
    jobs: int = 0
    idle_paid_gpu_hours: float = 0.0
    burst_jobs: int = 0
    unserved_jobs: list[Job] = field(default_factory=list)   # larger than the owned capacity (owned only): never run
    spend: list[tuple[float, float, float]] = field(default_factory=list)   # (from_s, to_s, amount), spread evenly

    def spent_by(self, t: float) -> float:
        """Cumulative cost at time t (the plot's lines)."""
        return sum(amount * min(max((t - start) / (end - start), 0.0), 1.0) if end > start else amount * (t >= start)
                   for start, end, amount in self.spend)

    @property
    def unserved(self) -> int:
        return len(self.unserved_jobs)

    @property
    def unserved_gpu_hours(self) -> float:
        return sum(job.gpus * job.duration_s for job in self.unserved_jobs) / 3600.0

    @property
    def cost_per_used_gpu_hour(self) -> float:
        return self.total_cost / self.used_gpu_hours if self.used_gpu_hours else math.inf

    def as_dict(self) -> dict:
        waits_h = np.array(self.waits_s) / 3600.0 if self.waits_s else np.zeros(1)
        return {"name": self.name, "kind": self.kind, "total_cost": self.total_cost,
                "cost_per_used_gpu_hour": self.cost_per_used_gpu_hour, "used_gpu_hours": self.used_gpu_hours,
                "utilization": self.utilization, "wait_p50_h": float(np.quantile(waits_h, 0.5)),
                "wait_p95_h": float(np.quantile(waits_h, 0.95)), "deadline_misses": self.deadline_misses,
                "jobs": self.jobs, "idle_paid_gpu_hours": self.idle_paid_gpu_hours, "burst_jobs": self.burst_jobs,
                "unserved": self.unserved, "unserved_gpu_hours": self.unserved_gpu_hours,
                "unserved_jobs": [job.ref or job.name for job in self.unserved_jobs]}


def cloud_pool(env: simpy.Environment, s: Strategy, horizon_s: float):
    if s.scaling == "always-on":
        return AlwaysOnPool(env, s.nodes, horizon_s)
    if s.scaling == "idle-timeout":
        return ElasticPool(env, provision_s=s.provision_s, idle_timeout_s=s.idle_timeout_s)
    if s.scaling == "queue-depth":
        return ElasticPool(env, provision_s=s.provision_s, idle_timeout_s=0.0, max_nodes=s.max_nodes)
    if s.scaling == "schedule":
        return SchedulePool(env, nodes=s.nodes, windows=s.windows)
    raise ValueError(f"unknown scaling {s.scaling!r}; allowed: {', '.join(SCALING)}")


def run(strategy: Strategy, jobs: list[Job], horizon_s: float, seed: int = 0) -> Result:
    """Serve every job with this strategy in one SimPy environment, then cost what it held."""
    env = simpy.Environment()
    s = strategy
    owned = OwnedPool(env, s.nodes * s.gpus_per_node) if s.kind in ("owned", "hybrid") else None
    cloud = cloud_pool(env, s.cloud_part, horizon_s) if s.kind in ("on-demand", "hybrid") else None
    result = Result(name=s.name, kind=s.kind, total_cost=0.0, used_gpu_hours=0.0, utilization=None,
                    jobs=len(jobs))
    spot_cost = [0.0]
    for index, job in enumerate(jobs):
        env.process(_serve(env, s, job, index, owned, cloud, result, spot_cost, seed))
    env.run()
    served = jobs if owned is None or s.kind != "owned" else [job for job in jobs if job.gpus <= owned.gpus]
    result.used_gpu_hours = sum(job.gpus * job.duration_s for job in served) / 3600.0
    _cost(result, s, owned, cloud, spot_cost[0], horizon_s)
    return result


def _serve(env, s: Strategy, job: Job, index: int, owned, cloud, result: Result, spot_cost: list, seed: int):
    yield env.timeout(job.submit_s)
    if s.kind == "spot":
        makespan, paid = _spot_job(s, job, seed * 1_000_003 + index)
        spot_cost[0] += paid
        result.spend.append((env.now, env.now + makespan, paid))
        yield env.timeout(makespan)
        result.waits_s.append(0.0)
        _check_deadline(result, job, makespan)
        return
    use_owned = owned is not None
    if owned is not None and job.gpus > owned.gpus:   # can never fit on the owned servers
        if s.kind == "owned":   # not late: never run (the table and the break-even say so)
            result.unserved_jobs.append(job)
            return
        use_owned = False
    elif s.kind == "hybrid" and owned is not None:
        slack = (job.deadline_s if job.deadline_s is not None else math.inf) - job.duration_s
        use_owned = owned.predicted_start(job.gpus) - env.now <= slack
    result.burst_jobs += 1 if s.kind == "hybrid" and not use_owned else 0
    if use_owned:
        started = yield from owned.run(job.gpus, job.duration_s)
        duration = job.duration_s
    else:
        target = s.cloud_part
        duration = job.duration_s / target.speed
        started = yield from cloud.run(math.ceil(job.gpus / target.gpus_per_node), duration)
    result.waits_s.append(started - job.submit_s)
    _check_deadline(result, job, env.now - job.submit_s)


def _check_deadline(result: Result, job: Job, elapsed_s: float) -> None:
    if job.deadline_s is not None and elapsed_s > job.deadline_s + 1e-6:
        result.deadline_misses += 1


def _spot_job(s: Strategy, job: Job, seed: int) -> tuple[float, float]:
    """One trial of the job model: this job on spot nodes with the strategy's fallback policy."""
    t = s.spot_terms
    work_s = job.duration_s / s.speed
    nodes = math.ceil(job.gpus / s.gpus_per_node)
    deadline = job.deadline_s if job.deadline_s is not None else 3.0 * work_s + s.provision_s
    params = JobParams(work_s=work_s, deadline_s=deadline,
                       checkpoint_interval_s=min(work_s, max(60.0, daly_interval_s(t.checkpoint_s, t.mtbf_s / nodes))),
                       checkpoint_s=t.checkpoint_s, restart_s=t.restart_s, changeover_s=s.provision_s,
                       notice_s=t.notice_s, horizon_s=max(4 * deadline, 4 * work_s))
    prices = {"spot": MarketPrice(per_hour=t.spot_price_h, count=nodes),
              "on-demand": MarketPrice(per_hour=t.on_demand_price_h, count=nodes)}
    config = SimConfig(params=params, policy=t.policy, prices=prices, nodes=nodes,
                       hazard=HazardModel(mtbf_s=t.mtbf_s, wait_mean_s=t.wait_mean_s, shape=t.weibull_shape))
    samples = run_trials(config, 1, seed)
    return float(samples.makespan_s[0]), float(samples.cost[0])


def _cost(result: Result, s: Strategy, owned, cloud, spot_cost: float, horizon_s: float) -> None:
    horizon_h = horizon_s / 3600.0
    total, idle = spot_cost, 0.0
    if owned is not None:
        capacity_gpu_s = owned.gpus * horizon_s
        result.utilization = min(owned.busy_gpu_s / capacity_gpu_s, 1.0)
        owning = cost.ownership_per_hour(s.owned_terms, result.utilization) * horizon_h * s.nodes
        total += owning
        result.spend.append((0.0, horizon_s, owning))
        idle += (capacity_gpu_s - owned.busy_gpu_s) / 3600.0
    if cloud is not None:
        if hasattr(cloud, "close"):
            cloud.close(horizon_s)
        target = s.cloud_part
        billed_node_s = sum(end - start for start, end in cloud.ledger.intervals)
        total += billed_node_s / 3600.0 * target.node_price_h
        result.spend += [(start, end, (end - start) / 3600.0 * target.node_price_h) for start, end in cloud.ledger.intervals]
        idle += (billed_node_s - cloud.ledger.busy_node_s) * target.gpus_per_node / 3600.0
    result.total_cost = total
    result.idle_paid_gpu_hours = idle
