"""Issue #36's figures side by side: every life of the given run folders (or kept telemetry files), as
ratios to the figures the issue started from (one H200, the plan as written). For each life: how it
started (fresh, on the same node from its own checkpoint, on a new node from the store), from `runner
execute`'s start to the end of its first step, the fetch and the load, its steady samples per second, and,
where a notice ended it, notice to exit with the decision, whether a write was in flight and how long removing
old checkpoints for room took inside it (COSTSIM_REMOVE_AHEAD=0, or nothing removed them ahead). The lives
come from one GPU run (`scripts/gpu_sdxl_restart_bench.sh`), so the ratios compare like with like. A life the
supervisor restarted inside (a notice or a failed worker: `scripts/gpu_sdxl_as_written.sh`'s) has a row for each
restart, from its decision to the end of the first step after it, with its load, as the same node's start and load,
and what its first step spent on the compiled model (autotuner timing, the generated modules' load). No torch here.

    python3 scripts/bench_restart.py RUN_DIR_OR_TELEMETRY [...]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from costsim.contract.jsonfiles import read_jsonl
from costsim.contract.lives import split_lives
from costsim.contract.telemetry import is_event, read_job_events
from runner.report import restart_phases, restart_times  # telemetry only: no torch

# where the issue started (its "Where it stands"), seconds unless said
BASELINE = {"same node: execute to the first step": 47.6, "same node: load": 10.8, "new node: fetch": 49.2,
            "new node: load": 11.8,
            "notice to exit, a save, nothing in flight": 35.4, "notice to exit, a write in flight": 60.1,
            "steady samples/s": 18.0}
GOAL = {"same node: execute to the first step": 20.0, "new node: execute to the first step": 45.0,
        "notice to exit, a save, nothing in flight": 20.0, "notice to exit, a write in flight": 20.0,
        "notice to exit, no save": 20.0, "steady samples/s": 22.0}


def _as_issue_names(name: str) -> str:
    """A restart inside a life (the supervisor's) is compared with the same node's start and load; a drill's notice
    inside a life with the notice to exit of its case."""
    if name.startswith("notice to exit, ") and " (drill, restart " in name:
        return name.split(" (drill, restart ")[0]
    if name.startswith("same node: restart") and name.endswith(", load"):
        return "same node: load"
    if name.startswith("same node: restart") and name.endswith(", decision to the first step"):
        return "same node: execute to the first step"
    return name   # a part of a restart's first step (first_step_compile): no figure of the issue's


def goal(name: str) -> float | None:
    return GOAL.get(_as_issue_names(name))


def baseline(name: str) -> float | None:
    return BASELINE.get(_as_issue_names(name))


def figures(life: list[dict]) -> dict[str, float]:
    """What one life measured, named as BASELINE and GOAL name them: its first start, and each restart inside it
    (the supervisor's, after a notice or a failed worker: from its decision to the end of the first step)."""
    # from `runner execute`'s own start where the supervisor recorded it (its option check came before `instance`)
    start = life[0].get("process_start_t") or life[0]["t"]
    restarted = next((i for i, e in enumerate(life) if e["event"] == "restart"), len(life))
    first = lambda kind: next((e for e in life[:restarted] if e["event"] == kind and e.get("rank") in (0, None)),  # noqa: E731
                              None)
    fetch, load = first("checkpoint_fetch"), first("checkpoint_load")
    ended = next((e for e in life if e["event"] == "exit" and e.get("rank") is None), None)
    kind = "new node" if fetch else "same node" if load else "fresh"
    steps = [e for e in life if e["event"] == "step" and e.get("rank") == 0]
    out: dict[str, float] = {}
    if steps and steps[0]["t"] < (life[restarted]["t"] if restarted < len(life) else float("inf")):
        out[f"{kind}: execute to the first step"] = steps[0]["t"] - start
    if fetch:
        out["new node: fetch"] = fetch["duration_s"]
    if load:
        out[f"{kind}: load"] = load["duration_s"]
        if load.get("sized_s") is not None:   # the state it loads into, made before it (runner.train's restore)
            out[f"{kind}: the state to load into, made"] = load["sized_s"]
    steady = [e["samples"] / e["step_time_s"] for e in steps[2:] if e.get("step_time_s") and e.get("samples")]
    if len(steady) >= 3:
        out["steady samples/s"] = statistics.median(steady)
    # the notice that ended the life: its workers' stop comes after it (an earlier one inside the life was a
    # restart's, by the supervisor; a notice that came after the training ended, during the final save or the
    # export, stopped no worker and has none)
    notice = next((e for e in life if e["event"] == "preempted" and e.get("kind") == "notice"
                   and ended and ended.get("notice_t") and e["t"] >= ended["notice_t"]), None)
    if ended and ended.get("notice_t") and notice:
        saved = next((e for e in life if e["event"] == "checkpoint_save" and e.get("reason") == "notice"), None)
        if saved is not None and saved.get("upload_s"):
            case = "a save and its upload"   # with an object store: not the issue's case, no baseline
        elif (notice.get("wait_s") or 0) > 0:   # the rule waited for the async write under way
            case = "a write in flight" + (", then a save" if saved is not None else "")
        else:
            case = "a save, nothing in flight" if saved is not None else "no save"
        out[f"notice to exit, {case}"] = ended["t"] - ended["notice_t"]
        flight = next((e for e in life if e["event"] == "checkpoint_save" and e.get("rank") == 0
                       and e.get("mode") == "async" and e["t"] >= ended["notice_t"]), None)
        if flight is not None and flight.get("commit_s") is not None:   # its read-back: every core once hurried
            threads = flight.get("commit_threads")
            out["notice: the write's commit" + (f" ({threads} threads)" if threads else "")] = flight["commit_s"]
        # checkpoints the notice's path removed for room (at the save: COSTSIM_REMOVE_AHEAD=0, or nothing removed
        # them ahead), inside the notice to exit
        removed = [e["duration_s"] for e in life if e["event"] == "checkpoint_removed" and e.get("rank") == 0
                   and ended["notice_t"] <= e["t"] <= ended["t"]
                   and str(e.get("reason", "")).startswith("room for checkpoint")]
        if removed:
            out["notice: removals for room inside it"] = sum(removed)
        # how long training ran on after the notice (the step finished, or abandoned between micro-batches:
        # `abandoned_micro_batches`); lives before `stopped_t` was recorded: to the notice's save's start
        stopped = notice.get("stopped_t") or (saved["t"] - saved["duration_s"] if saved is not None else None)
        if stopped is not None:
            out["notice: training stopped after"] = stopped - ended["notice_t"]
    out.update(drill_notices(life))
    phases = restart_phases(life)
    # each start's compile event (rank 0, after its first step): the first start's, then each restart's
    compiles = [e for e in life if e["event"] == "compile" and e.get("rank") in (0, None)]
    for n, seconds in enumerate(restart_times(life), start=1):
        if seconds is not None:
            out[f"same node: restart {n}, decision to the first step"] = seconds
            if phases[n - 1].get("load_s") is not None:
                out[f"same node: restart {n}, load"] = phases[n - 1]["load_s"]
            if n < len(compiles):
                out.update(first_step_compile(compiles[n], f"same node: restart {n}"))
    return out


def first_step_compile(event: dict, where: str) -> dict[str, float]:
    """What a start's first step spent on the compiled model, from its compile event: Triton's autotuner timing
    kernels' candidates (none where runner.autotune_kept handed kept timings back), torch's loader of Inductor's
    generated modules (runner.inductor_bytecode), and the kernels that took kept timings."""
    phases = event.get("phases_s") or {}
    out = {f"{where}, autotuner timing kernels": phases.get("CachingAutotuner.benchmark_all_configs", 0.0)}
    if "PyCodeCache.load_by_key_path" in phases:
        out[f"{where}, generated modules' load"] = phases["PyCodeCache.load_by_key_path"]
    kept = event.get("kept_autotune")
    if kept:
        out[f"{where}, kernels with kept timings (count)"] = kept.get("kept", 0)
    return out


def drill_notices(life: list[dict]) -> dict[str, float]:
    """A drill's notice inside a life (`--inject-preemptions term@N`: SIGTERM to every worker, which saves and exits;
    the supervisor restarts them): from the notice to the supervisor's restart, that is to the workers' exit, for each
    restart that followed one."""
    out: dict[str, float] = {}
    since = 0
    restarts = [i for i, e in enumerate(life) if e["event"] == "restart"]
    for n, index in enumerate(restarts, start=1):
        segment, since = life[since:index], index + 1
        injected = next((e for e in segment if e["event"] == "preempted" and e.get("kind") == "injected-term"
                         and e.get("rank") == 0), None)
        stop = next((e for e in segment if e["event"] == "preempted" and e.get("kind") == "notice"
                     and e.get("rank") == 0), None)
        if injected is None or stop is None:
            continue
        saved = stop.get("emergency_checkpoint") is not None
        if (stop.get("wait_s") or 0) > 0:
            case = "a write in flight" + (", then a save" if saved else "")
        else:
            case = "a save, nothing in flight" if saved else "no save"
        out[f"notice to exit, {case} (drill, restart {n})"] = life[index]["t"] - injected["t"]
    return out


def labels(sources: list[Path]) -> list[str]:
    """A run folder by its name; a kept telemetry file by its folder's (they are all telemetry.jsonl). Where two
    share a name (on/run and off/run), by their paths from the folder their paths last differ in."""
    folders = [s.parent if s.is_file() and s.name == "telemetry.jsonl" else s for s in sources]
    names = [f.name for f in folders]
    if len(set(names)) == len(names):
        return names
    parts = [f.resolve().parts for f in folders]
    common = 0
    while all(len(p) > common + 1 for p in parts) and len({p[common] for p in parts}) == 1:
        common += 1
    return ["/".join(p[common:]) for p in parts]


def main() -> None:
    sources = [Path(a) for a in sys.argv[1:]]
    if not sources or not all(p.exists() for p in sources):
        sys.exit("usage: python3 scripts/bench_restart.py RUN_DIR_OR_TELEMETRY [...]")
    rows = []
    for source, label in zip(sources, labels(sources)):
        events = read_job_events(source) if source.is_dir() else read_jsonl(source, valid=is_event)
        for index, life in enumerate(split_lives(list(events)), start=1):
            for name, value in figures(life).items():
                rows.append((f"{label} life {index}", name, value))
    print(f"{'life':<28} {'figure':<62} {'now':>8} {'issue':>8} {'ratio':>7}  goal")
    for where, name, value in rows:
        base, target = baseline(name), goal(name)
        ratio = f"{value / base:.2f}x" if base else ""
        met = "" if target is None else ("met" if (value >= target if "samples" in name else value <= target) else "not")
        print(f"{where:<28} {name:<62} {value:8.1f} {base if base else '':>8} {ratio:>7}  "
              f"{f'{target:g} {met}' if target else ''}")


if __name__ == "__main__":
    main()
