"""plan.json (schema costsim.plan/1): the whole contract between `costsim plan` and `runner execute`.

A frozen `Plan`, every field validated once when it is read (`Plan.read`, `Plan.from_dict`: an
InputError names the file and the field) and written in one shape (`Plan.to_dict`, `Plan.write`).
The planner builds one (costsim.planfile); the runner, its workers, `calibrate`, `control` and
`export` read one. docs/plan-json.md lists the fields, those the runner adds among them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from costsim.contract import notice
from costsim.contract.jsonfiles import Fields, read_json, write_atomic
from costsim.errors import InputError
from costsim.policies import POLICIES
from costsim.runtime import Runtime, parse_runtime
from costsim.spec import MARKETS, ON_DEMAND

SCHEMA = "costsim.plan/1"
PRECISIONS = ("bf16", "fp16", "fp32")


def job_steps(samples: int, global_batch: int) -> int:
    """Optimizer steps of a whole job: what `runner execute` runs unless told `--steps`."""
    return max(1, math.ceil(samples / global_batch))


@dataclass(frozen=True, kw_only=True)
class Workload:
    name: str
    model: str                        # a runner workload name (e.g. sdxl-unet, tiny)
    samples: int
    global_batch: int
    precision: str = "fp32"
    resolution: int | None = None
    source: str | None = None
    options: dict[str, str] = field(default_factory=dict)   # the runner workload's options (ema); --option overrides


@dataclass(frozen=True, kw_only=True)
class Billing:
    increment_s: float = 1.0
    minimum_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Resources:
    gpu: str                          # required: a plan without it is not a CPU run
    gpus_per_node: int
    nodes: int
    market: str                       # the market the job starts on
    offering: str = ""
    provider: str | None = None
    region: str | None = None
    instance: str | None = None
    fallback: str | None = None       # on-demand, when the policy falls back to it; else None
    price_per_node_h: dict[str, float] | None = None
    currency: str | None = None
    price_read_date: str | None = None
    catalog: str | None = None        # the price catalog: built-in, or the overlay folder given with --catalog
    spot_model: str | None = None
    billing: Billing | None = None
    spot_notice_s: float | None = None
    min_nodes: int | None = None      # runner-added: the elastic range min_nodes..nodes


@dataclass(frozen=True, kw_only=True)
class Policy:
    name: str
    deadline_s: float
    changeover_s: float = 0.0         # a new instance's set-up before the job's own start-up
    p_deadline_target: float | None = None


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    interval_s: float
    keep: int
    async_: bool                      # plan.json "async"
    interval_steps: int | None = None   # runner-added: an interval in steps (drills, exact tests)
    location: str | None = None       # a folder or s3://bucket/prefix (default: RUN/checkpoints); no credentials
    bytes: float | None = None        # one checkpoint's size (the profile's): what the disk must hold
    storage: str | None = None        # the store the plan was priced with (data/catalog/storage.yaml)
    storage_kind: str | None = None   # node, shared or object
    node_disk_bytes: float | None = None   # what the node's disk must hold at once (the exports ask for it)
    notice_save: str = "auto"         # at a spot notice: costsim.contract.notice's rule, or always save


@dataclass(frozen=True, kw_only=True)
class Spread:
    """A Monte Carlo statistic's mean and percentiles; None where trials never finished."""

    mean: float | None = None
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None


@dataclass(frozen=True, kw_only=True)
class Prediction:
    step_time_s: float
    samples_per_s: float
    makespan_s: Spread = Spread()
    cost: Spread | None = None
    p_deadline: float | None = None
    preemptions_mean: float | None = None
    work_s: float | None = None
    per_gpu_batch: int | None = None  # the micro-batch the plan was priced at; the runner never exceeds it
    accumulation: int = 1
    checkpoint_save_s: float | None = None
    checkpoint_upload_s: float | None = None   # the part of checkpoint_save_s that is the upload to an object store
    checkpoint_stall_s: float | None = None
    restart_s: float | None = None
    startup_s: float | None = None
    trials: int | None = None
    seed: int | None = None
    # the spot market the trials drew from: an ensemble's {name, replay_share, groups: [{name, period,
    # traces, region?}], home?, home_weight? (the job's region, whose groups weigh that many times the others),
    # recent: {share, past_s, bandwidth, source, state?: {up, age_s}, gang_shares?, gang_states?} when
    # the plan was given the job's recent capacity} (costsim.ensemble.MarketSpec); null for one fitted model or no
    # spot market. state: whether the market had capacity at the last look and for how long (at most past_s);
    # gang_shares/gang_states: from a count trace, the share of the past in which 1, 2, ... instances could be had
    # and their state
    market: dict | None = None
    step_time_spread: float | None = None         # run-to-run relative sd of the step time the trials drew
    worst_group: dict | None = None               # {name, p_deadline}: the capacity group that does worst
    group_p_deadline: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ProfileRef:
    id: str | None = None
    sha256: str | None = None
    source: str | None = None
    path: str | None = None
    variant: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunSection:
    """Runner-added, only in a run folder's copy: `runner execute`'s command line, for its workers."""

    steps: int | None = None          # stop after this many steps; None: the whole job
    options: dict[str, str] = field(default_factory=dict)
    workload_entry: str | None = None
    seed: int = 0
    final_save: bool = True
    fingerprint: str | None = None    # of what defines the job (costsim.contract.job), in RUN/plan.json


