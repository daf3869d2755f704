"""A run folder as `runner execute` writes it: its files, the telemetry event names, and the readers.

RUN/telemetry.jsonl holds one JSON object a line: `t` (epoch seconds), `run`, `rank` (None for the
supervisor), `world_size`, `event` (one of EVENTS) and that event's figures. The runner writes it
(runner.telemetry); `costsim calibrate`, `control`, `market-fit` and `runner report` read it here.
"""

from __future__ import annotations

import json
from pathlib import Path

from costsim.contract.jsonfiles import read_jsonl
from costsim.errors import InputError

PLAN = "plan.json"             # the job's plan, written once by the first `runner execute` (contract.job)
CURRENT_PLAN = "current-plan.json"   # the plan as the latest `runner execute` carries it out; its workers read it
TELEMETRY = "telemetry.jsonl"
SUMMARY = "summary.json"       # written by the supervisor when it exits (docs/plan-json.md)

# Every event a run writes, and who writes it with which figures.
EVENTS: dict[str, str] = {
    "instance": "supervisor, once per node start: offering, market, host",
    "plan_changed": "supervisor, when `runner execute --accept-plan-change` went on with another job's plan: "
                    "changes (what differs), superseded (where the earlier plan.json was kept)",
    "launch": "supervisor, per torchrun launch: attempt, fault (an injected one)",
    "restart": "supervisor: attempt, restarts, reason, exit_code",
    "exit": "supervisor, last: status, restarts, ended (how the instance ended)",
    "runtime": "worker, per start: settings, compiled_modules, compile_cache_bytes, the batch split (world_size, "
               "micro_batch, accumulation), nodes, and the start's phases",
    "start": "worker, per start: step (resumed from), total_steps, pid",
    "step": "worker, rank 0, per optimizer step (buffered): step, step_time_s, samples",
    "progress": "worker, rank 0, periodically: step, loss_rank0, memory figures",
    "validation": "worker: step, loss (unweighted noise-prediction error), samples",
    "checkpoint_save": "worker: step, duration_s, stall_s, mode (sync|async), reason (interval|notice|final), bytes",
    "checkpoint_load": "worker: step, duration_s, read_s",
    "checkpoint_skipped": "worker: step, reason (partial, or what failed its check)",
    "preempted": "worker: step, kind (notice or injected-KIND), emergency_checkpoint",
    "end": "worker: step, final_state_sha256, final_loss",
    "export": "worker, rank 0: step, path, bytes (RUN/final)",
    "fatal": "worker: reason (out_of_memory, configuration) and its figures; restarting cannot mend it",
}


def check_event(name: str) -> str:
    """`name` if it is a telemetry event; a ValueError otherwise (a typo in a writer or a reader)."""
    if name not in EVENTS:
        raise ValueError(f"unknown telemetry event {name!r}; known: {', '.join(EVENTS)}")
    return name


def run_folder(ref: str | Path) -> Path:
    """The run folder named by `ref` (the folder, or a file in it); an InputError when it has no telemetry."""
    path = Path(ref)
    folder = path.parent if path.is_file() else path
    if not (folder / TELEMETRY).is_file():
        raise InputError(str(ref), TELEMETRY, "not found: give a run folder written by `runner execute`")
    return folder


def read_events(run_dir: str | Path) -> list[dict]:
    """All telemetry records of a run, in file order; a torn last line (a killed writer's) is skipped."""
    return read_jsonl(Path(run_dir) / TELEMETRY)


def events_of(events: list[dict], name: str, rank: int | None = 0) -> list[dict]:
    """The events called `name`, from one rank (None: from every rank and the supervisor)."""
    check_event(name)
    return [e for e in events if e.get("event") == name and (rank is None or e.get("rank") == rank)]


def read_summary(run_dir: str | Path) -> dict:
    """RUN/summary.json, or {} while the run has not exited."""
    path = Path(run_dir) / SUMMARY
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        raise InputError(str(path), "document", "not valid JSON") from None
    if not isinstance(doc, dict):
        raise InputError(str(path), "document", "expected a JSON object")
    return doc
