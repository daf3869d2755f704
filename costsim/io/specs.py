"""Reading workloads, profiles, the catalog, owned hardware and traces into spec values."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from costsim import cost
from costsim.errors import InputError
from costsim.io.files import Fields, data_dir, read_json, read_yaml, resolve, sha256_file
from costsim.runtime import parse_runtime
from costsim.spec import FittedSpotModel, GpuProfile, Offering, OwnedCapacity, Profile, SpotModel, Workload

WORKLOAD_FIELDS = {"name", "model", "description", "samples", "global_batch", "precision",
                   "resolution", "deadline", "p_deadline", "max_nodes", "profile", "clouds", "gpus",
                   "checkpoint", "owned", "options"}


def load_workload(ref: str) -> Workload:
    """A workload from a YAML file or a built-in name (data/workloads/NAME.yaml)."""
    path = resolve(ref, "workloads")
    f = Fields(path, read_yaml(path))
    f.reject_unknown(WORKLOAD_FIELDS)
    ckpt = f.mapping_of("checkpoint", None)
    ckpt.reject_unknown({"keep", "async", "interval", "storage"})
    options = f.raw("options", {})
    if not isinstance(options, dict) or not all(isinstance(v, (str, int, float, bool)) for v in options.values()):
        raise InputError(path, "options", "expected a mapping of the runner workload's options to values, "
                         "e.g. {ema: 0.9999}")
    samples = f.number("samples", integer=True)
    global_batch = f.number("global_batch", integer=True)
    if global_batch > samples:
        raise InputError(path, "global_batch", f"{global_batch} exceeds samples ({samples})")
    precision = f.text("precision", "bf16")
    if precision not in ("bf16", "fp16", "fp32"):
        raise InputError(path, "precision", f"got {precision!r}; allowed: bf16, fp16, fp32")
    return Workload(
        name=f.text("name"), model=f.text("model"), description=f.text("description", ""),
        samples=samples, global_batch=global_batch, precision=precision,
        resolution=f.number("resolution", None, integer=True),
        deadline_s=f.duration("deadline"), p_deadline=f.probability("p_deadline", 0.9),
        profile=f.text("profile"), max_nodes=f.number("max_nodes", 4, integer=True),
        clouds=f.names("clouds"), gpus=f.names("gpus"),
        checkpoint_keep=ckpt.number("keep", 2, integer=True),
        checkpoint_async=ckpt.boolean("async", True),
        checkpoint_interval_s=ckpt.duration("interval", None),
        checkpoint_storage=ckpt.text("storage", None),
        options={str(k): _option_text(v) for k, v in options.items()},
        owned=_owned(f), source=str(path),
    )


def _option_text(value) -> str:
    """An option's value as the runner takes it on its command line (KEY=VALUE)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def ema_enabled(options: dict) -> bool:
    """Whether a workload's options keep an EMA copy of the weights (the runner's `ema=DECAY`)."""
    value = options.get("ema", "").strip().lower()
    return value not in ("", "0", "0.0", "off", "false", "none", "no")


def _owned(f: Fields) -> tuple[OwnedCapacity, ...]:
    entries = f.raw("owned", [])
    if not isinstance(entries, list):
        raise InputError(f.source, "owned", "expected a list of {sku, nodes}")
    owned = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InputError(f.source, f"owned[{index}]", "expected a mapping with sku and nodes")
        item = Fields(f.source, entry, f"owned[{index}].")
        item.reject_unknown({"sku", "nodes"})
        owned.append(OwnedCapacity(sku=item.text("sku"), nodes=item.number("nodes", 1, integer=True)))
    return tuple(owned)


# -- profiles --------------------------------------------------------------------------------
PROFILE_FIELDS = {"id", "model", "source", "date", "description", "checkpoint_bytes", "checkpoint_save",
                  "checkpoint_stall", "restart", "startup", "overlap_gamma", "inter_node", "gpus", "unsupported",
                  "calibrations", "export_bytes", "ema", "storage", "step_time_spread"}
