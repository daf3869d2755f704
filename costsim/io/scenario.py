"""Reading fleet (demand) files and compare scenarios into fleet values."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from pathlib import Path

from costsim import cost
from costsim.errors import InputError
from costsim.fleet.demand import Job, Poisson, Recurring, Replay
from costsim.fleet.strategies import KINDS, SCALING, SpotTerms, Strategy
from costsim.io.files import Fields, read_yaml, resolve
from costsim.io.specs import load_offerings, load_skus, owned_offering
from costsim.spec import Offering
from costsim.units import format_duration

YEAR_S = 365 * 86400.0


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    description: str
    currency: str
    horizon_s: float
    seed: int
    sources: tuple = ()                 # demand; empty = stated utilisation only
    utilizations: tuple[float, ...] = ()
    strategies: tuple[Strategy, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    source: str = ""


# -- fleets ----------------------------------------------------------------------------------
def load_fleet(ref: str) -> tuple:
    """Demand sources from a fleet file (data/fleets/NAME.yaml or a path)."""
    path = resolve(ref, "fleets")
    f = Fields(path, read_yaml(path))
    entries = f.raw("jobs")
    if not isinstance(entries, list) or not entries:
        raise InputError(path, "jobs", "expected a list of job sources (recurring, poisson, trace)")
    return tuple(_source(path, Fields(path, e if isinstance(e, dict) else {}, f"jobs[{i}]."))
                 for i, e in enumerate(entries))


def _source(path: Path, j: Fields):
    kind = j.text("kind")
    name = j.text("name", kind)
    deadline = j.duration("deadline", None)
    if kind == "recurring":
        return Recurring(name=name, period_s=j.duration("every"), offset_s=j.duration("at", 0.0, allow_zero=True),
                         duration_s=j.duration("duration"), gpus=j.number("gpus", integer=True), deadline_s=deadline)
    if kind == "poisson":
        return Poisson(name=name, rate_per_s=j.number("per_day") / 86400.0, gpu_choices=_gpu_choices(j),
                       duration_median_s=j.duration("duration"),
                       duration_sigma=j.number("duration_sigma", 0.0, allow_zero=True), deadline_s=deadline)
    if kind == "trace":
        trace = Path(j.text("file"))
        trace = trace if trace.is_absolute() else Path(path).parent / trace
        return Replay(name=name, rows=tuple(load_job_trace(trace)))
    raise InputError(path, j.name("kind"), f"got {kind!r}; allowed: recurring, poisson, trace")


def _gpu_choices(j: Fields) -> tuple[tuple[int, float], ...]:
    value = j.raw("gpus")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return ((value, 1.0),)
    if isinstance(value, dict) and value and all(str(k).isdigit() and isinstance(w, (int, float)) and w > 0
                                                 for k, w in value.items()):
        return tuple((int(k), float(w)) for k, w in value.items())
    raise InputError(j.source, j.name("gpus"), f"got {value!r}; expected a GPU count or {{count: weight, ...}}")


def load_job_trace(path: Path) -> list[Job]:
    """A CSV of jobs: submit, gpus, duration, deadline (durations like 2h; deadline may be empty)."""
    try:
        rows = list(csv.DictReader(Path(path).read_text().splitlines()))
    except FileNotFoundError:
        raise InputError(str(path), "file", "not found") from None
    jobs = []
    for number, row in enumerate(rows, start=2):
        r = Fields(f"{path} line {number}", row)
        jobs.append(Job(name=r.text("name", "trace"), submit_s=r.duration("submit", allow_zero=True),
                        gpus=r.number("gpus", integer=True), duration_s=r.duration("duration"),
                        deadline_s=r.duration("deadline", None)))
    return jobs


# -- scenarios -------------------------------------------------------------------------------
def load_scenario(ref: str, catalog: list[Offering] | None = None) -> Scenario:
    """A compare scenario from data/scenarios/NAME.yaml or a path; cloud prices from `catalog` (else
    the shipped one)."""
    path = resolve(ref, "scenarios")
    f = Fields(path, read_yaml(path))
    f.reject_unknown({"name", "description", "currency", "horizon", "seed", "fleet", "utilization", "usd_rate",
                      "strategies", "notes"})
    currency = f.text("currency", "USD")
    rate = _usd_rate(f, currency)
    entries = f.raw("strategies")
    if not isinstance(entries, list) or not entries:
        raise InputError(path, "strategies", "expected a list of strategies")
    strategies = tuple(parse_strategy(Fields(path, e if isinstance(e, dict) else {}, f"strategies[{i}]."), rate,
                                      catalog) for i, e in enumerate(entries))
    sources = load_fleet(_relative(path, f.text("fleet"))) if f.has("fleet") else ()
    utilizations = _utilizations(f)
    if not sources and not utilizations:
        raise InputError(path, "fleet", "give a fleet (simulated demand) or utilization: [...] (stated)")
    return Scenario(name=f.text("name"), description=f.text("description", ""), currency=currency,
                    horizon_s=f.duration("horizon"), seed=int(f.raw("seed", 0)), sources=sources,
                    utilizations=utilizations, strategies=strategies,
                    notes=tuple(str(n) for n in f.raw("notes", [])), source=str(path))


def with_horizon(scenario: Scenario, horizon_s: float, flag: str = "--horizon") -> Scenario:
    """The scenario over another horizon: simulated demand (schedules, arrivals) and stated
    utilisations run for as long as asked; a replayed job trace only as long as it covers."""
    for source in scenario.sources:
        span_s = getattr(source, "span_s", None)
        if span_s is not None and horizon_s > span_s:
            raise InputError(flag, "horizon", f"{format_duration(horizon_s)} is longer than the job trace "
                             f"{source.name!r} of {scenario.source} covers ({format_duration(span_s)}): past it the "
                             "comparison would bill capacity for demand that was never recorded")
    return replace(scenario, horizon_s=horizon_s)


def _relative(path: Path, ref: str) -> str:
    candidate = Path(path).parent / ref
    return str(candidate) if candidate.suffix and candidate.exists() else ref


def _usd_rate(f: Fields, currency: str) -> float | None:
    """Units of the scenario's currency per USD: only from an explicit, dated, sourced rate."""
    if currency == "USD":
        return 1.0
    if not f.has("usd_rate"):
        return None   # only inline prices in this currency may be used
    r = f.mapping_of("usd_rate")
    r.text("date"), r.text("source")
    return r.number("rate")


