"""`costsim validate`: is a plan's promise true of capacity its market was not built from?

Leave one group out: for each capacity group g of the market (a zone's trace, a period's windows),
build the market without g, plan, and replay the chosen configuration on g's real windows. A plan
states P(deadline) and P10-P90 bands of cost and finish; g's windows say what happened. Honest is:
the stated P(deadline) within 0.05 of the realised share, and 80% of the realised costs and finishes
inside the stated P10-P90 (70-90% passes; `coverage`: one that falls on an atom counts in part).
Also measured: the cost's CRPS (the continuous ranked probability score of the stated distribution
against each realised cost, in the plan's currency: lower is better) and a reliability table that
pools every stated probability of finishing by a time (0.5 to 1.5 deadlines) against how often it
happened.

Beside each group's real figures, the same figures "if the market were right": the group's own part of
the ensemble (its replays and its fit, as the full market draws them) in place of its real windows,
judged against the same stated band. That is what a plan that does not know the group could reach if
the ensemble were true of every group: where it misses too, the miss is the groups' difference from
one another, which no market ignorant of the group removes; where only the real figure misses, the
ensemble misdescribes the group.

A window of a long trace starts every `stride` and runs as long as the job's horizon; a bundle's
windows are replayed as they are. A gang of n nodes runs while each of n windows of the group, spread
evenly over them, has capacity; told the recent capacity, n windows of the same bin (told the same past, as
nodes of one market at one time share theirs) that share no hour where the bin allows (`apart_partners`). A
window is judged on what its trace saw (`judged`): one whose trace ended before its job says whether the deadline
was met only if it saw the deadline, and nothing of cost or finish.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

import numpy as np

from costsim import ensemble, policies
from costsim.catalog import with_market
from costsim.ensemble import Group, MarketSpec
from costsim.errors import InputError
from costsim.montecarlo import SimConfig, quantile, run_trials, trial_params
from costsim.planner import PlanOptions, Ranked, plan
from costsim.sim.market import ArrayTimeline, intersect
from costsim.sim.trial import run_trial
from costsim.spec import SPOT, Offering, Profile, Workload

DEADLINE_MULTIPLES = (0.5, 0.75, 1.0, 1.25, 1.5)   # the finish times whose stated probability is checked
BINS = np.linspace(0.0, 1.0, 11)
P_TOLERANCE = 0.05
COVERAGE_BAND = (0.70, 0.90)


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupResult:
    group: str
    period: str
    chosen: str | None                 # the configuration the plan without this group chose
    policy: str | None
    meets_target: bool
    windows: int                       # the windows judged (those that saw the deadline or the job's end)
    cut_short: int = 0                 # of them, those whose trace ended before the job: P(deadline) only
    not_judged: int = 0                # windows whose trace ended before the deadline and the job's end
    no_past: int = 0                   # told the recent capacity: windows with less past than that, left out
    longest_past_s: float | None = None   # where every window was left out: the most past one has (None: none has any)
    stated_p: float | None = None
    realised_p: float | None = None
    realised_se: float | None = None   # standard errors over blocks of overlapping windows (window_blocks)
    blocks: int = 0
    cost_band: tuple[float, float] | None = None
    finish_band: tuple[float, float] | None = None
    cost_coverage: float | None = None
    finish_coverage: float | None = None
    cost_coverage_se: float | None = None
    finish_coverage_se: float | None = None
    crps: float | None = None
    stated_cost_mean: float | None = None
    realised_cost_mean: float | None = None
    pairs: list[tuple[float, bool]] = field(default_factory=list)   # (stated P(finish by t), finished by t)
    # the same judged on the group's own part of the ensemble instead of its real windows (module doc)
    ideal_p: float | None = None
    ideal_cost_coverage: float | None = None
    ideal_finish_coverage: float | None = None
    ideal_trials: int = 0

    @property
    def p_error(self) -> float | None:
        return None if self.stated_p is None or self.realised_p is None else self.stated_p - self.realised_p

    @property
    def honest(self) -> bool | None:
        """Within the goal: |stated - realised| P(deadline) <= 0.05 and both bands cover 70-90%."""
        if self.p_error is None:
            return None
        return _meets(self.p_error, (self.cost_coverage, self.finish_coverage))

    @property
    def ideal_honest(self) -> bool | None:
        """The goal, judged on the group's own part of the ensemble: reachable if the market were right?"""
        if self.stated_p is None or self.ideal_p is None:
            return None
        return _meets(self.stated_p - self.ideal_p, (self.ideal_cost_coverage, self.ideal_finish_coverage))

    @property
    def within_noise(self) -> bool | None:
        """Missed the goal, but by no more than two standard errors on every figure that missed: the group's
        windows cannot tell this miss from an honest plan's bad luck."""
        if self.honest is not False:
            return None
        low, high = COVERAGE_BAND
        misses = [(abs(self.p_error or 0.0) - P_TOLERANCE, self.realised_se)]
        misses += [(max(low - c, c - high), se) for c, se in ((self.cost_coverage, self.cost_coverage_se),
                                                              (self.finish_coverage, self.finish_coverage_se))
                   if c is not None]
        return all(gap <= 0 or (se is not None and gap <= 2 * se) for gap, se in misses)

    def as_dict(self) -> dict:
        return {"group": self.group, "period": self.period, "chosen": self.chosen, "policy": self.policy,
                "meets_target": self.meets_target,
                "windows": self.windows, "cut_short": self.cut_short, "not_judged": self.not_judged,
                "no_past": self.no_past, "longest_past_s": self.longest_past_s,
                "stated_p_deadline": self.stated_p, "realised_p_deadline": self.realised_p,
                "realised_se": self.realised_se, "blocks": self.blocks, "p_error": self.p_error,
                "cost_p10_p90": list(self.cost_band) if self.cost_band else None,
                "finish_p10_p90_s": [_finite(v) for v in self.finish_band] if self.finish_band else None,
                "cost_coverage": self.cost_coverage, "finish_coverage": self.finish_coverage,
                "cost_coverage_se": self.cost_coverage_se, "finish_coverage_se": self.finish_coverage_se,
                "cost_crps": self.crps,
                "stated_cost_mean": self.stated_cost_mean, "realised_cost_mean": self.realised_cost_mean,
                "honest": self.honest, "within_noise": self.within_noise,
                "if_right": {"p_deadline": self.ideal_p, "cost_coverage": self.ideal_cost_coverage,
                             "finish_coverage": self.ideal_finish_coverage, "trials": self.ideal_trials,
                             "honest": self.ideal_honest}}