GPU_FIELDS = {"source", "measured", "compute_overhead", "compute_per_sample", "max_batch_per_gpu", "intra_node",
              "overlap_gamma", "checkpoint_save", "checkpoint_stall", "restart", "startup", "runtime", "variant",
              "variants", "step_time_spread"}


def load_profile(ref: str) -> Profile:
    """A throughput profile from a YAML file or a built-in name (data/profiles/NAME.yaml)."""
    path = resolve(ref, "profiles")
    f = Fields(path, read_yaml(path))
    f.reject_unknown(PROFILE_FIELDS)   # a typo (checkpoint_stal) would otherwise keep the default silently
    shared = {
        "checkpoint_save_s": f.duration("checkpoint_save"),
        "checkpoint_stall_s": f.duration("checkpoint_stall", allow_zero=True),
        "restart_s": f.duration("restart", allow_zero=True),
        "startup_s": f.duration("startup", allow_zero=True),
        "overlap_gamma": f.number("overlap_gamma", 1.0),
        "step_time_spread": _spread(f, 0.0),
    }
    inter = f.mapping_of("inter_node", None)
    inter.reject_unknown({"a", "b", "at_gbps"})
    shared.update(inter_a_s=inter.duration("a", 0.0, allow_zero=True),
                  inter_b_s=inter.duration("b", 0.0, allow_zero=True),
                  inter_at_gbps=inter.number("at_gbps", 100.0))
    gpus_raw = f.raw("gpus")
    if not isinstance(gpus_raw, dict) or not gpus_raw:
        raise InputError(path, "gpus", "expected a mapping of GPU type to its figures")
    gpus, variants = {}, {}
    for name, body in gpus_raw.items():
        name = str(name)
        gpus[name], others = _gpu_configurations(Fields(path, body if isinstance(body, dict) else {}, f"gpus.{name}."),
                                                 name, shared)
        if others:
            variants[name] = others
    unsupported = f.raw("unsupported", {})
    if not isinstance(unsupported, dict):
        raise InputError(path, "unsupported", "expected a mapping of GPU type to the reason")
    ema = f.mapping_of("ema", None)
    ema.reject_unknown({"checkpoint_bytes", "max_batch_per_gpu", "source"})
    ema_batch = ema.mapping_of("max_batch_per_gpu", None)
    for name in ema_batch.mapping:
        if str(name) not in gpus:
            raise InputError(path, f"ema.max_batch_per_gpu.{name}", f"no GPU entry {name!r} in gpus")
    measured = f.mapping_of("storage", None)
    storage = {}
    for name in measured.mapping:
        m = measured.mapping_of(str(name))
        m.reject_unknown({"write_gb_per_s", "read_gb_per_s", "source"})
        storage[str(name)] = {k: m.number(k) for k in ("write_gb_per_s", "read_gb_per_s") if m.has(k)}
    return Profile(id=f.text("id"), model=f.text("model"), source=f.text("source"),
                   date=f.text("date"), checkpoint_bytes=f.number("checkpoint_bytes"), storage=storage,
                   export_bytes=f.number("export_bytes", 0.0, allow_zero=True),
                   ema_checkpoint_bytes=ema.number("checkpoint_bytes", None) if ema.mapping else None,
                   ema_max_batch={str(k): ema_batch.number(str(k), integer=True) for k in ema_batch.mapping},
                   gpus=gpus, unsupported={str(k): str(v) for k, v in unsupported.items()},
                   path=str(path), sha256=sha256_file(path), variants=variants)


def load_profile_for(model: str, ref: str, *, user: str = "workload") -> Profile:
    """A profile that measures `model`: a profile of another model (a CPU drill's for SDXL) would price
    the job at another job's speed, so it is refused, naming both."""
    profile = load_profile(ref)
    if profile.model != model:
        raise InputError(profile.path, "model", f"this profile measures {profile.model!r}, the {user} trains "
                         f"{model!r}; give a profile of {model!r} (its `model:` field)")
    return profile


