"""Frozen, validated values: what a workload, an offering, a profile and a plan are.

Parsing and file errors live in io.py; these types hold already-parsed values (seconds, USD/h).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from costsim.runtime import Runtime
from costsim.units import finite_or_none

SPOT, ON_DEMAND, OWNED = "spot", "on-demand", "owned"
MARKETS = (SPOT, ON_DEMAND, OWNED)


@dataclass(frozen=True, kw_only=True, slots=True)
class OwnedCapacity:
    sku: str
    nodes: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """A training job: how much work, on what model, by when, with what confidence."""

    name: str
    model: str
    samples: int
    global_batch: int
    precision: str
    deadline_s: float
    p_deadline: float
    profile: str
    description: str = ""
    resolution: int | None = None
    max_nodes: int = 4
    clouds: tuple[str, ...] | None = None          # None = every provider in the catalog
    gpus: tuple[str, ...] | None = None            # None = every GPU type with a profile
    checkpoint_keep: int = 2
    checkpoint_async: bool = True
    checkpoint_interval_s: float | None = None     # None = the planner chooses
    checkpoint_storage: str | None = None          # a store's name (data/catalog/storage.yaml); None = the provider's
    options: dict = field(default_factory=dict)    # the runner workload's options (text), e.g. ema
    owned: tuple[OwnedCapacity, ...] = ()
    source: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class SpotModel:
    """Spot capacity behaviour: mean available stretch, mean outage, Weibull shape (1 = exp)."""

    name: str
    mtbf_s: float
    wait_mean_s: float
    weibull_shape: float = 1.0
    # the ensemble trials draw capacity from (costsim.ensemble.MarketSpec); None: this one fit
    market: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class FittedSpotModel:
    """A spot model from a file (`costsim calibrate --market --out`): a figure it lacks keeps the
    catalog's; `ci` holds the 95% intervals (name -> (low, high)) the plan's sensitivity uses."""

    key: str                       # an offering id or a catalog spot-model name
    source: str                    # the file
    mtbf_s: float | None = None
    wait_mean_s: float | None = None
    weibull_shape: float | None = None
    ci: dict = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Offering:
    """One way to get nodes: a cloud instance type in a region, or an owned server SKU."""

    id: str
    provider: str
    region: str
    instance: str
    gpu: str
    gpu_memory_gb: float
    gpus_per_node: int
    interconnect: str
    inter_node_gbps: float
    on_demand_per_h: float | None
    spot_per_h: float | None
    spot_notice_s: float
    spot_model: SpotModel | None
    provision_s: float
    billing_increment_s: float
    billing_minimum_s: float
    owned_per_h: float | None = None   # cost of ownership per server-hour (owned SKUs only)
    owned_nodes: int = 0
    currency: str = "USD"
    source: str = ""
    read_date: str = ""
    catalog: str = "built-in"          # the price catalog: the shipped one, or an overlay folder (--catalog)

    @property
    def markets(self) -> tuple[str, ...]:
        """The markets this offering sells: owned, or on-demand and (if quoted) spot."""
        if self.owned_per_h is not None:
            return (OWNED,)
        return (ON_DEMAND,) + ((SPOT,) if self.spot_per_h is not None else ())

    @property
    def spot_capacity(self) -> SpotModel:
        """The spot capacity model of an offering that sells spot (a ValueError for one that does not)."""
        if self.spot_model is None:
            raise ValueError(f"{self.id} has no spot capacity model")
        return self.spot_model

    def price_per_h(self, market: str) -> float:
        """Price of one node for an hour on `market`."""
        price = {OWNED: self.owned_per_h, ON_DEMAND: self.on_demand_per_h, SPOT: self.spot_per_h}[market]
        if price is None:
            raise KeyError(f"{self.id} has no {market} price")
        return price


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuProfile:
    """Measured or derived step-time model of one workload on one GPU type (Pollux form)."""

    gpu: str
    source: str
    compute_overhead_s: float
    compute_per_sample_s: float
    max_batch_per_gpu: int
    intra_a_s: float
    intra_b_s: float
    inter_a_s: float
    inter_b_s: float
    inter_at_gbps: float
    overlap_gamma: float
    checkpoint_save_s: float
    checkpoint_stall_s: float
    restart_s: float
    startup_s: float
    runtime: Runtime = Runtime()     # the runner settings these figures were measured (or assumed) under
    variant: str = ""                # its name among the GPU's runner configurations ("" when it has one)
    # how much a whole job's mean step time varies from run to run (relative sd; costsim calibrate):
    # the plan's band carries it, each trial drawing its own speed
    step_time_spread: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    """A workload's profiles per GPU type, with provenance."""

    id: str
    model: str
    source: str
    date: str
    checkpoint_bytes: float
    gpus: dict = field(default_factory=dict)          # gpu name -> GpuProfile (its main runner configuration)
    export_bytes: float = 0.0                         # the trained model written at the end (runner's export)
    ema_checkpoint_bytes: float | None = None         # with the workload option ema: a checkpoint's size
    ema_max_batch: dict = field(default_factory=dict)  # gpu name -> max_batch_per_gpu with ema
    storage: dict = field(default_factory=dict)       # store name -> {write_gb_per_s, read_gb_per_s}: measured
    unsupported: dict = field(default_factory=dict)   # gpu name -> why it cannot run
    path: str = ""
    sha256: str = ""
    variants: dict = field(default_factory=dict)      # gpu name -> tuple of GpuProfiles: other runner configurations

    @property
    def ema_supported(self) -> bool:
        return self.ema_checkpoint_bytes is not None

    def configurations(self, gpu: str) -> tuple:
        """Every runner configuration measured (or derived) for a GPU type, the main one first."""
        if gpu not in self.gpus:
            return ()
        return (self.gpus[gpu], *self.variants.get(gpu, ()))


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One way to run the job: offering x nodes x recovery policy x checkpoint interval."""

    offering: Offering
    nodes: int
    policy: str
    checkpoint_interval_s: float
    checkpoint_async: bool
    variant: str = ""     # the profile's runner configuration for the GPU ("" when it has one)

    @property
    def gpus(self) -> int:
        return self.offering.gpus_per_node * self.nodes

    @property
    def label(self) -> str:
        runner = f" [{self.variant}]" if self.variant else ""
        return (f"{self.offering.id} {self.offering.gpu}x{self.offering.gpus_per_node}x{self.nodes}{runner} "
                f"{self.policy} ckpt={self.checkpoint_interval_s:.0f}s")


@dataclass(frozen=True, kw_only=True, slots=True)
class Stats:
    """Monte Carlo summary of one candidate."""

    trials: int
    makespan_mean_s: float
    makespan_p50_s: float
    makespan_p90_s: float
    cost_mean: float
    cost_p50: float
    cost_p90: float
    cost_stderr: float
    p_deadline: float
    preemptions_mean: float
    unfinished: int
    events: int
    makespan_p10_s: float = 0.0
    cost_p10: float = 0.0
    group_p_deadline: dict = field(default_factory=dict)   # capacity group -> P(deadline) in its trials
    worst_group: str | None = None                         # the group with the lowest P(deadline)

    @property
    def worst_group_p_deadline(self) -> float | None:
        return self.group_p_deadline[self.worst_group] if self.worst_group is not None else None

    def as_dict(self) -> dict:
        return {
            "makespan_s": {"mean": finite_or_none(self.makespan_mean_s), "p10": finite_or_none(self.makespan_p10_s),
                           "p50": finite_or_none(self.makespan_p50_s), "p90": finite_or_none(self.makespan_p90_s)},
            "cost": {"mean": self.cost_mean, "p10": self.cost_p10, "p50": self.cost_p50, "p90": self.cost_p90,
                     "stderr": self.cost_stderr},
            "p_deadline": self.p_deadline,
            "worst_group": ({"name": self.worst_group, "p_deadline": self.worst_group_p_deadline}
                            if self.worst_group is not None else None),
            "group_p_deadline": dict(self.group_p_deadline),
            "preemptions_mean": self.preemptions_mean,
            "unfinished": self.unfinished,
            "trials": self.trials,
        }
