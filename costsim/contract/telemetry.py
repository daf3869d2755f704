"""A run folder as `runner execute` writes it: its files, the telemetry event names, and the readers.

RUN/telemetry.jsonl holds one JSON object a line: `t` (epoch seconds), `run`, `rank` (None for the
supervisor), `world_size`, `event` (one of EVENTS) and that event's figures. The runner writes it
(runner.telemetry); `costsim calibrate`, `control`, `market-fit` and `runner report` read it here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from costsim.contract.jsonfiles import Records, parse_json_line, read_jsonl, write_atomic
from costsim.errors import InputError

PLAN = "plan.json"             # the job's plan, written once by the first `runner execute` (contract.job)
CURRENT_PLAN = "current-plan.json"   # the plan as the latest `runner execute` carries it out; its workers read it
TELEMETRY = "telemetry.jsonl"
SUMMARY = "summary.json"       # written by the supervisor when it exits (docs/plan-json.md)
JOURNAL = "control.json"       # `costsim control`'s journal of a run it carries out (costsim.control.journal)
# `costsim control`'s word, written before it asks the job to leave (SIGTERM, as a spot notice is): the
# leaving is a move, not the market's reclaim. {"t": epoch seconds, "from": market, "to": market or null,
# "reason"}. The supervisor whose instance started before `t` ends its life as "moved" (exit's `ended`).
MOVE = "move.json"
OTHER_LIVES = "lives"          # RUN/lives/<folder>/telemetry.jsonl: the job's run folders on other nodes (runner.store)
# How an instance's life ended (the supervisor's `exit` event, `ended`): a spot notice is the market's
# reclaim; a move is the controller's; elsewhere a SIGTERM is someone cancelling it.
INSTANCE_ENDS = ("finished", "preempted-notice", "moved", "cancelled", "failed")

# Every event a run writes: who writes it, and every field it may carry besides the base ones.
BASE_FIELDS = frozenset({"t", "run", "rank", "world_size", "event", "node"})
MEMORY_FIELDS = ("peak_allocated_gb", "peak_reserved_gb", "alloc_retries")   # on a GPU (runner.speed.memory_report)
SPLIT_FIELDS = ("world_size", "micro_batch", "accumulation")                 # the batch split (runner.batching)
SAVE_REASONS = ("interval", "notice", "final")
FATAL_KINDS = ("configuration", "out_of_memory", "disk")
EVENT_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "instance": ("supervisor, once per node start; process_start_t: when `runner execute` itself started",
                 ("offering", "market", "host", "process_start_t")),
    "plan_changed": ("supervisor, when `runner execute --accept-plan-change` went on with another job's plan: "
                     "what differs, where the earlier plan.json was kept", ("changes", "superseded")),
    "launch": ("supervisor, per torchrun launch; fault: an injected one", ("attempt", "fault")),
    "restart": ("supervisor", ("attempt", "restarts", "reason", "exit_code")),
    "resume_check": ("supervisor, per launch on one node: its check of the newest local checkpoints beside torchrun's "
                     "start (runner.resume_check); step: the newest sound one (0: none), checked: the steps it read; "
                     "with an object store, fetched: the newer step it fetched into memory (checkpoint_fetch, by "
                     "supervisor), fetch_skipped: why it left a newer one to rank 0",
                     ("duration_s", "step", "checked", "error", "fetched", "fetch_skipped")),
    "notice": ("supervisor, as a notice (SIGTERM) reaches it: the record that survives a reclaim that kills the "
               "runner before its `exit`; ended: how the life ends then (INSTANCE_ENDS; `exit`'s word wins)",
               ("ended",)),
    "exit": ("supervisor, last; ended: how the instance ended (INSTANCE_ENDS); notice_t: when a notice (SIGTERM) "
             "reached it, if one did", ("status", "restarts", "ended", "notice_t")),
    "runtime": ("worker, per start: the settings, the device it trains on (the driver's name, or cpu), compiled "
                "modules, linear layers in fp8, compile cache, how the model was built "
                "(initialised, or empty for a checkpoint to load over), the batch split, nodes, the start's phases and "
                "who checked each local checkpoint rank 0 looked at (checked_by: supervisor or rank 0, newest first); "
                "ddp_buckets: how DDP's buckets were made (at the wrap, or rebuilt after the first step: "
                "runner.speed.buckets_now), none without DDP",
                ("settings", "device", "compiled_modules", "fp8_layers", "compile_cache_bytes", "build", "ddp_buckets",
                 *SPLIT_FIELDS,
                 "nodes", "process_start_t", "start_phases_s", "checked_by")),
    "compile": ("worker, rank 0, after a start's first step when the model is compiled: torch.compile's counters "
                "(frames, graphs, recompiles, AOTAutograd, FX-graph and Dynamo cache hits and misses) and its slowest "
                "phases; precompiled, under runtime.precompile: what each kind of call did (op load, compile, "
                "fallback, damaged, unloadable, guards failed or preload did not fit; file, bytes, compile_s, "
                "duration_s, reason, mode (a fallback's compile mode), guard (the guard that failed), preloaded and "
                "waited_s (a load on the preload's thread, and the first call's wait for it)); under CUDA graphs, "
                "graph_tree_index (whether their recording looks outputs up in an index: runner.graph_trees) and "
                "graph_tree_disagreed (the lookup that disagreed with torch's own, which then took over); "
                "inductor_bytecode: Inductor's generated modules loaded from kept bytecode or compiled (hits, "
                "compiled, damaged, unwritten, seconds: runner.inductor_bytecode); kept_autotune, unless "
                "COSTSIM_KEPT_AUTOTUNE=0: Triton kernels that took kept timings or were timed (kept, timed, damaged, "
                "unkeyed, unwritten, seconds: runner.autotune_kept); autotune, on a GPU under "
                "COSTSIM_AUTOTUNE_REPORT=1: Triton's kernels by autotune-cache state and why the first misses missed "
                "(runner.speed.autotune_report)",
                ("step", "counters", "phases_s", "precompiled", "graph_tree_index", "graph_tree_disagreed",
                 "inductor_bytecode", "kept_autotune", "autotune")),
    "prewarm": ("worker, rank 0, after a compiled start's first step: recorded, the modules a resume's first step "
                "imported (written for later starts); or what a later start imported beside its checkpoint's read "
                "(runner.prewarm): modules listed, imported, failed, seconds, and waited_s, the first step's wait "
                "for it", ("step", "recorded", "modules", "imported", "failed", "failed_examples", "seconds",
                           "waited_s")),
    "warm_step": ("worker, rank 0, a compiled resume: its first micro-batch's forward run beside the checkpoint's "
                  "read (runner.warm_step): started_at (restore or read: COSTSIM_WARM_STEP=early or the default), "
                  "started_after_s (from the restore's start: sizing the state, the read's "
                  "plan and per-record work), seconds it took, waited_s (the wait for it after the read), error if it "
                  "failed, started false when the read failed first, and torch.compile's counters after it",
                  ("step", "started", "started_at", "started_after_s", "seconds", "waited_s", "error", "counters")),
    "gc_settle": ("worker, rank 0, after a start's first step: the end of the garbage collector's pause through the "
                  "start (runner.gcstart): paused_s from the pause to now, collected_s and freed, the one collection "
                  "of what the imports had not made, frozen, the objects left out of later collections",
                  ("step", "paused_s", "collected_s", "freed", "frozen")),
    "start": ("worker, per start: the step it resumed from", ("step", "total_steps", "pid", "node", "global_batch")),
    "step": ("worker, rank 0, per optimizer step (buffered)", ("step", "step_time_s", "samples")),
    "progress": ("worker, rank 0, periodically", ("step", "loss_rank0", *MEMORY_FIELDS)),
    "validation": ("worker: the unweighted noise-prediction error on held-out data", ("step", "loss", "samples",
                                                                                       "duration_s")),
    "checkpoint_save": ("worker; mode sync|async; reason " + "|".join(SAVE_REASONS) + "; staged: written from the "
                        "host staging buffers, staging: pipelined (each tensor copied as it is written) or first, "
                        "prefaulted: the share of those buffers faulted in ahead when the save claimed them; "
                        "commit_s: rank 0's manifest and rename, commit_read_bytes what it read back "
                        "(files whose CRCs were not summed as they were written) on commit_threads threads (every "
                        "core where training waited for it); with an object store, "
                        "the upload's time and the store's URL", ("step", "duration_s", "stall_s", "bytes", "mode",
                                                                    "reason", "upload_s", "location", "staged",
                                                                    "staging", "commit_s", "write_threads",
                                                                    "commit_read_bytes", "commit_threads",
                                                                    "prefaulted")),
    "checkpoint_fetch": ("worker, rank 0, or the supervisor (by: supervisor, beside torchrun's start): a checkpoint "
                         "fetched from the object store (ranged reads, `threads` in flight), into memory (a tmpfs, "
                         "dropped once loaded) or onto the disk (the local folder)",
                         ("step", "duration_s", "bytes", "location", "into", "threads", "by")),
    "compile_cache": ("worker: torch.compile's caches through the object store (runner execute --share-compile-cache): "
                      "op fetch (local rank 0 of a node whose cache is empty; reason when none came) or upload "
                      "(rank 0, after a life's first step compiled something new)",
                      ("op", "key", "bytes", "files", "duration_s", "reason")),
    "checkpoint_load": ("worker; sized_s (before the load, a resume's making of the state to load into) and "
                        "sized_optimizer_s (its optimizer's part: runner.state.make_optimizer_state), planned_s (the "
                        "reader's making to its read: the metadata and DCP's plans), the "
                        "batched read's buffers_s (its page-locked buffers: the wait for them), reserved_s (their "
                        "page-locking on a thread, when the resume reserved them) and prepare_s (from "
                        "that wait's start to every record's place set, when work beside the read may start)",
                        ("step", "duration_s", "read_s", "bytes", "owned_bytes", "sized_s", "sized_optimizer_s",
                         "planned_s", "buffers_s", "reserved_s", "prepare_s")),
    "checkpoint_skipped": ("worker; reason: partial, or what failed its check", ("step", "reason")),
    "checkpoint_removed": ("worker, rank 0: an older checkpoint removed to make room for a save or the export (at "
                           "the save, or ahead of it on a thread once a save landed or a start's first step was "
                           "done; or what an earlier life left half removed: step null where the name had none)",
                           ("step", "duration_s", "bytes", "reason")),
    "store_unavailable": ("worker, rank 0: the object store failed an upload (op upload: the checkpoint stays on the "
                          "node, tried again in retry_in_s) or a listing at the start (op resume: resumed from the "
                          "node's own checkpoint)", ("op", "step", "reason", "retry_in_s", "failures")),
    "preempted": ("worker; kind: notice, or injected-KIND; at a notice, the decision (costsim.contract.notice: "
                  "save, keep, nothing), why, and the figures it weighed (save_s: with room_s, the removals a "
                  "save would first make room with); abandoned_micro_batches: the micro-batches of the step in "
                  "progress dropped when the notice was agreed inside it (0: it came between steps); stopped_t: "
                  "when training stopped for it (the save or the wait for the write in flight came after)",
                  ("step", "kind", "emergency_checkpoint", "abandoned_micro_batches", "stopped_t", "decision", "reason",
                   "redo_s", "save_s", "room_s", "wait_s", "left_s")),
    "end": ("worker", ("step", "final_state_sha256", "final_loss", "samples", "wall_s", "gc_collections", "gc_s",
                       *MEMORY_FIELDS)),
    "export": ("worker, rank 0: RUN/final", ("step", "path", "bytes", "duration_s")),
    "fatal": ("worker: what restarting cannot mend; kind " + "|".join(FATAL_KINDS) + ", reason: the one line",
              ("kind", "reason", *SPLIT_FIELDS)),
}
EVENTS: dict[str, str] = {name: writer for name, (writer, _) in EVENT_FIELDS.items()}


def fields_of(name: str) -> frozenset[str]:
    """Every field an event may carry (the base ones included)."""
    return BASE_FIELDS | frozenset(EVENT_FIELDS[check_event(name)][1])


def check_event(name: str) -> str:
    """`name` if it is a telemetry event; a ValueError otherwise (a typo in a writer or a reader)."""
    if name not in EVENTS:
        raise ValueError(f"unknown telemetry event {name!r}; known: {', '.join(EVENTS)}")
    return name


def announce_move(run_dir: str | Path, *, from_market: str, to_market: str | None, reason: str) -> None:
    """`costsim control`'s word, before it asks the job to leave, that the leaving is a move (MOVE)."""
    write_atomic(Path(run_dir) / MOVE, json.dumps({"t": time.time(), "from": from_market, "to": to_market,
                                                   "reason": reason}) + "\n")


