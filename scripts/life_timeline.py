"""Each life of a run folder, from `runner execute`'s start to its first steps, in seconds: the start's phases
(imports, build, wrap ...), the checkpoint's fetch from a store (where it went, GB/s) and load, the compile
cache's fetch, and when the first and second steps after the start ended. No torch here.

    python3 scripts/life_timeline.py RUN_DIR          (the job's lives: this folder's and the store's copies)
    python3 scripts/life_timeline.py telemetry.jsonl  (a kept copy of one folder's telemetry)
"""

from __future__ import annotations

import sys
from pathlib import Path

from costsim.contract.jsonfiles import read_jsonl
from costsim.contract.lives import split_lives
from costsim.contract.telemetry import is_event, read_job_events


def describe(life: list[dict]) -> str:
    start = life[0].get("process_start_t") or life[0]["t"]   # the supervisor's own start, where it recorded it
    at = lambda e: f"{e['t'] - start:.1f}"   # noqa: E731
    parts = []
    for e in life:
        kind = e["event"]
        if kind == "instance" and e.get("process_start_t"):
            parts.append(f"runner execute's checks done at {at(e)}")
        elif kind == "launch" and e.get("attempt") == 0:
            parts.append(f"torchrun launched at {at(e)}")
        elif kind == "resume_check" and e.get("checked"):
            checked_by = next((x.get("checked_by") for x in life if x["event"] == "runtime" and x.get("rank") == 0), None)
            parts.append(f"the supervisor's check of step(s) {', '.join(map(str, e['checked']))} took "
                         f"{e.get('duration_s', 0):.1f} s, ended at {at(e)} (checked_by "
                         f"{', '.join(checked_by) if checked_by else '-'})")
        elif kind == "runtime" and e.get("rank") == 0:
            worker = e.get("process_start_t")
            if worker:
                parts.append(f"worker process started at {worker - start:.1f}")
            phases = ", ".join(f"{k} {v:.1f}" for k, v in (e.get("start_phases_s") or {}).items())
            cache_mb = (e.get("compile_cache_bytes") or 0) / 1e6
            parts.append(f"worker start [{phases}] ({e.get('build')}; compile cache {cache_mb:.0f} MB)")
        elif kind == "compile_cache":
            why = f" ({e['reason']})" if e.get("reason") else ""
            parts.append(f"compile cache {e['op']} {e['bytes'] / 1e6:.0f} MB, {e['files']} files in "
                         f"{e['duration_s']:.1f} s{why} at {at(e)}")
        elif kind == "checkpoint_fetch":
            by = " by the supervisor" if e.get("by") == "supervisor" else ""
            parts.append(f"fetch step-{e['step']} {e['bytes'] / 1e9:.2f} GB into {e.get('into', 'disk')}{by} in "
                         f"{e['duration_s']:.1f} s ({e['bytes'] / e['duration_s'] / 1e9:.2f} GB/s) at {at(e)}")
        elif kind == "checkpoint_load" and e.get("rank") == 0:
            planned = f"planned in {e['planned_s']:.1f} s; " if "planned_s" in e else ""
            locked = f"; their page-locking took {e['reserved_s']:.1f} s on its thread" if "reserved_s" in e else ""
            batched = (f" ({planned}batched: its buffers waited for {e['buffers_s']:.1f} s, every record placed "
                       f"{e['prepare_s']:.1f} s from that wait's start{locked})" if "prepare_s" in e else "")
            optimizer = (f", its optimizer's part {e['sized_optimizer_s']:.2f} s" if "sized_optimizer_s" in e else "")
            sized = (f" (the state to load into made in {e['sized_s']:.1f} s before it{optimizer})" if "sized_s" in e
                     else "")
            parts.append(f"load {e['duration_s']:.1f} s, ended at {at(e)}{sized}{batched}")
        elif kind == "prewarm" and e.get("recorded") is not None:
            parts.append(f"prewarm: recorded the {e['recorded']} modules this first step imported")
        elif kind == "prewarm":
            parts.append(f"prewarm: imported {e['imported']} of {e['modules']} listed modules ({e['failed']} failed) "
                         f"in {e['seconds']:.1f} s beside the load; the first step waited {e['waited_s']:.1f} s")
        elif kind == "warm_step" and e.get("started") is False:
            parts.append("warm step: not started (the load failed first)")
        elif kind == "warm_step":
            failed = f", failed: {e['error']}" if e.get("error") else ""
            began = f"started {e['started_after_s']:.1f} s into the restore, " if "started_after_s" in e else ""
            parts.append(f"warm step: the first micro-batch's forward beside the load, {began}in {e['seconds']:.1f} s, "
                         f"ended at {at(e)}; the load waited {e['waited_s']:.1f} s for it{failed}")
        elif kind == "gc_settle":
            parts.append(f"garbage collector paused {e['paused_s']:.1f} s through the start; its one collection after "
                         f"the first step {e['collected_s']:.2f} s, {e['freed']} objects freed, {e['frozen']} frozen")
        elif kind == "compile" and e.get("rank") == 0:
            counters = e.get("counters") or {}
            parts.append("compile: " + ", ".join(f"{k} {v}" for k, v in counters.items() if "cache" in k))
    steps = [e for e in life if e["event"] == "step" and e.get("rank") == 0]
    if steps:
        took = f" ({steps[0]['step_time_s']:.1f} s)" if steps[0].get("step_time_s") else ""
        parts.append(f"first step (step {steps[0]['step']}) ended at {at(steps[0])}{took}"
                     + (f", the second at {at(steps[1])}" if len(steps) > 1 else ""))
    return "\n    ".join(parts)


def main() -> None:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).exists():
        sys.exit("usage: python3 scripts/life_timeline.py RUN_DIR|TELEMETRY.jsonl")
    path = Path(sys.argv[1])
    events = read_job_events(path) if path.is_dir() else read_jsonl(path, valid=is_event)
    for index, life in enumerate(split_lives(list(events)), start=1):
        origin = ("runner execute's start" if life[0].get("process_start_t")
                  else "its first event; runner execute's checks before it unrecorded")
        print(f"life {index} (seconds from {origin}):\n    {describe(life)}")


if __name__ == "__main__":
    main()
