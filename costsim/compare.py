"""Buy vs cloud: every strategy of a scenario against the team's demand, and break-even utilisation.

With a fleet the demand is simulated (SimPy, costsim.fleet); with stated utilisations only, owning
costs its hourly cost of ownership spread over the used hours and the cloud its price per GPU-hour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from costsim import cost
from costsim.errors import InputError
from costsim.fleet import strategies as fleet
from costsim.fleet.demand import WEEK_S, Replay, generate, resampled_weeks
from costsim.io.scenario import Scenario

HOURS = 3600.0
YEAR_S = 365 * 86400.0
MIN_WEEKS = 2   # fewer whole weeks than this and resampling them says nothing


@dataclass(frozen=True, slots=True)
class BreakEven:
    owned: str
    versus: str
    utilization: float | None     # None: owning never pays against this option


@dataclass(slots=True)
class Comparison:
    scenario: Scenario
    results: list[fleet.Result]
    break_even: list[BreakEven]
    cloud_rate: dict[str, float]               # strategy -> cost per used (reference) GPU-hour
    sweep: dict[float, dict[str, float]] = field(default_factory=dict)   # utilisation -> strategy -> rate
    jobs: int = 0


@dataclass(frozen=True, slots=True)
class Band:
    """5th and 95th percentiles over resampled histories: yearly cost per strategy, break-even per pair."""

    draws: int
    yearly_cost: dict[str, tuple[float, float]]
    break_even: dict[tuple[str, str], tuple[float | None, float | None]]


def yearly(result: fleet.Result, horizon_s: float) -> float:
    """A strategy's cost over a year of this demand."""
    return result.total_cost * YEAR_S / horizon_s


def resampled_band(scenario: Scenario, draws: int, progress=None) -> Band:
    """The comparison over `draws` histories made of the real one's weeks drawn with replacement: how
    much of the answer is the particular weeks this team happened to have."""
    (history,) = scenario.sources
    if scenario.horizon_s < MIN_WEEKS * WEEK_S:
        raise InputError("--resample", "resample", f"the history spans {scenario.horizon_s / 86400:.1f} days; "
                         f"resampling its weeks needs at least {MIN_WEEKS} (give --resample 0)")
    rng = np.random.default_rng([scenario.seed, 7])
    costs: dict[str, list[float]] = {}
    evens: dict[tuple[str, str], list[float]] = {}
    for draw in range(draws):
        jobs, span_s = resampled_weeks(list(history.rows), scenario.horizon_s, rng)
        one = compare(replace(scenario, sources=(Replay(name=history.name, rows=tuple(jobs)),), horizon_s=span_s))
        for r in one.results:
            costs.setdefault(r.name, []).append(yearly(r, span_s))
        for b in one.break_even:
            evens.setdefault((b.owned, b.versus), []).append(math.inf if b.utilization is None else b.utilization)
        if progress:
            progress(draw + 1, draws)

    def band(values: list[float]) -> tuple[float, float]:
        low, high = np.quantile(values, [0.05, 0.95])
        return float(low), float(high)
    return Band(draws=draws, yearly_cost={name: band(v) for name, v in costs.items()},
                break_even={pair: tuple(None if math.isinf(x) else x for x in band(v))   # type: ignore[misc]
                            for pair, v in evens.items()})


def owned_rate(strategy: fleet.Strategy, utilization: float) -> float:
    """Cost of owning per used GPU-hour at a utilisation."""
    return cost.ownership_per_used_hour(strategy.owned_terms, utilization) / strategy.gpus_per_node


def list_rate(strategy: fleet.Strategy) -> float:
    """A cloud option's price per reference GPU-hour with perfect scaling (no idle, no overhead)."""
    return strategy.node_price_h / strategy.gpus_per_node / strategy.speed


def compare(scenario: Scenario, utilizations: tuple[float, ...] = ()) -> Comparison:
    """Run every strategy; effective cloud rates come from the simulation when demand is given."""
    grid = utilizations or scenario.utilizations or (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    if scenario.sources:
        jobs = generate(scenario.sources, scenario.horizon_s, scenario.seed)
        results = [fleet.run(s, jobs, scenario.horizon_s, scenario.seed) for s in scenario.strategies]
        rates = {r.name: r.cost_per_used_gpu_hour for r in results}
    else:
        jobs, results, rates = [], [], {}
        for s in scenario.strategies:
            results += [_stated(s, scenario, u) for u in grid]
            rates[s.name] = results[-1].cost_per_used_gpu_hour
    cloud = [s for s in scenario.strategies if s.kind in ("on-demand", "spot")]
    owned = [s for s in scenario.strategies if s.kind == "owned"]
    cloud_rate = {s.name: rates[s.name] for s in cloud}
    pairs = [BreakEven(o.name, c.name, cost.break_even_utilization(o.owned_terms, o.gpus_per_node, cloud_rate[c.name]))
             for o in owned for c in cloud]
    sweep = {u: {**{o.name: owned_rate(o, u) for o in owned}, **cloud_rate} for u in grid}
    return Comparison(scenario=scenario, results=results, break_even=pairs, cloud_rate=cloud_rate, sweep=sweep,
                      jobs=len(jobs))


def _stated(s: fleet.Strategy, scenario: Scenario, u: float) -> fleet.Result:
    """One strategy at a stated utilisation of the owned capacity (the same work for every option)."""
    owned_gpus = next((o.gpus_per_node * o.nodes for o in scenario.strategies if o.kind == "owned"), s.gpus_per_node)
    used = owned_gpus * u * scenario.horizon_s / HOURS
    if s.kind == "owned":
        total = cost.ownership_per_hour(s.owned_terms, u) * s.nodes * scenario.horizon_s / HOURS
        idle = s.gpus_per_node * s.nodes * (1 - u) * scenario.horizon_s / HOURS
        return fleet.Result(name=s.name, kind=s.kind, total_cost=total, used_gpu_hours=used, utilization=u,
                            idle_paid_gpu_hours=idle)
    if s.kind != "on-demand":
        raise ValueError(f"{s.name}: without a fleet only owned and on-demand options can be compared "
                         "(spot and hybrid need simulated demand)")
    return fleet.Result(name=s.name, kind=s.kind, total_cost=used * list_rate(s), used_gpu_hours=used,
                        utilization=u)


def seed_arithmetic(price_total: float, years: float, gpus: int, utilization: float) -> dict:
    """The seed articles' 'effective cost = daily cost x utilisation' against the correct figure."""
    daily = price_total / (years * 365.0)
    wrong = daily * utilization / (gpus * 24.0)
    right = daily / (gpus * 24.0 * utilization)
    return {"daily_cost": daily, "seed_per_gpu_hour": wrong, "correct_per_used_gpu_hour": right,
            "error_factor": right / wrong if wrong else math.inf}