def _gpu_configurations(g: Fields, gpu: str, shared: dict) -> tuple:
    """A GPU entry's main figures and its `variants`: other runner configurations, each a mapping of
    the fields that differ (the rest are the main entry's). The planner weighs them all: faster steps
    may come with a dearer restart. Each needs a name (the main one's is `variant`) and runner
    settings of its own, which is how `costsim calibrate` finds the configuration its runs belong to."""
    raw = g.raw("variants", None)
    base = {k: v for k, v in g.mapping.items() if k not in ("variants", "variant")}
    if raw is None:
        return _gpu_profile(Fields(g.source, base, g.prefix), gpu, shared), ()
    if not isinstance(raw, dict) or not raw:
        raise InputError(g.source, g.name("variants"), "expected a mapping of configuration name to the fields "
                         "that differ, e.g. {blocks: {runtime: {compile: blocks}, compute_per_sample: 0.05s}}")
    main = _gpu_profile(Fields(g.source, base, g.prefix), gpu, shared, g.text("variant"))
    others, seen = [], {main.runtime: main.variant}
    for name, body in raw.items():
        where = f"{g.prefix}variants.{name}."
        if not isinstance(body, dict):
            raise InputError(g.source, where.rstrip("."), "expected a mapping of the fields that differ")
        if str(name) in seen.values():
            raise InputError(g.source, where + "name", f"{name!r} names two configurations; names must differ")
        other = _gpu_profile(Fields(g.source, {**base, **body}, where), gpu, shared, str(name))
        if other.runtime in seen:
            raise InputError(g.source, where + "runtime", f"the same runner settings as {seen[other.runtime]!r} "
                             f"({other.runtime.describe()}); configurations differ in their runner settings")
        seen[other.runtime] = other.variant
        others.append(other)
    return main, tuple(others)


def _gpu_profile(g: Fields, gpu: str, shared: dict, variant: str = "") -> GpuProfile:
    g.reject_unknown(GPU_FIELDS)
    g.mapping_of("intra_node", None).reject_unknown({"a", "b"})
    intra = g.mapping_of("intra_node", None)
    overrides = {key: g.duration(name, shared[key], allow_zero=key != "checkpoint_save_s")
                 for key, name in (("checkpoint_save_s", "checkpoint_save"),
                                   ("checkpoint_stall_s", "checkpoint_stall"),
                                   ("restart_s", "restart"), ("startup_s", "startup"))}
    return GpuProfile(
        gpu=gpu, source=g.text("source", "unspecified"),
        compute_overhead_s=g.duration("compute_overhead", allow_zero=True),
        compute_per_sample_s=g.duration("compute_per_sample"),
        max_batch_per_gpu=g.number("max_batch_per_gpu", integer=True),
        intra_a_s=intra.duration("a", 0.0, allow_zero=True), intra_b_s=intra.duration("b", 0.0, allow_zero=True),
        inter_a_s=shared["inter_a_s"], inter_b_s=shared["inter_b_s"], inter_at_gbps=shared["inter_at_gbps"],
        overlap_gamma=g.number("overlap_gamma", shared["overlap_gamma"]), **overrides,
        runtime=parse_runtime(g.raw("runtime", None), g.source, prefix=g.name("runtime")),
        variant=variant, step_time_spread=_spread(g, shared["step_time_spread"]),
    )


def _spread(g: Fields, default: float) -> float:
    value = g.number("step_time_spread", default, allow_zero=True)
    if value >= 1.0:
        raise InputError(g.source, g.name("step_time_spread"), f"got {value:g}; expected a relative standard "
                         "deviation in [0, 1), e.g. 0.05 for 5%")
    return float(value)


# -- catalog ---------------------------------------------------------------------------------
OFFERING_COLUMNS = ["provider", "region", "instance", "gpu", "gpu_memory_gb", "gpus_per_node",
                    "interconnect", "inter_node_gbps", "on_demand_usd_h", "spot_usd_h", "spot_notice_s",
                    "spot_model", "provision_s", "billing_increment_s", "billing_minimum_s", "source",
                    "read_date"]