@dataclass(frozen=True, kw_only=True)
class Plan:
    workload: Workload
    resources: Resources
    policy: Policy
    checkpoint: Checkpoint
    prediction: Prediction
    runtime: Runtime = Runtime()      # the runner settings the plan's figures were measured under
    profile: ProfileRef = ProfileRef()
    created: str | None = None
    costsim_version: str | None = None
    sensitivity: dict[str, Any] | None = None   # planner-added with --spot-model; read by people
    run: RunSection | None = None

    @property
    def job_steps(self) -> int:
        return job_steps(self.workload.samples, self.workload.global_batch)

    def with_market(self, market: str) -> Plan:
        return replace(self, resources=replace(self.resources, market=market))

    # -- JSON -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": SCHEMA}
        for name, value in (("workload", self.workload), ("resources", self.resources), ("policy", self.policy),
                            ("checkpoint", self.checkpoint), ("prediction", self.prediction)):
            doc[name] = _section(value)
        doc["runtime"] = self.runtime.as_dict()
        doc["profile"] = _section(self.profile)
        if self.sensitivity is not None:
            doc["sensitivity"] = self.sensitivity
        doc["created"], doc["costsim_version"] = self.created, self.costsim_version
        if self.run is not None:
            doc["run"] = _section(self.run)
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"

    def write(self, path: str | Path) -> Path:
        write_atomic(Path(path), self.to_json())
        return Path(path)

    @classmethod
    def read(cls, path: str | Path) -> Plan:
        return cls.from_dict(read_json(Path(path)), str(path))

    @classmethod
    def from_dict(cls, doc: dict, source: str = "plan.json") -> Plan:
        f = Fields(source, doc)
        if doc.get("schema") != SCHEMA:
            raise InputError(source, "schema", f"got {doc.get('schema')!r}; expected {SCHEMA!r}")
        f.reject_unknown({"schema", "workload", "resources", "policy", "checkpoint", "prediction", "runtime",
                          "profile", "sensitivity", "created", "costsim_version", "run"})
        sensitivity = doc.get("sensitivity")
        if sensitivity is not None and not isinstance(sensitivity, dict):
            raise InputError(source, "sensitivity", "expected a mapping")
        return cls(workload=_workload(f.mapping_of("workload")), resources=_resources(f.mapping_of("resources")),
                   policy=_policy(f.mapping_of("policy")), checkpoint=_checkpoint(f.mapping_of("checkpoint")),
                   prediction=_prediction(f.mapping_of("prediction")),
                   runtime=parse_runtime(doc.get("runtime"), source),
                   profile=_profile(f.mapping_of("profile", None)),
                   created=f.text("created", None), costsim_version=f.text("costsim_version", None),
                   sensitivity=sensitivity, run=_run(f.mapping_of("run")) if doc.get("run") is not None else None)


# Written only when set: the fields the runner adds.
_OMIT_WHEN_NONE = {"interval_steps", "min_nodes", "fingerprint", "location", "bytes"}


def _section(value) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(value):
        item = getattr(value, f.name)
        if item is None and f.name in _OMIT_WHEN_NONE:
            continue
        key = "async" if f.name == "async_" else f.name
        out[key] = _section(item) if hasattr(item, "__dataclass_fields__") else item
    return out


def _known(f: Fields, cls) -> None:
    f.reject_unknown({"async" if x.name == "async_" else x.name for x in fields(cls)})


def _optional_number(f: Fields, key: str, integer: bool = False):
    return f.number(key, None, integer=integer, allow_zero=True)


def _workload(f: Fields) -> Workload:
    _known(f, Workload)
    precision = f.text("precision", "fp32")
    if precision not in PRECISIONS:
        raise InputError(f.source, f.name("precision"), f"got {precision!r}; allowed: {', '.join(PRECISIONS)}")
    return Workload(name=f.text("name"), model=f.text("model"), samples=f.number("samples", integer=True),
                    global_batch=f.number("global_batch", integer=True), precision=precision,
                    resolution=f.number("resolution", None, integer=True), source=f.text("source", None),
                    options=_text_mapping(f, "options"))


