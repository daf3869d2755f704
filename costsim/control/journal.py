"""The controller's journal (RUN/control.json) and the lock that keeps one controller per run folder.

The journal is the controller's memory: every instance it held (opened when started, closed once,
with how it ended), capacity outages, the policy's decisions, and where the trace clock started.
It is rewritten atomically at every change, so a controller killed at any moment and started again
on the same folder finds each instance either still open (and adopts it) or closed (and never
bills it again). docs/control.md lists the fields; docs/market-fit.md reads `instances` and
`outages` to refit the spot market.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from costsim.contract.telemetry import JOURNAL
from costsim.errors import InputError
from costsim.io.files import read_json, write_atomic

LOCK = "control.lock"
SCHEMA = "costsim.control/1"


@dataclass
class Instance:
    """One instance (the job's node(s)) held on one market, from start to release, in trace seconds."""

    offering: str
    market: str
    start_s: float
    end_s: float | None = None
    ended: str | None = None       # finished | preempted | stopped (the policy moved on) | failed | lost
    handle: dict = field(default_factory=dict)   # the backend's way to find it again (pid, Slurm job id)


@dataclass
class Journal:
    plan_file: str                     # the plan the run carries out (`plan` in the report is its band)
    policy: str
    backend: str
    offering: str
    deadline_s: float
    time_scale: float
    notice_s: float
    t0: float                          # epoch seconds at trace time 0
    trace: str | None = None
    run_id: str = ""
    runner_args: list[str] = field(default_factory=list)   # the runner options every start passes on
    steps: int | None = None           # the job's length when not the plan's (--steps)
    poll_s: float = 0.5                # wall seconds between looks
    partitions: dict = field(default_factory=dict)   # slurm: market -> partition name
    status: str = "running"            # running | done | failed | stranded
    end_s: float | None = None
    instances: list[Instance] = field(default_factory=list)
    outages: list[dict] = field(default_factory=list)      # {offering, start_s, end_s (None: still out)}
    timeline: list[dict] = field(default_factory=list)     # {t, market (None: idle), reason, margin_s}
    figures: list[dict] = field(default_factory=list)      # {t, ...}: the policy's figures from then on (as known)
    updated_s: float = 0.0             # trace time of the last write: where a lost instance's bill stops
    report: dict = field(default_factory=dict)   # bill, cost, finish_s, predicted, error...: top level in the file

    @property
    def current(self) -> Instance | None:
        open_ = [i for i in self.instances if i.end_s is None]
        return open_[-1] if open_ else None

    def decide(self, t: float, market: str | None, reason: str, margin_s: float | None = None) -> None:
        """Record a decision when it changes the market (or its reason), with the margin it kept."""
        last = self.timeline[-1] if self.timeline else None
        if last is None or last["market"] != market or last["reason"] != reason:
            entry = {"t": round(t, 3), "market": market, "reason": reason}
            if margin_s is not None:
                entry["margin_s"] = round(margin_s, 3)
            self.timeline.append(entry)

    def know(self, t: float, figures: dict) -> None:
        """Record the figures a decision was made on, when they differ from the last recorded (the
        as-known replay of costsim.control.report reads them back)."""
        rounded = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in figures.items()}
        if not self.figures or {k: v for k, v in self.figures[-1].items() if k != "t"} != rounded:
            self.figures.append({"t": round(t, 3), **rounded})

    @property
    def moves(self) -> int:
        """Instances the policy left on purpose (a move to another market, not a preemption)."""
        return sum(1 for i in self.instances if i.ended == "stopped")

    def open_outage(self, t: float) -> None:
        if not self.outages or self.outages[-1]["end_s"] is not None:
            self.outages.append({"offering": self.offering, "start_s": round(t, 3), "end_s": None})

    def close_outage(self, t: float) -> None:
        if self.outages and self.outages[-1]["end_s"] is None:
            self.outages[-1]["end_s"] = round(t, 3)

    def to_dict(self) -> dict:
        fields = asdict(self)
        doc = {"schema": SCHEMA, **{k: v for k, v in fields.items() if k != "report"}, **self.report}
        return _plain(doc)

    def save(self, run_dir: Path) -> None:
        write_atomic(Path(run_dir) / JOURNAL, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, run_dir: Path) -> Journal | None:
        path = Path(run_dir) / JOURNAL
        if not path.exists():
            return None
        doc = read_json(path)
        if doc.get("schema") != SCHEMA:
            raise InputError(str(path), "schema", f"got {doc.get('schema')!r}; expected {SCHEMA!r}")
        if isinstance(doc.get("plan"), str):   # journals written before the plan's band took the name
            doc["plan_file"] = doc.pop("plan")
        try:
            known = set(cls.__dataclass_fields__)
            fields = {k: v for k, v in doc.items() if k in known}
            fields["report"] = {k: v for k, v in doc.items() if k not in known and k != "schema"}
            fields["instances"] = [Instance(**i) for i in fields.get("instances", [])]
            return cls(**fields)
        except TypeError as exc:
            raise InputError(str(path), "journal", f"not a controller journal ({exc})") from None


def _plain(value):
    """JSON-ready: an infinite or NaN float becomes null (JSON has no such numbers)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Lock:
    """An exclusive flock on RUN/control.lock for the controller's life. The kernel drops it when the
    process dies (even by SIGKILL), so a stale lock never blocks a restart."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise InputError(str(self.path.parent), "--run-dir", f"held by another live controller (pid {holder}); "
                             "stop it first, or choose another run folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