def load_spot_models(path: Path | None = None) -> dict[str, SpotModel]:
    """Spot capacity models by name (data/catalog/spot_models.yaml)."""
    path = path or data_dir() / "catalog" / "spot_models.yaml"
    f = Fields(path, read_yaml(path))
    markets = _markets(f)
    models = f.mapping_of("models")
    result = {}
    for name in models.mapping:
        m = models.mapping_of(name)
        market = m.text("ensemble", None)
        if market is not None and market not in markets:
            raise InputError(str(path), m.name("ensemble"), f"unknown {market!r}; allowed: {', '.join(markets)}")
        result[name] = SpotModel(name=name, mtbf_s=m.duration("mtbf"),
                                 wait_mean_s=m.duration("wait_mean", 0.0, allow_zero=True),
                                 weibull_shape=m.number("weibull_shape", 1.0),
                                 market=markets[market] if market else None)
    return result


def _markets(f: Fields) -> dict:
    """The capacity ensembles of a spot model file (`ensembles:`), each a MarketSpec; trace paths are
    relative to the data folder."""
    from costsim.ensemble import MarketSpec, groups_from_paths
    found = {}
    ensembles = f.mapping_of("ensembles", None)
    for name in ensembles.mapping:
        e = ensembles.mapping_of(name)
        share = e.probability("replay_share")
        groups = []
        raw = e.raw("groups")
        if not isinstance(raw, list) or not raw:
            raise InputError(e.source, e.name("groups"), "expected a list of {period, traces}")
        for index, item in enumerate(raw):
            g = Fields(e.source, item if isinstance(item, dict) else {}, prefix=f"{e.name('groups')}[{index}].")
            g.reject_unknown({"period", "traces", "name", "region"})
            period, named, region = g.text("period"), g.text("name", None), g.text("region", None)
            paths = g.raw("traces")
            if isinstance(paths, str):
                paths = [paths]
            if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
                raise InputError(e.source, g.name("traces"), "expected a path or a list of paths (under data/)")
            missing = [p for p in paths if not (data_dir() / p).exists()]
            if missing:
                raise InputError(e.source, g.name("traces"), f"{missing[0]} not found under {data_dir()}")
            made = groups_from_paths([str(data_dir() / p) for p in paths], period)
            if named is not None and len(made) != 1:
                raise InputError(e.source, g.name("name"), f"names one group; its traces make {len(made)} (a folder "
                                 "is a group a file): leave name out")
            for spec in made:
                groups.append(replace(spec, name=f"{period}/{named or spec.name.split('/')[-1]}",
                                      paths=tuple(_data_relative(p) for p in spec.paths),
                                      region=region or spec.region))
        found[name] = MarketSpec(name=name, groups=tuple(groups), replay_share=share)
    return found


def _data_relative(path: str) -> str:
    """A shipped trace's path as plan.json records it: relative to the data folder."""
    try:
        return str(Path(path).resolve().relative_to(data_dir().resolve()))
    except ValueError:
        return path


def load_fitted_spot_models(path: str | Path) -> dict[str, FittedSpotModel]:
    """A spot model file for `--spot-model`: `models` keyed by offering id or catalog model name,
    each with any of mtbf, wait_mean, weibull_shape, and optionally fitted.ci (95% intervals)."""
    f = Fields(path, read_yaml(Path(path)))
    models = f.mapping_of("models")
    if not models.mapping:
        raise InputError(str(path), "models", "no models in the file")
    result = {}
    for key in models.mapping:
        m = models.mapping_of(key)
        m.reject_unknown({"mtbf", "wait_mean", "weibull_shape", "fitted"})
        ci = {}
        raw_ci = m.mapping_of("fitted", None).mapping.get("ci") or {}
        if not isinstance(raw_ci, dict):
            raise InputError(str(path), f"models.{key}.fitted.ci", "expected a mapping of [low, high]")
        for name, pair in raw_ci.items():
            if pair is None:
                continue
            if (not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(v, (int, float)) for v in pair)
                    or not 0 <= pair[0] <= pair[1]):
                raise InputError(str(path), f"models.{key}.fitted.ci.{name}", f"got {pair!r}; expected [low, high]")
            ci[name] = (float(pair[0]), float(pair[1]))
        result[key] = FittedSpotModel(key=key, source=str(path), mtbf_s=m.duration("mtbf", None),
                                      wait_mean_s=m.duration("wait_mean", None, allow_zero=True),
                                      weibull_shape=m.number("weibull_shape", None), ci=ci)
    return result