def _resources(f: Fields) -> Resources:
    _known(f, Resources)
    market = f.text("market")
    if market not in MARKETS:
        raise InputError(f.source, f.name("market"), f"got {market!r}; allowed: {', '.join(MARKETS)}")
    fallback = f.text("fallback", None)
    if fallback not in (None, ON_DEMAND):
        raise InputError(f.source, f.name("fallback"), f"got {fallback!r}; allowed: {ON_DEMAND} or null")
    prices = None
    if f.has("price_per_node_h"):
        p = f.mapping_of("price_per_node_h")
        p.reject_unknown(set(MARKETS))
        prices = {m: float(p.number(m, allow_zero=True)) for m in p.mapping}
    billing = None
    if f.has("billing"):
        b = f.mapping_of("billing")
        _known(b, Billing)
        billing = Billing(increment_s=b.number("increment_s", 1.0), minimum_s=b.number("minimum_s", 0.0, allow_zero=True))
    nodes = f.number("nodes", integer=True)
    min_nodes = f.number("min_nodes", None, integer=True)
    if min_nodes is not None and min_nodes > nodes:
        raise InputError(f.source, f.name("min_nodes"), f"got {min_nodes}; expected 1..resources.nodes ({nodes})")
    return Resources(gpu=f.text("gpu"), gpus_per_node=f.number("gpus_per_node", integer=True), nodes=nodes,
                     market=market, offering=f.text("offering", ""), provider=f.text("provider", None),
                     region=f.text("region", None), instance=f.text("instance", None), fallback=fallback,
                     price_per_node_h=prices, currency=f.text("currency", None),
                     price_read_date=f.text("price_read_date", None), catalog=f.text("catalog", None),
                     spot_model=f.text("spot_model", None),
                     billing=billing, spot_notice_s=_optional_number(f, "spot_notice_s"), min_nodes=min_nodes)


def _policy(f: Fields) -> Policy:
    _known(f, Policy)
    name = f.text("name")
    if name not in POLICIES:
        raise InputError(f.source, f.name("name"), f"unknown {name!r}; allowed: {', '.join(sorted(POLICIES))}")
    target = f.raw("p_deadline_target", None)
    return Policy(name=name, deadline_s=f.number("deadline_s"), changeover_s=f.number("changeover_s", 0.0, allow_zero=True),
                  p_deadline_target=None if target is None else f.probability("p_deadline_target"))


def _checkpoint(f: Fields) -> Checkpoint:
    _known(f, Checkpoint)
    location = f.text("location", None)
    if location is not None and "://" in location and not location.startswith("s3://"):
        raise InputError(f.source, f.name("location"), f"got {location!r}; allowed: a folder or s3://bucket/prefix")
    kind = f.text("storage_kind", None)
    if kind not in (None, "node", "shared", "object"):
        raise InputError(f.source, f.name("storage_kind"), f"got {kind!r}; allowed: node, shared, object")
    notice_save = f.text("notice_save", notice.AUTO)
    if notice_save not in notice.MODES:
        raise InputError(f.source, f.name("notice_save"), f"got {notice_save!r}; allowed: {', '.join(notice.MODES)}")
    return Checkpoint(interval_s=f.number("interval_s"), keep=f.number("keep", integer=True), notice_save=notice_save,
                      async_=f.boolean("async"), interval_steps=f.number("interval_steps", None, integer=True),
                      location=location, bytes=f.number("bytes", None), storage=f.text("storage", None),
                      storage_kind=kind, node_disk_bytes=f.number("node_disk_bytes", None, allow_zero=True))


def _spread(f: Fields) -> Spread:
    _known(f, Spread)
    return Spread(mean=_optional_number(f, "mean"), p10=_optional_number(f, "p10"), p50=_optional_number(f, "p50"),
                  p90=_optional_number(f, "p90"))


def _prediction(f: Fields) -> Prediction:
    _known(f, Prediction)
    p_deadline = f.share("p_deadline", None)
    groups = f.mapping_of("group_p_deadline", None)   # a group whose trials all miss has 0: a share, not a target
    for name in groups.mapping:
        groups.share(name)
    worst = f.mapping_of("worst_group", None)
    if worst.mapping:
        worst.text("name")
        worst.share("p_deadline")
    return Prediction(
        market=_market(f.mapping_of("market")) if f.has("market") else None,
        step_time_spread=_optional_number(f, "step_time_spread"),
        worst_group=dict(worst.mapping) or None,
        group_p_deadline={str(k): float(v) for k, v in groups.mapping.items()},
        step_time_s=f.number("step_time_s"), samples_per_s=f.number("samples_per_s"),
        makespan_s=_spread(f.mapping_of("makespan_s", None)),
        cost=_spread(f.mapping_of("cost")) if f.has("cost") else None,
        p_deadline=p_deadline,
        preemptions_mean=_optional_number(f, "preemptions_mean"), work_s=_optional_number(f, "work_s"),
        per_gpu_batch=f.number("per_gpu_batch", None, integer=True), accumulation=f.number("accumulation", 1, integer=True),
        checkpoint_save_s=_optional_number(f, "checkpoint_save_s"),
        checkpoint_upload_s=_optional_number(f, "checkpoint_upload_s"),
        checkpoint_stall_s=_optional_number(f, "checkpoint_stall_s"),
        restart_s=_optional_number(f, "restart_s"), startup_s=_optional_number(f, "startup_s"),
        trials=f.number("trials", None, integer=True), seed=_seed(f, "seed", None))


