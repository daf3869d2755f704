"""Read a run folder's telemetry and print what it measured: step time, samples/s, checkpoint
save/stall/load, training slowdown while an async save writes, restart-to-first-step, the runner
settings and the compile cache each start found. `--json` prints the same as JSON.

Usage: python scripts/report_run.py RUN_DIR [--json] [--skip 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from costsim.calibrate import async_save_costs, classified_steps, steady_step_times, steady_steps_by_split  # noqa: E402
from runner.telemetry import read_events  # noqa: E402


def measure(run_dir: Path, skip: int = 5) -> dict:
    events = read_events(run_dir)
    plan_path = run_dir / "plan.json"
    plan = json.loads(plan_path.read_text()) if plan_path.exists() else None
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    steady = steady_step_times(events, skip)
    world = next((e["world_size"] for e in events if e.get("world_size")), 1)
    # The global batch: from the plan, else from the step events (a run folder kept without its plan).
    batch = plan["workload"]["global_batch"] if plan else next(e["samples"] for e in events if e["event"] == "step")
    saves = [e for e in events if e["event"] == "checkpoint_save" and e.get("rank") == 0]
    loads = [e for e in events if e["event"] == "checkpoint_load" and e.get("rank") == 0]
    step_s = statistics.fmean(steady) if steady else None   # wall time is the sum of steps
    median_s = statistics.median(steady) if steady else None
    end = next((e for e in reversed(events) if e["event"] == "end" and e.get("rank") == 0), {})
    return {
        "world_size": world, "global_batch": batch, "steps_measured": len(steady),
        "step_time_s": step_s, "step_time_median_s": median_s,
        # Steps over 1.5x the median: periodic stalls (garbage collection, allocator retries) show here.
        "slow_steps": sum(1 for t in steady if t > 1.5 * median_s) if steady else 0,
        "samples_per_s": batch / step_s if step_s else None,
        "samples_per_s_per_gpu": batch / step_s / world if step_s else None,
        "async_stall_s": [round(e["stall_s"], 3) for e in saves if e.get("mode") == "async"],
        "async_write_s": [round(e["duration_s"], 3) for e in saves if e.get("mode") == "async"],
        # what each async save cost training: its stall plus the slower steps beside its write
        "async_cost_s": [round(v, 3) for v in async_save_costs(events, step_s, skip)] if steady else [],
        "sync_save_s": [round(e["duration_s"], 3) for e in saves if e.get("mode") == "sync"],
        "checkpoint_bytes": max((e.get("bytes") or 0 for e in saves), default=0),
        "load_s": [round(e["duration_s"], 3) for e in loads],
        "step_time_while_writing_ratio": writing_slowdown(events, skip),
        "restart_to_first_step_s": restart_times(events),
        "restart_phases_s": restart_phases(events, median_s, skip),
        "runtime": next((e.get("settings") for e in events if e["event"] == "runtime" and e.get("rank") == 0), None),
        "compile_cache_bytes_at_start": [e.get("compile_cache_bytes") for e in events
                                         if e["event"] == "runtime" and e.get("rank") == 0],
        "startup_to_first_step_s": first_step_after(events, "launch", 0),
        # the first start's parts, as for a restart (first_step_s: compilation, from the cache if warm)
        "startup_phases_s": restart_phases(events, median_s, skip, "launch")[:1],
        # a job that went on at another world size: its steps per batch split (4 micro-steps of 8 are not one of 32)
        "by_split": [{"world_size": w, "nodes": n, "micro_batch": m, "accumulation": a, "steps_measured": len(times),
                      "step_time_s": statistics.fmean(times), "samples_per_s": batch / statistics.fmean(times)}
                     for (w, n, m, a), times in steady_steps_by_split(events, (world, 1, batch // world, 1), skip).items()],
        # (step, peak GB reserved, allocator retries) at each progress line where the peak grew: a
        # memory margin that holds shows one early entry and no later ones
        "peak_reserved_growth": peak_growth(events),
        "end_of_run": {k: end[k] for k in ("gc_collections", "gc_s", "alloc_retries", "peak_allocated_gb",
                                           "peak_reserved_gb", "final_loss") if k in end},
        "summary": summary,
    }


def peak_growth(events: list[dict]) -> list[tuple]:
    growth, peak = [], 0.0
    for e in events:
        if e["event"] == "progress" and e.get("peak_reserved_gb", 0.0) > peak:
            peak = e["peak_reserved_gb"]
            growth.append((e["step"], round(peak, 2), e.get("alloc_retries")))
    return growth


def writing_slowdown(events: list[dict], skip: int = 5) -> float | None:
    """Mean step time beside an async save's background write over the mean of the other steady steps."""
    steps = classified_steps(events, skip)
    during = [t for t, window in steps if window is not None]
    steady = [t for t, window in steps if window is None]
    if not during or not steady:
        return None
    return round(statistics.fmean(during) / statistics.fmean(steady), 3)


