"""Many trials of one configuration, with common random numbers, summarised into Stats.

Trial i of every configuration draws its spot market from the stream seeded (seed, i), so two
candidates on the same offering face the same capacity (their difference has less noise than
either). Configurations that would draw the very same capacity (one ensemble, gang size and horizon) are
run together and build each trial's capacity once (`Shared`). Work spreads over processes by such batches;
results do not depend on how.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from costsim import policies
from costsim.ensemble import MarketEnsemble
from costsim.sim.job import JobParams
from costsim.sim.market import HazardModel, HazardTimeline, Timeline, TraceTimeline
from costsim.sim.trial import MarketPrice, TrialOutcome, run_trial
from costsim.spec import ON_DEMAND, SPOT, Stats


@dataclass(frozen=True, kw_only=True, slots=True)
class SimConfig:
    """Everything one configuration's trials need; plain data, so it crosses processes."""

    params: JobParams
    policy: str
    prices: dict[str, MarketPrice]
    nodes: int = 1
    hazard: HazardModel | None = None
    traces: tuple[tuple[tuple[int, ...], float], ...] = ()   # (ticks, gap_s) per trial, cycled
    market: MarketEnsemble | None = None   # an ensemble of capacity groups (over `hazard`, under `traces`)
    storage_per_h: float = 0.0     # the checkpoint store's bill per hour of the run (costsim/storage.py)


@dataclass(slots=True)
class Samples:
    """Per-trial results of one configuration."""

    makespan_s: np.ndarray
    cost: np.ndarray
    met: np.ndarray
    preemptions: np.ndarray
    events: int
    logs: list = field(default_factory=list)
    on_demand_from_s: np.ndarray | None = None   # when each trial first started on-demand (inf: never)
    group: np.ndarray | None = None   # each trial's capacity group (an index into group_names)
    group_names: tuple[str, ...] = ()


# trial capacities already built, by share_key and trial: an ensemble's timelines are fixed once built
# (ArrayTimeline), so every configuration that draws the same one may replay it
Shared = dict[tuple, tuple[Timeline, int]]


def buys_spot(config: SimConfig) -> bool:
    """Whether the configuration's trials meet spot capacity at all: its offering sells spot and its policy buys
    it (an on-demand or owned policy never does, whatever the offering sells)."""
    return SPOT in config.prices and SPOT in policies.POLICY_MARKETS[config.policy]


def share_key(config: SimConfig) -> tuple | None:
    """Configurations with the same key draw the same capacity in every trial (an ensemble's draw depends on
    the ensemble, the seed, the trial, the gang and the horizon, not on the policy or the job); None: not
    shared (a drawn hazard's timeline is extended lazily as its trial goes, so it is the trial's own)."""
    if config.traces or config.market is None or not buys_spot(config):
        return None
    return (id(config.market), config.nodes, config.params.horizon_s)


def timeline_for(config: SimConfig, seed: int, trial: int, shared: Shared | None = None) -> tuple[Timeline, int]:
    """Trial `trial`'s spot capacity (a replayed trace, the ensemble's draw, a drawn hazard, or none at
    all) and the index of the capacity group it came from (-1: no group); with `shared`, an ensemble's draw
    is built once for every configuration of the same share_key."""
    if config.traces:
        ticks, gap_s = config.traces[trial % len(config.traces)]
        return TraceTimeline(list(ticks), gap_s), trial % len(config.traces)
    market = config.market
    if market is not None and buys_spot(config):
        def draw() -> tuple[Timeline, int]:
            return market.timeline(np.random.default_rng([seed, trial]), trial, config.nodes, config.params.horizon_s)
        if shared is None:
            return draw()
        key = (share_key(config), trial)
        if key not in shared:
            shared[key] = draw()
        return shared[key]
    if config.hazard is not None:
        return HazardTimeline(config.hazard, np.random.default_rng([seed, trial]), config.nodes), -1
    return Timeline(), -1


def trial_params(params: JobParams, seed: int, trial: int) -> JobParams:
    """Trial `trial`'s job: with a step-time spread, its work at a speed of its own (lognormal of mean 1,
    from a stream apart from the market's, so that candidates still face the same capacity)."""
    spread = params.speed_spread
    if spread <= 0:
        return params
    sigma = math.sqrt(math.log1p(spread * spread))
    factor = float(np.random.default_rng([seed, trial, 1]).lognormal(-0.5 * sigma * sigma, sigma))
    return replace(params, work_s=params.work_s * factor, speed_spread=0.0)


def run_trials(config: SimConfig, trials: int, seed: int, record_log: bool = False,
               fast_forward: bool = True, shared: Shared | None = None) -> Samples:
    """Run `trials` trials of one configuration (fast_forward=False: every checkpoint cycle an event of its
    own, the same outcomes; costsim.sim.job.Job; `shared`: timeline_for's)."""
    policy = policies.get(config.policy)
    outcomes: list[TrialOutcome] = []
    groups = np.full(trials, -1)
    for i in range(trials):
        timeline, groups[i] = timeline_for(config, seed, i, shared)
        outcomes.append(run_trial(trial_params(config.params, seed, i), policy, timeline, config.prices,
                                  record_log=record_log, fast_forward=fast_forward))
    makespan = np.array([o.makespan_s for o in outcomes])
    storage = config.storage_per_h * np.where(np.isfinite(makespan), makespan, config.params.horizon_s) / 3600.0
    return Samples(
        makespan_s=makespan,
        cost=np.array([o.cost for o in outcomes]) + storage,
        met=np.array([o.met_deadline for o in outcomes]),
        preemptions=np.array([o.preemptions for o in outcomes]),
        events=sum(o.events for o in outcomes),
        logs=[o.record.log for o in outcomes] if record_log else [],
        on_demand_from_s=np.array([next((s.start_s for s in o.record.stints if s.market == ON_DEMAND), math.inf)
                                   for o in outcomes]),
        group=groups,
        # a policy that never buys spot meets no capacity group: split by group, its trials would only split the step
        # time's spread into ten, and the worst of ten would read as a market's risk
        group_names=(config.market.names if config.market is not None and buys_spot(config) else ()),
    )