def load_offerings(path: Path | None = None, catalog: str = "built-in") -> list[Offering]:
    """Cloud offerings from the dated price catalog (data/catalog/offerings.csv, or an overlay's, named
    `catalog`: costsim.io.catalog)."""
    path = path or data_dir() / "catalog" / "offerings.csv"
    spot_models = load_spot_models()
    try:
        numbered = [(n, line) for n, line in enumerate(Path(path).read_text().splitlines(), 1)
                    if line.strip() and not line.startswith("#")]
    except FileNotFoundError:
        raise InputError(str(path), "file", "not found") from None
    reader = csv.DictReader(line for _, line in numbered)
    missing = [c for c in OFFERING_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(str(path), "header", f"missing columns: {', '.join(missing)}")
    return [_offering(path, numbered[i + 1][0], row, spot_models, catalog) for i, row in enumerate(reader)]


def _offering(path, line: int, row: dict, spot_models: dict[str, SpotModel], catalog: str) -> Offering:
    f = Fields(f"{path} line {line}", row)
    spot_price = f.number("spot_usd_h", None)
    spot_model = None
    if spot_price is not None:
        name = f.text("spot_model")
        if name not in spot_models:
            raise InputError(f.source, "spot_model", f"unknown {name!r}; allowed: {', '.join(spot_models)}")
        spot_model = spot_models[name]
    return Offering(
        id=f"{row['provider']}/{row['region']}/{row['instance']}", provider=f.text("provider"),
        region=f.text("region"), instance=f.text("instance"), gpu=f.text("gpu"),
        gpu_memory_gb=f.number("gpu_memory_gb"), gpus_per_node=f.number("gpus_per_node", integer=True),
        interconnect=f.text("interconnect"), inter_node_gbps=f.number("inter_node_gbps", allow_zero=True),
        on_demand_per_h=f.number("on_demand_usd_h"), spot_per_h=spot_price,
        spot_notice_s=f.number("spot_notice_s", allow_zero=True), spot_model=spot_model,
        provision_s=f.number("provision_s", allow_zero=True),
        billing_increment_s=f.number("billing_increment_s"),
        billing_minimum_s=f.number("billing_minimum_s", allow_zero=True),
        source=f.text("source"), read_date=f.text("read_date"), catalog=catalog,
    )


def load_skus(path: Path | None = None) -> dict[str, tuple[dict, cost.Ownership, str]]:
    """Owned server SKUs: name -> (their fields, their Ownership, the file's read date)."""
    path = path or data_dir() / "hardware" / "skus.yaml"
    f = Fields(path, read_yaml(path))
    defaults = f.raw("defaults", {})
    skus = f.mapping_of("skus")
    result = {}
    for name in skus.mapping:
        body = {**defaults, **skus.mapping_of(name).mapping}
        s = Fields(path, body, f"skus.{name}.")
        ownership = cost.Ownership(
            price=s.number("price", allow_zero=True), life_years=s.duration("life") / (365 * 86400),
            residual_fraction=s.number("residual_fraction", 0.0, allow_zero=True),
            financing_rate=s.number("financing_rate", 0.0, allow_zero=True),
            power_kw_load=s.number("power_kw_load", allow_zero=True),
            power_kw_idle=s.number("power_kw_idle", allow_zero=True), pue=s.number("pue"),
            electricity_per_kwh=s.number("electricity_per_kwh", allow_zero=True),
            colocation_per_kw_month=s.number("colocation_per_kw_month", allow_zero=True),
            staff_per_year=s.number("staff_per_year", allow_zero=True),
            support_fraction_per_year=s.number("support_fraction_per_year", allow_zero=True),
            spares_fraction_per_year=s.number("spares_fraction_per_year", allow_zero=True))
        result[name] = (body, ownership, f.text("read_date"))
    return result


def owned_offering(sku: str, nodes: int, skus: dict, source: str) -> Offering:
    """An owned SKU as an offering priced at its cost of ownership per server-hour."""
    if sku not in skus:
        raise InputError(source, "owned.sku", f"unknown SKU {sku!r}; allowed: {', '.join(sorted(skus))}")
    body, ownership, read_date = skus[sku]
    s = Fields(source, body, f"skus.{sku}.")
    return Offering(
        id=f"owned/{sku}", provider="owned", region="on-prem", instance=sku, gpu=s.text("gpu"),
        gpu_memory_gb=s.number("gpu_memory_gb", allow_zero=True), gpus_per_node=s.number("gpus", integer=True),
        interconnect=s.text("interconnect"), inter_node_gbps=s.number("inter_node_gbps", allow_zero=True),
        on_demand_per_h=None, spot_per_h=None, spot_notice_s=0.0, spot_model=None,
        provision_s=s.duration("provision", 0.0, allow_zero=True), billing_increment_s=1.0,
        billing_minimum_s=0.0, owned_per_h=cost.ownership_per_hour(ownership, 1.0), owned_nodes=nodes,
        source=f"TCO of {s.text('description')}", read_date=read_date)


# -- traces ----------------------------------------------------------------------------------
BUNDLE_SUFFIX = ".json.gz"   # many windows in one file; FILE.json.gz#N names window N


def traces_in(folder: str | Path) -> list[Path]:
    """A folder's capacity traces (its *.json files) in name order, 10.json after 9.json; an InputError where
    it holds none (no traces would mean the model's draws, under a line that says traces)."""
    def natural(path: Path) -> tuple:
        return (0, int(path.stem), path.name) if path.stem.isdigit() else (1, 0, path.name)
    found = sorted(Path(folder).glob("*.json"), key=natural)
    if not found:
        raise InputError(str(folder), "folder", "no *.json capacity traces in it" + _deeper(Path(folder)))
    return found


def _deeper(folder: Path, named: int = 3, depth: int = 4, folders: int = 2000) -> str:
    """Where a folder's traces are further down (a copy of skypilot-org/spot-traces is named at its root, say):
    the first subfolders that hold some, with how many, for the error to name; '' where none do. It looks `depth`
    folders down and at `folders` folders at most, so that a home folder named by mistake is refused at once."""
    counts: dict[Path, int] = {}   # the folder itself holds none: traces_in looked
    for seen, (root, dirs, files) in enumerate(os.walk(folder), start=1):
        here = Path(root)
        dirs.sort()
        if len(here.relative_to(folder).parts) >= depth:
            dirs.clear()
        found = sum(1 for name in files if name.endswith(".json"))
        if found:
            counts[here] = found
        if seen >= folders:
            break
    if not counts:
        return ""
    shown = ", ".join(f"{p.relative_to(folder)} ({n})" for p, n in sorted(counts.items())[:named])
    more = f" and {len(counts) - named} more" if len(counts) > named else ""
    return f"; subfolders hold some: {shown}{more} (name one: each folder is one set of traces)"


def trace_bundle_size(path: str | Path) -> int | None:
    """How many windows a bundle holds (None for a plain trace file)."""
    return len(_bundle(Path(path))["windows"]) if str(path).endswith(BUNDLE_SUFFIX) else None


# Windows cut from one trace agree where they overlap, but for the ticks at a change of state: each window's
# ticks begin at its own start time, up to half a tick off the shared grid (the Can't Be Late bundle: 0.7% of the
# overlapping ticks differ). Windows that differ on more than this share are not one trace.
BUNDLE_DISAGREEMENT = 0.02


def bundle_timeline(path: str | Path) -> tuple[Any, float, list[int]] | None:
    """A bundle whose windows were cut from one trace, as that trace: (its ticks, seconds per tick, each window's
    first tick on it). Each window is placed at its start time (the bundle's `start_times`, ISO 8601, rounded to
    the tick) and each tick is what most of the windows covering it say (a tie: not available). None where the
    bundle has no start times, its windows leave a gap, or they disagree on more than BUNDLE_DISAGREEMENT of the
    ticks where they overlap (not one trace)."""
    import datetime

    import numpy as np
    doc = _bundle(Path(path))
    times = doc.get("start_times")
    if times is None:
        return None
    windows = bundle_windows(path)
    if not isinstance(times, list) or len(times) != len(windows):
        raise InputError(str(path), "start_times", f"one start time a window ({len(windows)}), ISO 8601")
    starts = []
    for index, text in enumerate(times):
        try:
            when = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        except ValueError:
            raise InputError(str(path), f"start_times[{index}]", f"got {text!r}; an ISO 8601 time") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        starts.append(when.timestamp())
    gap_s = float(doc["gap_seconds"])
    first = min(starts)
    origins = [round((t - first) / gap_s) for t in starts]
    n = max(o + len(ticks) for o, (_, ticks, _) in zip(origins, windows))
    down, cover = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for origin, (_, ticks, _) in zip(origins, windows):
        down[origin:origin + len(ticks)] += ticks
        cover[origin:origin + len(ticks)] += 1
    if (cover == 0).any():
        return None
    shared = cover > 1
    if shared.any() and float(np.mean((down[shared] > 0) & (down[shared] < cover[shared]))) > BUNDLE_DISAGREEMENT:
        return None
    return (2 * down >= cover).astype(np.uint8), gap_s, origins


def bundle_windows(path: str | Path) -> list[tuple[str, Any, float]]:
    """Every window of a bundle: (FILE.json.gz#N, ticks as a numpy array, seconds per tick)."""
    import numpy as np
    doc = _bundle(Path(path))
    out = []
    for index, window in enumerate(doc["windows"]):
        ticks = np.frombuffer(window.encode(), dtype=np.uint8) - ord("0") if isinstance(window, str) else None
        if ticks is None or not len(ticks) or (ticks > 1).any():
            raise InputError(str(path), f"windows[{index}]", "ticks must be '0' (spot available) or '1' (not)")
        out.append((f"{path}#{index}", ticks, float(doc["gap_seconds"])))
    return out


def _bundle(path: Path) -> dict:
    import gzip
    import json
    try:
        doc = json.loads(gzip.decompress(path.read_bytes()))
    except FileNotFoundError:
        raise InputError(str(path), "file", "not found") from None
    except (OSError, ValueError):
        raise InputError(str(path), "file", "not a gzipped JSON trace bundle") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("windows"), list) or "gap_seconds" not in doc:
        raise InputError(str(path), "windows", "expected {gap_seconds, windows: ['0101...', ...]}")
    gap_s = doc["gap_seconds"]
    if isinstance(gap_s, bool) or not isinstance(gap_s, (int, float)) or not gap_s > 0:
        raise InputError(str(path), "gap_seconds", f"got {gap_s!r}; a positive number of seconds a tick")
    return doc