def _meets(p_error: float, coverages: tuple[float | None, ...]) -> bool:
    low, high = COVERAGE_BAND
    return abs(p_error) <= P_TOLERANCE and all(low <= c <= high for c in coverages if c is not None)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def market_of(offerings: list[Offering]) -> MarketSpec:
    """The one ensemble the workload's spot offerings draw from (validation leaves its groups out one by one)."""
    specs = {o.spot_model.market for o in offerings if o.spot_model is not None and o.spot_model.market is not None}
    if not specs:
        raise InputError("--market", "market", "no spot offering of this workload draws from a capacity ensemble: "
                         "nothing to validate (give --market-trace, or plan on GPUs with a spot market)")
    if len(specs) > 1:
        raise InputError("--gpu", "gpu", "the spot offerings draw from different ensembles ("
                         + ", ".join(sorted(s.name for s in specs)) + "); choose GPUs or offerings of one")
    return specs.pop()


def with_spec(offerings: list[Offering], spec: MarketSpec) -> list[Offering]:
    """The offerings with this market in place of their ensemble."""
    out = []
    for o in offerings:
        model = o.spot_model
        if model is not None and model.market is not None:
            o = replace(o, spot_model=replace(model, market=spec))
        out.append(o)
    return out


def window_starts(group: Group, horizon_s: float, stride_s: float) -> list[tuple[int, float]]:
    """Where each real window of a group starts: (its trace window, seconds into it), `stride_s` apart on a
    long trace as long as a window of `horizon_s` fits, a bundle's windows at their start."""
    out: list[tuple[int, float]] = []
    for index, window in enumerate(group.windows):
        if window.slide:
            offsets = np.arange(0.0, max(window.length_s - horizon_s, 0.0) + 1e-9, stride_s).tolist()
        else:
            offsets = [window.origin]
        out += [(index, offset) for offset in offsets]
    return out


def replay_timelines(group: Group, horizon_s: float, stride_s: float, nodes: int,
                     starts: list[tuple[int, float]] | None = None) -> list[ArrayTimeline]:
    """Every real window of a group (or those from `starts`) as a gang of `nodes` independent nodes would have
    met it, each `horizon_s` long (see the module's note); a gang on count traces: `ensemble.for_gang`'s group
    and 1."""
    return replay_windows(group, horizon_s, stride_s, nodes, starts)[0]


def replay_windows(group: Group, horizon_s: float, stride_s: float, nodes: int,
                   starts: list[tuple[int, float]] | None = None,
                   partners: list[list[int]] | None = None) -> tuple[list[ArrayTimeline], np.ndarray]:
    """`replay_timelines`, and how much of each window its trace saw: `horizon_s`, or less where the trace
    ends first (a trace shorter than the horizon, a bundle's window near its trace's end). Past that the replay
    has no capacity, which nobody saw: see `judged`. `partners`: each window's other nodes' windows (indexes into
    the windows), in place of windows spread evenly over them; with fewer lists than windows, only the first
    windows' gangs are replayed (the rest are partners only)."""
    windows: list[tuple[np.ndarray, np.ndarray]] = []
    seen: list[float] = []
    for index, offset in (starts if starts is not None else window_starts(group, horizon_s, stride_s)):
        window = group.windows[index]
        first = int(np.searchsorted(window.ends, offset, side="right"))
        last_i = int(np.searchsorted(window.starts, offset + horizon_s, side="left"))
        windows.append((np.maximum(window.starts[first:last_i] - offset, 0.0),
                        np.minimum(window.ends[first:last_i] - offset, horizon_s)))
        seen.append(min(horizon_s, window.length_s - offset))
    out, saw = [], []
    for index in range(len(partners) if partners is not None else len(windows)):
        stretches, seen_s = windows[index], seen[index]
        others = partners[index] if partners is not None else spread_partners(index, len(windows), nodes)
        for other in others:
            stretches, seen_s = intersect(stretches, windows[other]), min(seen_s, seen[other])
        out.append(ArrayTimeline(*stretches))
        saw.append(seen_s)
    return out, np.array(saw, dtype=float)