def _utilizations(f: Fields) -> tuple[float, ...]:
    value = f.raw("utilization", [])
    values = value if isinstance(value, list) else [value]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise InputError(f.source, "utilization", f"got {v!r}; expected fractions in (0, 1]")
    return tuple(float(v) for v in values)


def parse_strategy(s: Fields, usd_rate: float | None, catalog: list[Offering] | None = None) -> Strategy:
    kind = s.text("kind")
    if kind not in KINDS:
        raise InputError(s.source, s.name("kind"), f"got {kind!r}; allowed: {', '.join(KINDS)}")
    name = s.text("name")
    if kind == "owned":
        return _owned(s, name, usd_rate)
    if kind == "hybrid":
        base = _owned(s, name, usd_rate)
        burst = parse_strategy(Fields(s.source, {"name": name + "-burst", "kind": "on-demand",
                                                 **s.mapping_of("burst").mapping}, s.name("burst.")), usd_rate, catalog)
        return replace(base, kind="hybrid", burst=burst)
    return _cloud(s, name, kind, usd_rate, catalog)


def _convert(value: float, usd_rate: float | None, s: Fields, field_name: str) -> float:
    if usd_rate is None:
        raise InputError(s.source, field_name, "catalog prices are in USD and the scenario's currency differs: "
                         "add usd_rate: {rate, date, source} or give prices inline in the scenario's currency")
    return value * usd_rate


def _owned(s: Fields, name: str, usd_rate: float | None) -> Strategy:
    nodes = s.number("nodes", 1, integer=True)
    if s.has("sku"):
        skus = load_skus()
        offering = owned_offering(s.text("sku"), nodes, skus, s.source)
        own = skus[s.text("sku")][1]
        factor = _convert(1.0, usd_rate, s, s.name("sku"))
        own = replace(own, price=own.price * factor, staff_per_year=own.staff_per_year * factor,
                      electricity_per_kwh=own.electricity_per_kwh * factor,
                      colocation_per_kw_month=own.colocation_per_kw_month * factor)
        return Strategy(name=name, kind="owned", gpus_per_node=offering.gpus_per_node, nodes=nodes, ownership=own)
    life_years = s.duration("life") / YEAR_S
    upkeep = s.number("upkeep_total", 0.0, allow_zero=True) / life_years + s.number("upkeep_per_year", 0.0, allow_zero=True)
    own = cost.Ownership(price=s.number("price"), life_years=life_years, staff_per_year=upkeep,
                         power_kw_load=s.number("power_kw_load", 0.0, allow_zero=True),
                         power_kw_idle=s.number("power_kw_idle", 0.0, allow_zero=True),
                         pue=s.number("pue", 1.0), electricity_per_kwh=s.number("electricity_per_kwh", 0.0, allow_zero=True))
    return Strategy(name=name, kind="owned", gpus_per_node=s.number("gpus", integer=True), nodes=nodes, ownership=own)