def load_trace(path: str | Path, gang: int = 1) -> tuple[list[int], float]:
    """A capacity trace as a gang of `gang` nodes meets it: (ticks with 0 = available and 1 = not, seconds per
    tick), from a JSON trace file, or window N of a bundle (`FILE.json.gz#N`).

    Two kinds of file (`trace_values` tells them apart). A 1-node trace holds 0 (a spot instance could be had)
    and 1 (it could not), the reading of spot-traces' single-node files (data/traces/README.md); a gang meets it
    as its one node would. A multi-node count trace holds, at each tick, how many of the instances asked for could
    be had (0 to N): a gang of n nodes has capacity where n could be had, and is reclaimed when fewer can (the
    reading of the Can't Be Late authors' later gang-scheduling simulator: count >= n available)."""
    return trace_values(path).as_gang(gang)


def load_gang_trace(path: str | Path, gang: int) -> tuple[list[int], float]:
    """`load_trace` for a replay of the trace as the gang's own capacity: a count trace that counts fewer
    instances than the gang is refused (it cannot say when that many could be had)."""
    trace = trace_values(path)
    if trace.counts is not None and gang > trace.counts:
        raise InputError(str(path), "data", f"a count trace of at most {trace.counts} instances: it cannot say when "
                         f"a gang of {gang} nodes had capacity (give traces of that many, or plan fewer nodes)")
    return trace.as_gang(gang)