def quantile(values: np.ndarray, q: float) -> float:
    """An order statistic (no interpolation, so unfinished trials at inf stay inf)."""
    return float(np.quantile(values, q, method="inverted_cdf"))


def quantile_ci(values: np.ndarray, q: float, z: float = 1.96) -> tuple[float, float]:
    """Distribution-free confidence interval of a quantile from binomial order statistics."""
    ordered = np.sort(values)
    n = len(ordered)
    half = z * math.sqrt(n * q * (1.0 - q))
    low = max(int(math.floor(n * q - half)) - 1, 0)
    high = min(int(math.ceil(n * q + half)), n - 1)
    return float(ordered[low]), float(ordered[high])


def group_p_deadline(samples: Samples) -> dict[str, float]:
    """P(deadline) in each capacity group's trials (empty without an ensemble)."""
    if samples.group is None or not samples.group_names:
        return {}
    return {name: float(samples.met[samples.group == index].mean())
            for index, name in enumerate(samples.group_names) if (samples.group == index).any()}


def summarise(samples: Samples) -> Stats:
    """Means, P10/P50/P90 and the deadline probability of one configuration's trials (and, with an
    ensemble market, per capacity group)."""
    n = len(samples.cost)
    finite = np.isfinite(samples.makespan_s)
    groups = group_p_deadline(samples)
    worst = min(groups, key=lambda name: groups[name]) if groups else None
    return Stats(
        trials=n,
        makespan_mean_s=float(samples.makespan_s.mean()) if finite.all() else math.inf,
        makespan_p10_s=quantile(samples.makespan_s, 0.1),
        makespan_p50_s=quantile(samples.makespan_s, 0.5),
        makespan_p90_s=quantile(samples.makespan_s, 0.9),
        cost_mean=float(samples.cost.mean()),
        cost_p10=quantile(samples.cost, 0.1),
        cost_p50=quantile(samples.cost, 0.5),
        cost_p90=quantile(samples.cost, 0.9),
        group_p_deadline=groups,
        worst_group=worst,
        cost_stderr=float(samples.cost.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf,
        p_deadline=float(samples.met.mean()),
        preemptions_mean=float(samples.preemptions.mean()),
        unfinished=int((~finite).sum()),
        events=samples.events,
    )


def _run_batch(args: tuple[list[SimConfig], int, int],
               each: Callable[[int, Samples], None] | None = None) -> list[Samples]:
    """Trials of configurations of one share_key (or one configuration), each trial's capacity built once;
    `each(i, samples)` after the i-th configuration's."""
    configs, trials, seed = args
    shared: Shared = {}
    out: list[Samples] = []
    for config in configs:
        out.append(run_trials(config, trials, seed, shared=shared))
        if each:
            each(len(out) - 1, out[-1])
    return out


def batches(configs: Sequence[SimConfig], jobs: int) -> list[list[int]]:
    """The configurations' indexes, those of one share_key together (each other alone); the largest batches
    halved until there are `jobs` of them, where they can be, so every process has work."""
    keyed: dict[tuple, list[int]] = {}
    out: list[list[int]] = []
    for index, config in enumerate(configs):
        key = share_key(config)
        if key is None:
            out.append([index])
        else:
            keyed.setdefault(key, []).append(index)
    out += keyed.values()
    while len(out) < jobs and max(len(b) for b in out) > 1:
        largest = max(out, key=len)
        out.remove(largest)
        out += [largest[:len(largest) // 2], largest[len(largest) // 2:]]
    return out


def run_many(configs: Sequence[SimConfig], trials: int, seed: int, *, jobs: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> list[Samples]:
    """Trials of many configurations, spread over `jobs` processes (default: the CPU count) in batches that
    build each trial's capacity once (`batches`); the results in the configurations' order."""
    if not configs:
        return []
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(configs)))
    groups = batches(configs, jobs)
    work = [([configs[i] for i in group], trials, seed) for group in groups]
    results: list[Samples | None] = [None] * len(configs)
    done = 0

    def keep(index: int, samples: Samples) -> None:
        nonlocal done
        results[index] = samples
        done += 1
        if progress:
            progress(done, len(configs))

    if jobs == 1:   # one configuration at a time, its progress as it comes
        for group, item in zip(groups, work):
            _run_batch(item, lambda i, samples: keep(group[i], samples))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for group, batch in zip(groups, pool.map(_run_batch, work)):
                for index, samples in zip(group, batch):
                    keep(index, samples)
    assert all(r is not None for r in results), "a configuration without its trials"
    return [r for r in results if r is not None]