def _cloud(s: Fields, name: str, kind: str, usd_rate: float | None, catalog: list[Offering] | None) -> Strategy:
    scaling = s.text("scaling", "idle-timeout") if kind == "on-demand" else "idle-timeout"
    if scaling not in SCALING:
        raise InputError(s.source, s.name("scaling"), f"got {scaling!r}; allowed: {', '.join(SCALING)}")
    common = dict(name=name, kind=kind, scaling=scaling, speed=s.number("speed", 1.0),
                  nodes=s.number("nodes", 1, integer=True), max_nodes=s.number("max_nodes", None, integer=True),
                  idle_timeout_s=s.duration("idle_timeout", 0.0, allow_zero=True), windows=_windows(s))
    if s.has("per_gpu_hour"):
        gpus = s.number("gpus_per_node", 1, integer=True)
        return Strategy(gpus_per_node=gpus, node_price_h=s.number("per_gpu_hour") * gpus,
                        provision_s=s.duration("provision", 0.0, allow_zero=True), **common)
    offering_id = s.text("offering")
    offering = next((o for o in (catalog if catalog is not None else load_offerings()) if o.id == offering_id), None)
    if offering is None:
        raise InputError(s.source, s.name("offering"), f"unknown {offering_id!r}; see `costsim catalog`")
    if offering.on_demand_per_h is None:
        raise InputError(s.source, s.name("offering"), f"{offering_id} is owned hardware: name it with kind owned")
    od = _convert(offering.on_demand_per_h, usd_rate, s, s.name("offering"))
    spot = None
    if kind == "spot":
        if offering.spot_per_h is None or offering.spot_model is None:
            raise InputError(s.source, s.name("offering"), f"{offering_id} has no spot market")
        m = offering.spot_model
        spot = SpotTerms(spot_price_h=_convert(offering.spot_per_h, usd_rate, s, s.name("offering")),
                         on_demand_price_h=od, mtbf_s=m.mtbf_s, wait_mean_s=m.wait_mean_s, weibull_shape=m.weibull_shape,
                         notice_s=offering.spot_notice_s, checkpoint_s=s.duration("checkpoint", 60.0),
                         restart_s=s.duration("restart", 300.0, allow_zero=True))
    return Strategy(gpus_per_node=offering.gpus_per_node, node_price_h=spot.spot_price_h if spot else od,
                    provision_s=offering.provision_s, spot=spot, prices=f"{offering.catalog} catalog, read "
                    f"{offering.read_date}", **common)


def _windows(s: Fields) -> tuple[tuple[float, float], ...]:
    value = s.raw("windows", [])
    windows = []
    for index, item in enumerate(value if isinstance(value, list) else [value]):
        text = str(item)
        start, sep, end = text.partition("-")
        if not sep:
            raise InputError(s.source, s.name(f"windows[{index}]"), f"got {text!r}; expected HH:MM-HH:MM")
        open_s, close_s = _clock(s, index, start), _clock(s, index, end)
        if close_s <= open_s:
            raise InputError(s.source, s.name(f"windows[{index}]"), f"{text!r} ends before it starts; split a window "
                             "that crosses midnight in two")
        windows.append((open_s, close_s))
    return tuple(windows)


def _clock(s: Fields, index: int, text: str) -> float:
    hours, _, minutes = text.strip().partition(":")
    if not hours.isdigit() or (minutes and not minutes.isdigit()) or int(hours) > 24:
        raise InputError(s.source, s.name(f"windows[{index}]"), f"got {text!r}; expected HH:MM")
    return int(hours) * 3600.0 + int(minutes or 0) * 60.0