@dataclass(frozen=True, slots=True)
class TraceValues:
    """A trace file's values as written: a 1-node trace's 0/1 ticks (`counts` None), or a count trace's
    instances that could be had, of at most `counts`."""

    values: list[int]
    gap_s: float
    counts: int | None = None

    def as_gang(self, gang: int) -> tuple[list[int], float]:
        """The ticks a gang of `gang` meets (0 = available, 1 = not) and the seconds a tick: a 1-node trace's as
        they are, a count trace's 0 where `gang` instances could be had, 1 where fewer could."""
        if gang < 1:
            raise ValueError(f"gang {gang}: a whole number of nodes >= 1")
        if self.counts is None:
            return self.values, self.gap_s
        return [0 if count >= gang else 1 for count in self.values], self.gap_s


def trace_values(path: str | Path) -> TraceValues:
    """A trace file's values as written (checked whole numbers >= 0), or a bundle's window's 0/1 ticks. A file
    is a count trace where its `metadata.instances` says how many instances were asked for (values 0 to that); or,
    said nowhere, where a folder it lies in is named `N-node` with N above 1 and no value is above N (spot-traces'
    layout: `availability/16-node/<period>/<zone>_v100_1.json` asked for 16 instances, whatever the most that
    could be had; the `_1` is the GPUs an instance has); or where some value is above 1 (the most it counts is then
    its largest value). A file of 0 and 1 that says nothing is a 1-node trace."""
    text = str(path)
    if BUNDLE_SUFFIX + "#" in text:
        file, _, index = text.rpartition("#")
        doc = _bundle(Path(file))
        if not index.isdigit() or int(index) >= len(doc["windows"]):
            raise InputError(file, "window", f"got #{index}; the bundle has windows 0 to {len(doc['windows']) - 1}")
        window = doc["windows"][int(index)]
        if not window or set(window) - {"0", "1"}:
            raise InputError(file, f"windows[{index}]", "ticks must be '0' (spot available) or '1' (not)")
        return TraceValues([int(c) for c in window], float(doc["gap_seconds"]))
    f = Fields(path, read_json(Path(path)))
    meta = f.mapping_of("metadata")
    gap_s = meta.number("gap_seconds")
    declared = meta.number("instances", None, integer=True)
    ticks = f.raw("data")
    if not isinstance(ticks, list) or not ticks:
        raise InputError(str(path), "data", "expected a non-empty list of ticks")
    if any(isinstance(t, bool) or not isinstance(t, (int, float)) or not float(t).is_integer() or t < 0
           for t in ticks):
        raise InputError(str(path), "data", "ticks must be 0 (spot available) or 1 (not), or for a multi-node "
                         "count trace the whole number of instances that could be had (0 to N)")
    values = [int(t) for t in ticks]
    top = max(values)
    if declared is not None and top > declared:
        raise InputError(str(path), "data", f"a count of {top} instances where metadata.instances says {declared} "
                         "were asked for: counts from 0 to metadata.instances")
    if declared is None:
        asked = _folder_instances(Path(path))
        if asked is not None and asked > 1 and top <= asked:
            declared = asked
    return TraceValues(values, gap_s, declared if declared is not None else (top if top > 1 else None))


def _folder_instances(path: Path) -> int | None:
    """N where a folder the file lies in is named `N-node` (the nearest), else None."""
    for part in reversed(path.parent.parts):
        head, dash, tail = part.partition("-")
        if dash and tail in ("node", "nodes") and head.isdigit():
            return int(head)
    return None