def moved_since(run_dir: str | Path, started: float) -> bool:
    """Whether `costsim control` said it moves the job (MOVE) since epoch time `started` (a life's start)."""
    try:
        said = json.loads((Path(run_dir) / MOVE).read_text())
    except (OSError, ValueError):
        return False
    t = said.get("t") if isinstance(said, dict) else None
    return isinstance(t, (int, float)) and not isinstance(t, bool) and t >= started


def run_folder(ref: str | Path) -> Path:
    """The run folder named by `ref` (the folder, or a file in it); an InputError when it has no telemetry."""
    path = Path(ref)
    folder = path.parent if path.is_file() else path
    if not (folder / TELEMETRY).is_file():
        raise InputError(str(ref), TELEMETRY, "not found: give a run folder written by `runner execute`")
    return folder


def is_event(record: object) -> bool:
    """A telemetry record: a JSON object with its `event` name and its time `t`."""
    return (isinstance(record, dict) and isinstance(record.get("event"), str)
            and isinstance(record.get("t"), (int, float)) and not isinstance(record.get("t"), bool))


def parse_event(line: bytes | str) -> dict | None:
    """One telemetry line's record, or None for a damaged one (torn by a writer that died mid-line, or
    garbled): every reader passes it over and counts it (read_events' `damaged`), none stops for it."""
    return parse_json_line(line, is_event)


