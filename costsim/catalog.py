"""Which offerings a workload may use: the cloud catalog, filtered, plus the team's own servers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from costsim import io
from costsim.errors import InputError
from costsim.spec import FittedSpotModel, Offering, SpotModel, Workload


def offerings_for(workload: Workload, gpus: tuple[str, ...] | None = None,
                  catalog: list[Offering] | None = None) -> list[Offering]:
    """Cloud offerings of the allowed providers and GPU types (of `catalog`, else the shipped one), and
    the workload's owned servers."""
    catalog = catalog if catalog is not None else io.load_offerings()
    cloud = catalog
    providers = {o.provider for o in cloud}
    if workload.clouds is not None:
        unknown = sorted(set(workload.clouds) - providers)
        if unknown:
            raise InputError(workload.source, "clouds", f"unknown {', '.join(unknown)}; allowed: "
                             f"{', '.join(sorted(providers))}")
        cloud = [o for o in cloud if o.provider in workload.clouds]
    skus = io.load_skus()
    owned = [io.owned_offering(o.sku, o.nodes, skus, workload.source) for o in workload.owned]
    offerings = cloud + owned
    wanted = gpus or workload.gpus
    if wanted:
        source, field = ("--gpu", "gpu") if gpus else (workload.source, "gpus")
        named = gpu_names(wanted, {o.gpu for o in catalog} | {o.gpu for o in owned}, source, field)
        offerings = [o for o in offerings if o.gpu in named]
    return offerings


def gpu_names(names, known: set[str], source: str, field: str) -> set[str]:
    """The GPU types named, spelled as the catalog spells them (h200 is H200); one not on offer is refused."""
    spelled = {name.casefold(): name for name in known}
    named = {spelled.get(name.casefold(), name) for name in names}
    unknown = sorted(named - known)
    if unknown:
        raise InputError(source, field, f"unknown GPU {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    return named


def find_offering(offering_id: str, workload: Workload | None = None, catalog: list[Offering] | None = None) -> Offering:
    """One offering by id (provider/region/instance, or owned/SKU)."""
    pool = list(catalog) if catalog is not None else io.load_offerings()
    if workload is not None:
        skus = io.load_skus()
        pool += [io.owned_offering(o.sku, o.nodes, skus, workload.source) for o in workload.owned]
    for offering in pool:
        if offering.id == offering_id:
            return offering
    raise InputError("--offering", "offering", f"unknown {offering_id!r}; see `costsim catalog` for ids")


SENSITIVITY_ENDS = ("pessimistic", "optimistic")


def with_spot_models(offerings: list[Offering], fitted: dict[str, FittedSpotModel], end: str = "fit") -> list[Offering]:
    """The offerings with their spot capacity model from a fitted file: the entry keyed by the
    offering's id, else by its catalog model's name; a figure the entry lacks keeps the catalog's.
    `end`: the fitted figures, or the end of their 95% intervals that makes spot `pessimistic`
    (shorter lives, longer outages) or `optimistic`; the Weibull shape stays at its estimate."""
    out, used = [], set()
    for o in offerings:
        base = o.spot_model
        entry = None if base is None else fitted.get(o.id) or fitted.get(base.name)
        if entry is None or base is None:
            out.append(o)
            continue
        used.add(entry.key)
        mtbf, wait = entry.mtbf_s or base.mtbf_s, entry.wait_mean_s if entry.wait_mean_s is not None else base.wait_mean_s
        if end in SENSITIVITY_ENDS:
            low_life = end == "pessimistic"
            if "mtbf_s" in entry.ci:
                mtbf = entry.ci["mtbf_s"][0 if low_life else 1]
            if "wait_mean_s" in entry.ci and entry.wait_mean_s is not None:
                wait = entry.ci["wait_mean_s"][1 if low_life else 0]
        name = f"{Path(entry.source).name}:{entry.key}" + ("" if end == "fit" else f"@{end}")
        model = SpotModel(name=name, mtbf_s=mtbf, wait_mean_s=wait,
                          weibull_shape=entry.weibull_shape or base.weibull_shape)
        out.append(replace(o, spot_model=model))
    if not used:
        keys = sorted({o.id for o in offerings if o.spot_model} | {o.spot_model.name for o in offerings if o.spot_model})
        source = next(iter(fitted.values())).source
        raise InputError(source, "models", f"{', '.join(sorted(fitted))} match no spot offering of this plan; "
                         f"keys are offering ids or spot model names: {', '.join(keys)}")
    return out


MARKET_MODES = ("ensemble", "traces", "fit")


def with_market(offerings: list[Offering], mode: str, traces: tuple[str, ...] = (),
                home_weight: float = 1.0) -> list[Offering]:
    """The offerings' spot markets as asked: `ensemble` (the catalog's capacity groups, and `traces` as
    more groups), `traces` (only those groups), `fit` (the one fitted renewal model, as before the
    ensemble); each offering's groups measured in its own region weigh `home_weight` times the others
    (MarketSpec.at_home)."""
    from costsim.ensemble import DEFAULT_REPLAY_SHARE, MarketSpec, groups_from_paths
    if not home_weight > 0:
        raise InputError("--home-weight", "home-weight", f"got {home_weight:g}; allowed: a number > 0 (1 weighs "
                         "every capacity group the same)")
    if mode not in MARKET_MODES:
        raise InputError("--market", "market", f"got {mode!r}; allowed: {', '.join(MARKET_MODES)}")
    if mode == "traces" and not traces:
        raise InputError("--market", "market", "traces replays your capacity only: give --market-trace PATH")
    if mode == "fit" and traces:
        raise InputError("--market-trace", "market-trace", "--market fit draws from one fitted model; traces join "
                         "--market ensemble or make --market traces")
    extra = groups_from_paths(list(traces)) if traces else ()
    out = []
    for o in offerings:
        model = o.spot_model
        if model is None:
            out.append(o)
            continue
        base = model.market
        share = base.replay_share if base is not None else DEFAULT_REPLAY_SHARE
        if mode == "fit":
            market = None
        elif mode == "traces" or base is None:
            market = MarketSpec(name="your traces", groups=extra, replay_share=share) if extra else None
        else:
            market = replace(base, groups=base.groups + extra, name=base.name + " + your traces") if extra else base
        if market is not None:
            market = market.at_home(o.region, home_weight)
        out.append(replace(o, spot_model=replace(model, market=market)))
    return out