def _state(f: Fields) -> dict:
    """prediction.market.recent.state: {up: whether the market had capacity at the last look, age_s: since when
    (null: not known)}."""
    f.reject_unknown({"up", "age_s"})
    age = f.raw("age_s", None)
    return {"up": f.boolean("up"), "age_s": None if age is None else f.number("age_s", allow_zero=True)}


def _market(f: Fields) -> dict:
    """prediction.market: an ensemble's name, replay_share and groups, each {name, period, traces, region (where
    known)}; where the job's region weighs its groups more, home (the region) and home_weight."""
    f.reject_unknown({"name", "replay_share", "groups", "recent", "home", "home_weight"})
    name, share = f.text("name"), f.probability("replay_share")
    home = {"home": f.text("home"), "home_weight": f.number("home_weight")} if f.has("home") else {}
    recent = None
    if f.has("recent"):
        r = f.mapping_of("recent")
        r.reject_unknown({"share", "past_s", "bandwidth", "source", "state", "gang_shares", "gang_states"})
        recent = {"share": r.share("share"), "past_s": r.number("past_s"), "bandwidth": r.number("bandwidth"),
                  "source": r.text("source", "")}
        if r.has("state"):
            recent["state"] = _state(r.mapping_of("state"))
        if r.has("gang_shares"):
            shares = r.raw("gang_shares")
            if not isinstance(shares, list) or not shares or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in shares):
                raise InputError(f.source, r.name("gang_shares"), "expected a list of shares from 0 to 1, one a gang "
                                 "size from 1 node")
            recent["gang_shares"] = [float(v) for v in shares]
        if r.has("gang_states"):
            states = r.raw("gang_states")
            if not isinstance(states, list) or len(states) != len(recent.get("gang_shares", ())):
                raise InputError(f.source, r.name("gang_states"), "expected a list of {up, age_s}, one for each of "
                                 "gang_shares")
            recent["gang_states"] = [_state(Fields(f.source, item if isinstance(item, dict) else {},
                                                   f"{r.name('gang_states')}[{i}].")) for i, item in enumerate(states)]
    groups = f.raw("groups")
    if not isinstance(groups, list) or not groups:
        raise InputError(f.source, f.name("groups"), "expected a list of {name, period, traces}")
    out = []
    for index, item in enumerate(groups):
        g = Fields(f.source, item if isinstance(item, dict) else {}, f"{f.name('groups')}[{index}].")
        g.reject_unknown({"name", "period", "traces", "region"})
        traces = g.raw("traces")
        if not isinstance(traces, list) or not traces or not all(isinstance(t, str) for t in traces):
            raise InputError(f.source, g.name("traces"), "expected a list of trace paths")
        out.append({"name": g.text("name"), "period": g.text("period"), "traces": list(traces),
                    **({"region": g.text("region")} if g.has("region") else {})})
    return {"name": name, "replay_share": share, "groups": out, **home, **({"recent": recent} if recent else {})}


def _profile(f: Fields) -> ProfileRef:
    _known(f, ProfileRef)
    return ProfileRef(**{x.name: f.text(x.name, None) for x in fields(ProfileRef)})


def _text_mapping(f: Fields, key: str) -> dict[str, str]:
    options = f.raw(key, {})
    if not isinstance(options, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
        raise InputError(f.source, f.name(key), "expected a mapping of option names to text")
    return dict(options)


def _run(f: Fields) -> RunSection:
    _known(f, RunSection)
    options = _text_mapping(f, "options")
    entry = f.raw("workload_entry", None)
    if entry is not None and not isinstance(entry, str):
        raise InputError(f.source, f.name("workload_entry"), f"got {entry!r}; expected module:function or null")
    return RunSection(steps=f.number("steps", None, integer=True), options=dict(options), workload_entry=entry,
                      seed=_seed(f, "seed", 0), final_save=f.boolean("final_save", True),
                      fingerprint=f.text("fingerprint", None))


def _seed(f: Fields, key: str, default):
    value = f.raw(key, default)
    if value is default:
        return value
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f.source, f.name(key), f"got {value!r}; expected an integer")
    return value