def judged(finish: np.ndarray, seen: np.ndarray, deadline_s: float, horizon_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Which replayed windows say what happened, as (their finish and cost known, whether the deadline was met
    known). A window whose trace ended before its job finished and before the horizon (past its end the replay has
    no capacity, which nobody saw) says nothing of the finish or the cost; it still says whether the deadline was
    met if it saw the whole deadline (every decision up to then was made on real capacity)."""
    whole = seen >= horizon_s * (1.0 - 1e-9)
    known = (finish <= seen) | whole
    return known, known | (seen >= deadline_s)


def reliability_pairs(stated_makespan_s: np.ndarray, finish: np.ndarray, seen: np.ndarray,
                      deadline_s: float) -> list[tuple[float, bool]]:
    """(the stated probability of finishing by t, whether the window finished by t) for t at each of
    DEADLINE_MULTIPLES of the deadline and each window whose trace saw either its finish or t (`judged`)."""
    return [(float(np.mean(stated_makespan_s <= k * deadline_s)), bool(f <= k * deadline_s))
            for k in DEADLINE_MULTIPLES for f, saw in zip(finish.tolist(), seen.tolist())
            if f <= saw or k * deadline_s <= saw]


def window_blocks(group: Group, horizon_s: float, stride_s: float) -> np.ndarray:
    """For each window of `replay_timelines` (same order), the block of overlapping windows it belongs to.
    Windows that start `stride` apart on one trace share most of their span (the SDXL plan's 144 h horizon,
    6 h apart: 23/24 of it): they are not independent draws. Consecutive windows are grouped in blocks of
    horizon/stride, so that one block's windows barely overlap the next block's; a bundle's windows stitched
    into one trace likewise, by where they start on it (a block a horizon long), and a bundle's other windows
    are a block each; a gang's window counts in its first node's block. The standard errors below count
    blocks, not windows (`cluster_se`)."""
    per_block = max(1, math.ceil(horizon_s / stride_s - 1e-9))
    blocks, next_block = [], 0
    # a bundle's window: (its trace, which horizon-long stretch of it the window starts in); a window that was not
    # stitched has stretches of its own, so a key of its own
    bundled: dict[tuple[int, int], int] = {}
    for window in group.windows:
        if window.slide:
            count = int(np.arange(0.0, max(window.length_s - horizon_s, 0.0) + 1e-9, stride_s).size)
            blocks += [next_block + i // per_block for i in range(count)]
            next_block += -(-count // per_block)
        else:
            key = (id(window.starts), int(window.origin // horizon_s))
            if key not in bundled:
                bundled[key] = next_block
                next_block += 1
            blocks.append(bundled[key])
    return np.array(blocks, dtype=np.int64)


def cluster_se(values: np.ndarray, blocks: np.ndarray) -> float:
    """Standard error of the mean of `values` when observations in one block are correlated and blocks are
    independent (the cluster-robust variance, with its G/(G-1) small-sample factor; G blocks)."""
    values = np.asarray(values, dtype=float)
    n, labels = len(values), np.unique(blocks)
    if n == 0 or len(labels) < 2:
        return float("nan")
    deviations = values - values.mean()
    sums = np.bincount(np.searchsorted(labels, blocks), weights=deviations)
    return float(math.sqrt(len(labels) / (len(labels) - 1) * float(np.sum(sums ** 2))) / n)


REPLAY_SEED = 1_000_003   # the replays' speeds: a stream apart from the plan's own trials'
IDEAL_SEED = 2_000_003    # the group's own part of the ensemble: another stream again
IDEAL_TRIALS = 1000       # at least: a coverage's Monte Carlo standard error ~1.3 points


def realised(config: SimConfig, timelines: list[ArrayTimeline], seed: int = 0,
             indexes: list[int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(finish, cost, met) of the configuration on each real window, each at a speed of its own where the
    plan has a step-time spread (a real job's speed is no more known than its capacity); `indexes`: the
    windows' places among the group's (their speeds' streams), when these are some of them."""
    policy = policies.get(config.policy)
    finish, cost, met = [], [], []
    for index, timeline in zip(indexes if indexes is not None else range(len(timelines)), timelines):
        outcome = run_trial(trial_params(config.params, seed + REPLAY_SEED, index), policy, timeline, config.prices)
        storage_s = outcome.makespan_s if math.isfinite(outcome.makespan_s) else config.params.horizon_s
        finish.append(outcome.makespan_s)
        cost.append(outcome.cost + config.storage_per_h * storage_s / 3600.0)
        met.append(outcome.met_deadline)
    return np.array(finish), np.array(cost), np.array(met)


def crps(samples: np.ndarray, observed: np.ndarray) -> float:
    """Mean CRPS of an ensemble forecast (its samples) over the observations: E|X - y| - E|X - X'| / 2."""
    return float(np.mean(crps_each(samples, observed)))


def crps_each(samples: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """The CRPS of an ensemble forecast (its samples) at each observation."""
    x = np.sort(samples)
    n = len(x)
    # E|X - X'| from the sorted samples in O(n): sum over i of (2i - n + 1) x_i, over n^2
    spread = float(np.sum((2 * np.arange(n) - n + 1) * x)) * 2.0 / (n * n)
    return np.array([np.mean(np.abs(x - y)) for y in np.asarray(observed).tolist()]) - 0.5 * spread


def coverage(samples: np.ndarray, observed: np.ndarray, low: float = 0.1, high: float = 0.9) -> float:
    """The share of observations inside the forecast's central band (`coverage_each`, averaged)."""
    return float(np.mean(coverage_each(samples, observed, low, high)))


def coverage_each(samples: np.ndarray, observed: np.ndarray, low: float = 0.1, high: float = 0.9) -> np.ndarray:
    """Each observation's part inside the forecast's central band [P10, P90], for forecasts with
    atoms too: an observation's place in the forecast is the interval [F(y-), F(y)] of its randomised PIT
    (Czado, Gneiting & Held 2009), and it counts by the part of that interval inside [low, high]. A
    calibrated forecast scores high - low on average whatever its atoms: greedy's finish is one time
    (the fall-back) in many trials, and counting every observation at that time as inside (or outside)
    would make an honest band look too wide (or too narrow)."""
    x = np.sort(samples)
    n = len(x)
    below = np.searchsorted(x, observed, side="left") / n    # F(y-)
    upto = np.searchsorted(x, observed, side="right") / n    # F(y)
    width = upto - below
    overlap = np.clip(np.minimum(upto, high) - np.maximum(below, low), 0.0, None)
    point = ((upto >= low) & (upto <= high)).astype(float)   # y between two samples: F(y-) = F(y)
    return np.where(width > 0, overlap / np.where(width > 0, width, 1.0), point)


def without_group(spec: MarketSpec, name: str, home_weight: float) -> tuple[MarketSpec, ensemble.GroupSpec]:
    """The market without group `name` for a job in that group's region (its groups measured there weigh
    `home_weight` times the others, as a plan's offering's region does: MarketSpec.at_home), and the group."""
    group_spec = next(g for g in spec.groups if g.name == name)
    return spec.without(name).at_home(group_spec.region, home_weight), group_spec


def validate_group(workload: Workload, profile: Profile, offerings: list[Offering], spec: MarketSpec, name: str,
                   options: PlanOptions, stride_s: float, home_weight: float = 1.0) -> GroupResult:
    """Plan without group `name` (for a job in its region), replay the choice on its windows."""
    without, group_spec = without_group(spec, name, home_weight)
    held_out = ensemble.build_group(group_spec)
    result = plan(workload, profile, with_spec(offerings, without), options)
    # what the plan chose; when nothing meets the target, its cheapest candidate: its figures are a promise too
    chosen: Ranked = result.chosen or result.ranked[0]
    config = chosen.configured.config
    c = chosen.configured.candidate
    stated = chosen.samples   # the plan's own trials
    timelines: list[ArrayTimeline] = []
    horizon_s = config.params.horizon_s
    if SPOT in config.prices:   # the group's windows as the chosen gang meets them
        gang, draws = ensemble.for_gang(group_spec, c.nodes)
        timelines, seen = replay_windows(gang, horizon_s, stride_s, draws)
    blocks = window_blocks(held_out, horizon_s, stride_s) if timelines else np.zeros(1, dtype=np.int64)
    if not timelines:   # no spot market: what the plan says is what happens, on any capacity
        timelines, seen = [ArrayTimeline([], [])], np.array([horizon_s])
    finish, cost, met = realised(config, timelines, options.seed)
    assert len(blocks) == len(finish), (len(blocks), len(finish))
    deadline = result.deadline_s
    known, met_known = judged(finish, seen, deadline, horizon_s)
    stats = chosen.stats
    cost_band = (quantile(stated.cost, 0.1), quantile(stated.cost, 0.9))
    finish_band = (quantile(stated.makespan_s, 0.1), quantile(stated.makespan_s, 0.9))
    pairs = reliability_pairs(stated.makespan_s, finish, seen, deadline)
    figures = _judged_figures(met, cost, coverage_each(stated.cost, cost), coverage_each(stated.makespan_s, finish),
                              crps_each(stated.cost, cost), blocks, known, met_known)
    ideal: dict = {}
    if config.market is not None and SPOT in config.prices:   # the group's own part of the ensemble
        alone = ensemble.build(replace(spec, groups=(group_spec,), name=f"{name} alone"))
        trials = max(options.trials, IDEAL_TRIALS)
        own = run_trials(replace(config, market=alone), trials, options.seed + IDEAL_SEED)
        ideal = dict(ideal_p=float(own.met.mean()), ideal_cost_coverage=coverage(stated.cost, own.cost),
                     ideal_finish_coverage=coverage(stated.makespan_s, own.makespan_s), ideal_trials=trials)
    return GroupResult(
        group=name, period=held_out.period, chosen=c.label, policy=c.policy, meets_target=chosen.meets_target,
        stated_p=stats.p_deadline, cost_band=cost_band, finish_band=finish_band, stated_cost_mean=stats.cost_mean,
        pairs=pairs, **figures, **ideal)


def _judged_figures(met: np.ndarray, cost: np.ndarray, cost_in: np.ndarray, finish_in: np.ndarray,
                    scores: np.ndarray, blocks: np.ndarray, known: np.ndarray, met_known: np.ndarray) -> dict:
    """A group's realised figures from the windows that say them (`judged`), each window's given: P(deadline)
    from those that saw the deadline, the bands' coverage, the CRPS and the mean cost from those that saw the
    job's end (`scores`: each window's CRPS)."""
    out: dict = {"windows": int(met_known.sum()), "cut_short": int(np.sum(met_known & ~known)),
                 "not_judged": int(np.sum(~met_known))}
    if met_known.any():
        out.update(realised_p=float(met[met_known].mean()), realised_se=_se(met[met_known], blocks[met_known]),
                   blocks=int(np.unique(blocks[met_known]).size))
    if known.any():
        out.update(cost_coverage=float(cost_in[known].mean()), finish_coverage=float(finish_in[known].mean()),
                   cost_coverage_se=_se(cost_in[known], blocks[known]),
                   finish_coverage_se=_se(finish_in[known], blocks[known]), crps=float(scores[known].mean()),
                   realised_cost_mean=float(cost[known].mean()))
    return out


RECENT_BINS = np.linspace(0.0, 1.0, 6)   # held-out windows' past shares, binned: one plan per bin
# with the state told too: the state's age, binned at these hours (about one and a half of the age kernel's
# widths, ensemble.AGE_BANDWIDTH, apart in log(1 + hours)), within each share bin and state
RECENT_AGE_BINS_H = (1.0, 4.0, 12.0, 36.0)


def window_past_shares(group: Group, horizon_s: float, stride_s: float, past_s: float,
                       starts: list[tuple[int, float]] | None = None) -> np.ndarray:
    """For each window of `replay_timelines(group, ...)` (same order; or of `starts`), the share of the `past_s`
    before its start with capacity; NaN where the window has no such past (a bundle's that could not be stitched
    into one trace, or one that starts too early)."""
    return np.array([ensemble.past_share(group.windows[index], offset, past_s)
                     for index, offset in (starts if starts is not None else window_starts(group, horizon_s, stride_s))])


def window_states(group: Group, past_s: float, starts: list[tuple[int, float]]) -> list[ensemble.State | None]:
    """For each of `starts`, the window's state just before it and that state's age (ensemble.state_before); None
    where the window has less than `past_s` before it (as `window_past_shares`)."""
    return [ensemble.state_before(group.windows[index], offset, past_s) if offset >= past_s > 0 else None
            for index, offset in starts]


def _recent_bins(shares: np.ndarray, states: list[ensemble.State | None] | None) -> np.ndarray:
    """Each window's bin: -1 where it has no past; else its share's fifth (RECENT_BINS), and with `states` its
    state and its age's bin (RECENT_AGE_BINS_H) too, as one number."""
    fifths = np.clip(np.digitize(np.nan_to_num(shares), RECENT_BINS[1:-1]), 0, len(RECENT_BINS) - 2)
    if states is None:
        return np.where(np.isnan(shares), -1, fifths)
    ages = len(RECENT_AGE_BINS_H) + 1   # a window's state always has its age (ensemble.state_before)
    keys = [-1 if state is None or np.isnan(share) else
            (f * 2 + state.up) * ages + int(np.digitize((state.age_s or 0.0) / 3600.0, RECENT_AGE_BINS_H))
            for share, state, f in zip(shares.tolist(), states, fifths.tolist())]
    return np.array(keys, dtype=int)


def validate_group_recent(workload: Workload, profile: Profile, offerings: list[Offering], spec: MarketSpec,
                          name: str, options: PlanOptions, stride_s: float, past_s: float,
                          bandwidth: float, state: bool = True, home_weight: float = 1.0) -> GroupResult:
    """Plan without group `name` as a user who knows the recent capacity would: each held-out window's past
    share (the `past_s` before it) is binned (RECENT_BINS), with `state` its state just before it and that state's
    age too (RECENT_AGE_BINS_H), the market without the group is told each bin's mean share (and its state, and
    its ages' mean in log(1 + hours)), and that plan's statement is judged on the bin's windows. Windows with no
    such past (a bundle's that could not be stitched into one trace, the first `past_s` of a trace) cannot be told
    it: they are left out (`no_past`). Judging the plan told nothing there would count that plan's errors as the
    told plans'; `validate_group` judges it on every window. The group's stated P(deadline) and mean cost are the
    means of its windows' statements."""
    without, group_spec = without_group(spec, name, home_weight)
    held_out = ensemble.build_group(group_spec)
    blind = plan(workload, profile, with_spec(offerings, without), options)
    chosen_blind: Ranked = blind.chosen or blind.ranked[0]
    horizon_s = chosen_blind.configured.config.params.horizon_s   # the windows' starts; each plan its own length
    starts = window_starts(held_out, horizon_s, stride_s)
    # a count group's pasts as the blind plan's gang met them (the shares the plans told them are taken as that
    # gang's, ensemble.Recent.at); a 1-node group's as one node met them
    reading, _ = ensemble.for_gang(group_spec, chosen_blind.configured.candidate.nodes)
    shares = window_past_shares(reading, horizon_s, stride_s, past_s, starts)
    states = window_states(reading, past_s, starts) if state else None
    bins = _recent_bins(shares, states)
    stated_p, stated_cost = np.zeros(len(shares)), np.zeros(len(shares))
    finish, cost, met = np.zeros(len(shares)), np.zeros(len(shares)), np.zeros(len(shares), dtype=bool)
    cost_in, finish_in, scores = np.zeros(len(shares)), np.zeros(len(shares)), np.zeros(len(shares))
    known, met_known = np.zeros(len(shares), dtype=bool), np.zeros(len(shares), dtype=bool)
    pairs: list[tuple[float, bool]] = []
    labels: dict[str, int] = {}
    replays: dict[tuple[int, float], tuple[list[ArrayTimeline], np.ndarray]] = {}
    for b in np.unique(bins[bins >= 0]).tolist():
        members = np.flatnonzero(bins == b)
        told = ensemble.Recent(share=float(np.mean(shares[members])), past_s=past_s, bandwidth=bandwidth,
                               source=f"{name}'s windows", state=None if states is None else _mean_state(
                                   [states[i] for i in members.tolist()]))
        try:
            result = plan(workload, profile, with_spec(offerings, ensemble.with_recent(without, told)), options)
        except InputError:   # no window of the other groups has that much past: the blind plan
            result = blind
        chosen: Ranked = result.chosen or result.ranked[0]
        config, c = chosen.configured.config, chosen.configured.candidate
        stated = chosen.samples
        timelines, seen = _told_replays(group_spec, c.nodes, config.params.horizon_s, stride_s, starts, members,
                                        replays, _likeness(told, shares, states))
        deadline = result.deadline_s
        f, k, m = realised(config, timelines, options.seed, indexes=members.tolist())
        finish[members], cost[members], met[members] = f, k, m
        known[members], met_known[members] = judged(f, seen, deadline, config.params.horizon_s)
        stated_p[members], stated_cost[members] = chosen.stats.p_deadline, chosen.stats.cost_mean
        cost_in[members], finish_in[members] = coverage_each(stated.cost, k), coverage_each(stated.makespan_s, f)
        scores[members] = crps_each(stated.cost, k)
        pairs += reliability_pairs(stated.makespan_s, f, seen, deadline)
        labels[c.label] = labels.get(c.label, 0) + len(members)
    blocks = window_blocks(held_out, horizon_s, stride_s)
    c = chosen_blind.configured.candidate
    has = bins >= 0
    if not has.any():   # how much past its windows do have (none: a bundle that cannot be stitched into a trace)
        placed = ~np.isnan(window_past_shares(reading, horizon_s, stride_s, 1.0, starts))
        longest = max((offset for (_, offset), ok in zip(starts, placed.tolist()) if ok), default=None)
        return GroupResult(group=name, period=held_out.period, chosen=c.label, policy=c.policy,
                           meets_target=chosen_blind.meets_target, windows=0, no_past=len(bins),
                           longest_past_s=longest)
    most = max(labels, key=lambda label: labels[label])
    known, met_known = known[has], met_known[has]
    return GroupResult(
        group=name, period=held_out.period, chosen=most if len(labels) == 1 else f"{most} (+{len(labels) - 1} more)",
        policy=c.policy if len(labels) == 1 else None, meets_target=chosen_blind.meets_target,
        stated_p=float(stated_p[has][met_known].mean()) if met_known.any() else None,
        stated_cost_mean=float(stated_cost[has][known].mean()) if known.any() else None, pairs=pairs,
        no_past=int(np.sum(~has)),
        **_judged_figures(met[has], cost[has], cost_in[has], finish_in[has], scores[has], blocks[has], known,
                          met_known))


def _told_replays(group_spec: ensemble.GroupSpec, nodes: int, horizon_s: float, stride_s: float,
                  starts: list[tuple[int, float]], members: np.ndarray,
                  cache: dict[tuple[int, float], tuple[list[ArrayTimeline], np.ndarray]],
                  likeness: np.ndarray | None = None) -> tuple[list[ArrayTimeline], np.ndarray]:
    """The bin's windows (`members` of `starts`) as a gang of `nodes` meets them, and how much of each its trace
    saw. One node a window: the group's windows, made once (`cache`) for every bin. A gang of independent nodes
    on one-node traces: each other node replays another window of the same bin (`apart_partners`: spread evenly
    over the bin's windows, none sharing an hour with the others where the bin allows), so that every node of the
    gang had the past the plan was told, as nodes of one market at one time have, where the group's windows spread
    evenly over the whole group would give the other nodes any past. A bin with fewer windows than the gang lends
    it the windows whose past the told plan weighs most (`likeness`, `_partner_pool`) before a window is replayed
    twice. A count trace's gang is its own (ensemble.for_gang): one draw, as one node."""
    gang, draws = ensemble.for_gang(group_spec, nodes)
    if draws > 1:
        pool, rank = _partner_pool(members, likeness, draws)
        told = [starts[i] for i in pool]
        return replay_windows(gang, horizon_s, stride_s, draws, told,
                              apart_partners(gang, told, horizon_s, draws, heads=len(members), rank=rank))
    if (nodes, horizon_s) not in cache:
        cache[(nodes, horizon_s)] = replay_windows(gang, horizon_s, stride_s, draws, starts)
    timelines, seen = cache[(nodes, horizon_s)]
    return [timelines[i] for i in members.tolist()], seen[members]


def _likeness(told: ensemble.Recent, shares: np.ndarray, states: list[ensemble.State | None] | None) -> np.ndarray:
    """How much the plan told `told` weighs each window's past (ensemble.Recent.kernel); 0 where it has none."""
    has = ~np.isnan(shares)
    if states is None:
        return np.where(has, told.kernel(np.nan_to_num(shares)), 0.0)
    has &= np.array([s is not None for s in states], dtype=bool)
    ups = np.array([bool(s is not None and s.up) for s in states], dtype=bool)
    ages = np.array([(s.age_s or 0.0) if s is not None else 0.0 for s in states], dtype=float)
    return np.where(has, told.kernel(np.nan_to_num(shares), ups, ages), 0.0)


def _partner_pool(members: np.ndarray, likeness: np.ndarray | None, nodes: int) -> tuple[list[int], np.ndarray]:
    """The windows a bin's gangs may replay: the bin's own (`members`, rank 0), and where there are fewer than
    `nodes`, the other windows whose past the told plan weighs at all (`likeness` > 0), the most like it first
    (rank 1, 2, ...)."""
    pool = members.tolist()
    if len(pool) >= nodes or likeness is None:
        return pool, np.zeros(len(pool), dtype=int)
    have = set(pool)
    others = [i for i in np.argsort(-likeness, kind="stable").tolist() if likeness[i] > 0 and i not in have]
    return pool + others, np.array([0] * len(pool) + list(range(1, len(others) + 1)), dtype=int)


def apart_partners(group: Group, starts: list[tuple[int, float]], horizon_s: float, nodes: int,
                   heads: int | None = None, rank: np.ndarray | None = None) -> list[list[int]]:
    """For each of the first `heads` of `starts` (default: all), the windows (indexes into `starts`) its gang's
    other nodes replay: spread evenly over the heads, each moved on to the next that shares no hour with the gang's
    windows so far (on another trace, or a horizon or more away on the same one), so that the nodes are independent
    as the plan draws them. Where none is that far (the windows lie close together on one trace), the one that
    shares the fewest hours with them. A window of a higher `rank` (default 0 for all; lent to a bin with fewer
    windows than the gang, _partner_pool) comes after every one of rank 0: the lowest rank that shares no hour
    with the gang, else the lowest rank. A window the gang replays already comes last."""
    n = len(starts)
    heads = n if heads is None else heads
    rank = np.zeros(n, dtype=int) if rank is None else rank
    trace = np.array([id(group.windows[index].starts) for index, _ in starts])   # a stitched bundle's windows
    at = np.array([offset for _, offset in starts], dtype=float)                  # share their trace's stretches
    out = []
    for index in range(heads):
        gang = [index]
        for first in spread_partners(index, heads, nodes):
            order = (first + np.arange(n)) % n   # the evenly spread window first, then the next ones
            shared = np.zeros(n)
            for member in gang:
                shared = np.maximum(shared, np.where(trace[order] == trace[member],
                                                     np.clip(horizon_s - np.abs(at[order] - at[member]), 0.0, None),
                                                     0.0))
            repeat = np.isin(order, gang)
            lent = rank[order]
            best = np.lexsort((np.arange(n), shared, lent, shared > 0, lent > 0, repeat))[0]   # last key first
            gang.append(int(order[best]))
        out.append(gang[1:])
    return out


def spread_partners(index: int, n: int, nodes: int) -> list[int]:
    """The windows (of `n`) that window `index`'s gang of `nodes` meets beside it, spread evenly over them."""
    return [(index + node * n // nodes) % n for node in range(1, nodes)]


def _mean_state(states: list) -> ensemble.State:
    """A bin's states (all the same, up or down) as one: their ages' mean in log(1 + hours), the kernel's measure."""
    hours = np.expm1(np.mean([np.log1p((s.age_s or 0.0) / 3600.0) for s in states]))
    return ensemble.State(up=states[0].up, age_s=float(hours * 3600.0))


def _se(values: np.ndarray, blocks: np.ndarray) -> float | None:
    se = cluster_se(values, blocks)
    return None if math.isnan(se) else se


def validate(workload: Workload, profile: Profile, offerings: list[Offering], options: PlanOptions, *,
             stride_s: float, groups: tuple[str, ...] | None = None,
             progress: Callable[[int, int, str], None] | None = None, recent_past_s: float | None = None,
             recent_bandwidth: float = ensemble.DEFAULT_RECENT_BANDWIDTH,
             recent_state: bool = True, home_weight: float = 1.0) -> list[GroupResult]:
    """Leave each capacity group out in turn (or only `groups`), each plan made for a job in the group's region
    (`home_weight`: without_group); with `recent_past_s`, each held-out window told its own recent capacity over
    that past, and with `recent_state` its state then (validate_group_recent)."""
    spec = market_of(offerings)
    if len(spec.groups) < 2:
        raise InputError("--market-trace", "market", f"{spec.name} has {len(spec.groups)} capacity group: leaving "
                         "one out leaves nothing to plan with; give two or more")
    names = list(groups) if groups else spec.group_names
    unknown = [g for g in names if g not in spec.group_names]
    if unknown:
        raise InputError("--group", "group", f"unknown {unknown[0]!r}; allowed: {', '.join(spec.group_names)}")
    one = partial(_validate_one, workload, profile, offerings, spec, stride_s=stride_s, recent_past_s=recent_past_s,
                  recent_bandwidth=recent_bandwidth, recent_state=recent_state, home_weight=home_weight)
    jobs = min(options.jobs or os.cpu_count() or 1, len(names))
    if jobs == 1:   # one group at a time, each plan spread over the processes options.jobs allows
        results = []
        for index, name in enumerate(names):
            results.append(one(name, options))
            if progress:
                progress(index + 1, len(names), name)
        return results
    # a process a group, each plan in it on one: the groups' work divides evenly where one plan's candidates
    # do not (a few batches, montecarlo.batches), and no plan starts processes of its own; the same results
    by_name: dict[str, GroupResult] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(one, name, replace(options, jobs=1)): name for name in names}
        for future in as_completed(futures):
            by_name[futures[future]] = future.result()
            if progress:
                progress(len(by_name), len(names), futures[future])
    return [by_name[name] for name in names]


def _validate_one(workload: Workload, profile: Profile, offerings: list[Offering], spec: MarketSpec, name: str,
                  options: PlanOptions, *, stride_s: float, recent_past_s: float | None, recent_bandwidth: float,
                  recent_state: bool, home_weight: float) -> GroupResult:
    if recent_past_s is not None:
        return validate_group_recent(workload, profile, offerings, spec, name, options, stride_s, recent_past_s,
                                     recent_bandwidth, recent_state, home_weight)
    return validate_group(workload, profile, offerings, spec, name, options, stride_s, home_weight)


def pooled(results: list[GroupResult]) -> dict:
    """Every group at once, each weighing the same (as the ensemble weighs them): the calibration a user
    who cannot say which group their capacity will behave like gets. Per group, a plan that does not
    know the group cannot be right where groups differ by more than its band (docs/model.md)."""
    judged = [r for r in results if r.realised_p is not None]

    def mean(name: str) -> float | None:
        values = [getattr(r, name) for r in judged if getattr(r, name) is not None]
        return float(np.mean(values)) if values else None
    return {"groups": len(judged), "stated_p_deadline": mean("stated_p"), "realised_p_deadline": mean("realised_p"),
            "cost_coverage": mean("cost_coverage"), "finish_coverage": mean("finish_coverage"),
            "cost_crps": mean("crps"), "mean_abs_p_error": (float(np.mean([abs(r.p_error) for r in judged
                                                                             if r.p_error is not None]))
                                                             if judged else None)}


def reliability(results: list[GroupResult]) -> list[dict]:
    """Stated probabilities of finishing by a time, binned, against how often it happened."""
    pairs = [pair for r in results for pair in r.pairs]
    rows = []
    for low, high in zip(BINS[:-1], BINS[1:]):
        inside = [(p, o) for p, o in pairs if low <= p < high or (high == 1.0 and p == 1.0)]
        if inside:
            rows.append({"bin": [float(low), float(high)], "count": len(inside),
                         "stated": float(np.mean([p for p, _ in inside])),
                         "realised": float(np.mean([o for _, o in inside]))})
    return rows


def plot(results: list[GroupResult], table: list[dict], path: str, title: str) -> None:
    """Stated against realised P(deadline) per group, and the reliability diagram."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costsim.report import save_figure
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.5))
    shown = [r for r in results if r.realised_p is not None]
    for r in shown:
        assert r.stated_p is not None and r.realised_p is not None
        left.errorbar(r.stated_p, r.realised_p, yerr=1.96 * (r.realised_se or 0.0), fmt="o", capsize=3)
        left.annotate(r.group, (r.stated_p, r.realised_p), fontsize=7, xytext=(4, 2), textcoords="offset points")
    ideal = [r for r in shown if r.ideal_p is not None]
    if ideal:   # the same plan on the group's own part of the ensemble
        left.scatter([r.stated_p for r in ideal], [r.ideal_p for r in ideal], facecolors="none", edgecolors="k",
                     s=60, label="if the market were right", zorder=3)
    left.plot([0, 1], [0, 1], c="k", lw=1)
    left.fill_between([0, 1], [-P_TOLERANCE, 1 - P_TOLERANCE], [P_TOLERANCE, 1 + P_TOLERANCE], color="tab:green",
                      alpha=0.15, label=f"within {P_TOLERANCE}")
    left.set_xlabel("stated P(deadline), market without the group")
    left.set_ylabel("realised share of the group's windows")
    left.set_xlim(0, 1.02)
    left.set_ylim(0, 1.02)
    left.legend(loc="lower right")
    left.set_title("leave one group out")
    left.grid(alpha=0.3)
    right.plot([0, 1], [0, 1], c="k", lw=1)
    right.scatter([row["stated"] for row in table], [row["realised"] for row in table],
                  s=[10 + 200 * row["count"] / max(r["count"] for r in table) for row in table], zorder=3)
    right.set_xlabel("stated probability of finishing by a time")
    right.set_ylabel("realised frequency")
    right.set_title("reliability (0.5-1.5 deadlines, every group)")
    right.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def market_for_validation(offerings: list[Offering], mode: str, traces: tuple[str, ...],
                          replay_share: float | None) -> list[Offering]:
    """The offerings' markets as `costsim validate` was asked to build them."""
    out = with_market(offerings, mode, traces)
    if replay_share is None:
        return out
    return [replace(o, spot_model=replace(o.spot_model, market=replace(o.spot_model.market, replay_share=replay_share)))
            if o.spot_model is not None and o.spot_model.market is not None else o for o in out]