def read_events(run_dir: str | Path) -> Records:
    """All telemetry records of a run, in file order; damaged lines are passed over, their numbers in
    the result's `damaged`."""
    return read_jsonl(Path(run_dir) / TELEMETRY, valid=is_event)


def read_job_events(run_dir: str | Path) -> Records:
    """Every life of the run folder's job: its own telemetry, and that of the job's other run folders on
    other nodes (copies under RUN/lives/<folder>/, fetched from the job's s3:// checkpoint store at each
    start), life by life in the order they started (within a life, file order). `damaged`: the damaged
    lines' numbers, of every file read (their count is what readers report)."""
    chunks: list[list[dict]] = []
    damaged: tuple[int, ...] = ()
    folders = [Path(run_dir)] + sorted(p for p in (Path(run_dir) / OTHER_LIVES).glob("*") if (p / TELEMETRY).is_file())
    for folder in folders:
        events = read_events(folder)
        damaged += tuple(events.damaged)
        chunk: list[dict] = []
        for e in events:   # a life begins at node 0's supervisor `instance` event
            if e.get("event") == "instance" and e.get("rank") is None and not e.get("node") and chunk:
                chunks.append(chunk)
                chunk = []
            chunk.append(e)
        if chunk:
            chunks.append(chunk)
    merged = Records(e for chunk in sorted(chunks, key=lambda c: c[0]["t"]) for e in chunk)
    merged.damaged = damaged
    return merged


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
