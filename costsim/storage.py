"""Where checkpoints live, and what that costs a candidate: time, node disk and money.

A profile's checkpoint figures (save, stall, restart) are the runner's own, measured with checkpoints
on the node's disk. Where they must outlive the node, the store adds to them (data/catalog/storage.yaml):

- `node`: the node's disk. Nothing added, but a checkpoint there is gone with the node: never for a
  candidate that uses spot (the restart needs it on another node) or one of several nodes.
- `object` (S3-compatible, `runner execute --checkpoint-dir s3://...`): the runner writes locally,
  then uploads (runner/store.py). A save is durable after its upload: a synchronous save (the final
  one, an emergency one, a move's) waits for it; an async periodic save's stall stays the local
  copy's, the upload running behind training. A restart on a new node first fetches the checkpoint.
- `shared` (a network filesystem every node mounts): the save writes straight to it, at the slower
  of the node's own write and the store's; a restart reads it from there.

An emergency save on a spot notice counts only where this durable save fits the notice (the
simulator compares the two). The node disk must hold the newest complete checkpoint and the one being
written (runner/diskspace.py: older ones make room), and at the end the newest and the export. The
bill adds GB-months x keep for the whole run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from costsim.errors import InputError
from costsim.io.files import Fields, data_dir, read_yaml

KINDS = ("node", "shared", "object")
HOURS_PER_MONTH = 730.0
DISK_HEADROOM = 1.1      # a node disk budget's margin over the bytes (file-system overhead, logs)


@dataclass(frozen=True, kw_only=True, slots=True)
class Store:
    name: str
    kind: str
    write_gb_per_s: float        # what one node sees, GB (1e9 bytes) per second
    read_gb_per_s: float
    usd_per_gb_month: float
    source: str
    read_date: str

    @property
    def outlives_node(self) -> bool:
        return self.kind != "node"


@dataclass(frozen=True, kw_only=True, slots=True)
class Storage:
    """The shipped (or a user's) storage file: its stores and which one each provider uses."""

    stores: dict
    providers: dict
    path: str

    def for_offering(self, provider: str, override: str | None, workload_file: str = "workload") -> Store:
        """The workload's `checkpoint.storage`, else the provider's store."""
        if override is not None:
            if override not in self.stores:
                raise InputError(workload_file, "checkpoint.storage", f"unknown store {override!r}; allowed: "
                                 f"{', '.join(sorted(self.stores))} ({self.path})")
            return self.stores[override]
        if provider not in self.providers:
            raise InputError(self.path, "providers", f"no store for provider {provider!r}; add `{provider}: "
                             f"STORE` (one of {', '.join(sorted(self.stores))})")
        return self.stores[self.providers[provider]]


def load_storage(path: str | Path | None = None) -> Storage:
    path = Path(path) if path is not None else data_dir() / "catalog" / "storage.yaml"
    f = Fields(path, read_yaml(path))
    f.reject_unknown({"stores", "providers"})
    stores_f = f.mapping_of("stores")
    stores = {}
    for name in stores_f.mapping:
        s = stores_f.mapping_of(name)
        s.reject_unknown({"kind", "write_gb_per_s", "read_gb_per_s", "usd_per_gb_month", "source", "read_date"})
        kind = s.text("kind")
        if kind not in KINDS:
            raise InputError(str(path), f"stores.{name}.kind", f"got {kind!r}; allowed: {', '.join(KINDS)}")
        stores[str(name)] = Store(name=str(name), kind=kind, write_gb_per_s=s.number("write_gb_per_s"),
                                  read_gb_per_s=s.number("read_gb_per_s"),
                                  usd_per_gb_month=s.number("usd_per_gb_month", allow_zero=True),
                                  source=s.text("source"), read_date=s.text("read_date"))
    providers = {str(k): str(v) for k, v in f.mapping_of("providers").mapping.items()}
    for provider, name in providers.items():
        if name not in stores:
            raise InputError(str(path), f"providers.{provider}", f"unknown store {name!r}; allowed: "
                             f"{', '.join(sorted(stores))}")
    return Storage(stores=stores, providers=providers, path=str(path))


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointCosts:
    """One candidate's checkpoints where they live: the job model's figures and the node disk they need."""

    store: Store
    bytes: float
    save_s: float            # a synchronous save until it is durable (final, emergency, a move's)
    upload_s: float          # the part of save_s that is the upload to an object store (0 for other stores)
    stall_s: float           # an async periodic save's pause of training
    restart_s: float         # the job's restart on a new node, the checkpoint's fetch included
    usd_per_h: float         # the store's bill for `keep` checkpoints, per hour of the run
    node_disk_bytes: float   # what the node's disk must hold at once (DISK_HEADROOM included)


def checkpoint_costs(gpu, *, profile_bytes: float, bytes_: float, store: Store, keep: int,
                     export_bytes: float = 0.0) -> CheckpointCosts:
    """The figures a candidate's job model uses, from the profile's local figures and the store.

    The profile's save and stall scale with the bytes (an EMA copy makes a checkpoint larger)."""
    scale = bytes_ / profile_bytes if profile_bytes > 0 else 1.0
    local_save_s, stall_s = gpu.checkpoint_save_s * scale, gpu.checkpoint_stall_s * scale
    write_s = bytes_ / (store.write_gb_per_s * 1e9)
    read_s = bytes_ / (store.read_gb_per_s * 1e9)
    upload_s = 0.0
    if store.kind == "object":
        save_s, restart_s, upload_s = local_save_s + write_s, gpu.restart_s + read_s, write_s
    elif store.kind == "shared":
        save_s, restart_s = max(local_save_s, write_s), gpu.restart_s + read_s
    else:
        save_s, restart_s = local_save_s, gpu.restart_s
    disk = max(2.0 * bytes_, bytes_ + export_bytes) * DISK_HEADROOM if store.kind != "shared" else \
        export_bytes * DISK_HEADROOM
    usd_per_h = store.usd_per_gb_month * bytes_ * keep / 1e9 / HOURS_PER_MONTH
    return CheckpointCosts(store=store, bytes=bytes_, save_s=save_s, upload_s=upload_s, stall_s=stall_s,
                           restart_s=restart_s,
                           usd_per_h=usd_per_h, node_disk_bytes=disk)


def unsuitable(store: Store, *, uses_spot: bool, nodes: int) -> str | None:
    """Why a store cannot hold this candidate's checkpoints (None when it can)."""
    if store.kind != "node":
        return None
    if uses_spot:
        return (f"checkpoints on the node's disk ({store.name}) are gone with a reclaimed spot node; set the "
                "workload's checkpoint.storage to a shared or object store")
    if nodes > 1:
        return (f"checkpoints on each node's own disk ({store.name}) cannot be read by the other nodes; set the "
                "workload's checkpoint.storage to a shared or object store")
    return None


SYSTEM_GB = 50   # ASSUMED room for the image, the weights and the data beside the checkpoints


def disk_gb(node_disk_bytes: float) -> int:
    """The node disk to ask for, in whole GB: the checkpoints' budget and SYSTEM_GB."""
    return math.ceil(node_disk_bytes / 1e9 + SYSTEM_GB)