def restart_phases(events: list[dict], median_s: float | None = None, warmup: int = 5,
                   mark: str = "restart") -> list[dict]:
    """Per restart (or per `launch`): failure noticed (preemption -> restart decision), process start
    and model build (-> the workers' runtime event), checkpoint load, first step (start -> end of the
    first step), and what the rest of the warm-up steps took over steady ones."""
    phases = []
    for i, e in enumerate(events):
        if e["event"] != mark:
            continue
        end = next((j for j in range(i + 1, len(events)) if events[j]["event"] == "restart"), len(events))
        after = events[i:end]   # this start's events only
        killed = next((x["t"] for x in reversed(events[:i]) if x["event"] == "preempted" and x.get("rank") == 0), None)
        runtime = next((x for x in after if x["event"] == "runtime" and x.get("rank") == 0), None)
        built = runtime["t"] if runtime else None
        load = next((x for x in after if x["event"] == "checkpoint_load" and x.get("rank") == 0), None)
        start = next((x["t"] for x in after if x["event"] == "start" and x.get("rank") == 0), None)
        steps = [x for x in after if x["event"] == "step"][:warmup]
        first = steps[0]["t"] if steps else None
        phases.append({"noticed_s": _round(e["t"] - killed if killed else None),
                       "start_and_build_s": _round(built - e["t"] if built else None),
                       # of it: torchrun and rendezvous up to the worker process, then the worker's parts
                       "to_worker_process_s": _round(runtime["process_start_t"] - e["t"]
                                                     if runtime and runtime.get("process_start_t") else None),
                       "worker_start_s": runtime.get("start_phases_s") if runtime else None,
                       "load_s": _round(load["duration_s"] if load else None),
                       "first_step_s": _round(first - start if first and start else None),
                       # the next warm-up steps' time over as many median steady steps (staging pinning)
                       "later_warmup_excess_s": _round(sum(x["step_time_s"] for x in steps[1:]) - len(steps[1:]) * median_s
                                                       if steps[1:] and median_s else None)})
    return phases


def _round(value):
    return None if value is None else round(value, 1)


def first_step_after(events: list[dict], name: str, index: int) -> float | None:
    marks = [e["t"] for e in events if e["event"] == name]
    if len(marks) <= index:
        return None
    t0 = marks[index]
    return next((round(e["t"] - t0, 3) for e in events if e["event"] == "step" and e["t"] > t0), None)


def restart_times(events: list[dict]) -> list[float]:
    """From the supervisor's restart decision to the end of the first step after it: process start,
    rendezvous, model build, checkpoint load, compilation (cached or not), first step."""
    count = sum(1 for e in events if e["event"] == "restart")
    return [first_step_after(events, "restart", i) for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--skip", type=int, default=5, help="steps after each start left out of the step time")
    args = parser.parse_args()
    figures = measure(args.run_dir, args.skip)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for key, value in figures.items():
        if key != "summary":
            print(f"{key:>30}: {value}")
    s = figures["summary"]
    print(f"{'summary':>30}: status {s.get('status')}, {s.get('steps')} steps, {s.get('restarts')} restarts, "
          f"{s.get('lost_steps')} lost steps, wall {s.get('wall_s', 0):.1f}s")


if __name__ == "__main__":
    main()
