"""`runner report RUN`: what a run folder's telemetry measured, as a table, JSON or a picture.

Step time, samples/s, checkpoint save/stall/load, training slowdown while an async save writes,
restart-to-first-step and its phases, the runner settings and the compile cache each start found,
training and validation loss, the exported model; `plot` draws loss, step time and samples/s over
wall time with checkpoints, restarts and preemptions marked. No torch: it reads files only.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from costsim.contract.lives import lives
from costsim.contract.steps import async_save_costs, classified_steps, steady_step_times, steady_steps_by_split
from costsim.contract.telemetry import read_job_events, read_summary
from costsim.contract.timing import WARMUP_STEPS, restart_costs_s


def measure(run_dir: Path, skip: int = WARMUP_STEPS) -> dict:
    """Every figure of the run folder's telemetry (ValueError when it has none)."""
    run_dir = Path(run_dir)
    events = read_job_events(run_dir)   # every life of the job, its other nodes' included
    if not any(e["event"] == "step" for e in events):
        raise ValueError(f"{run_dir}: no training steps in its telemetry.jsonl (not a run folder, or a run that "
                         "never trained)")
    summary = read_summary(run_dir)
    job = lives(events)
    steady = steady_step_times(events, skip)
    world = next((e["world_size"] for e in events if e.get("world_size")), 1)
    # The global batch as the steps ran it (every step event carries it; a run folder needs no plan here).
    batch = next(e["samples"] for e in events if e["event"] == "step")
    saves = [e for e in events if e["event"] == "checkpoint_save" and e.get("rank") == 0]
    loads = [e for e in events if e["event"] == "checkpoint_load" and e.get("rank") == 0]
    step_s = statistics.fmean(steady) if steady else 0.0   # wall time is the sum of steps
    median_s = statistics.median(steady) if steady else 0.0
    end: dict = next((e for e in reversed(events) if e["event"] == "end" and e.get("rank") == 0), {})
    return {
        "world_size": world, "global_batch": batch, "steps_measured": len(steady),
        "step_time_s": step_s or None, "step_time_median_s": median_s or None,
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
        # the object store, as each save's upload and each fetch saw it (GB/s; a save's duration_s includes its upload)
        "store": next((e["location"] for e in events if e.get("location") and e["event"] in
                       ("checkpoint_save", "checkpoint_fetch")), None),
        "upload_gb_per_s": [round(e["bytes"] / e["upload_s"] / 1e9, 3) for e in saves
                            if e.get("upload_s") and e.get("bytes")],
        "upload_s": [round(e["upload_s"], 3) for e in saves if e.get("upload_s")],
        "fetch_gb_per_s": [round(e["bytes"] / e["duration_s"] / 1e9, 3) for e in events
                           if e["event"] == "checkpoint_fetch" and e.get("bytes") and e.get("duration_s")],
        "step_time_while_writing_ratio": writing_slowdown(events, skip),
        "restart_to_first_step_s": restart_times(events),
        # what each restart cost, as calibrate fits it and the planner prices it (costsim.contract.timing)
        "restart_cost_s": [round(v, 3) for v in restart_costs_s(events, step_s)] if steady else [],
        "restart_phases_s": restart_phases(events, median_s, skip),
        "runtime": next((e.get("settings") for e in events if e["event"] == "runtime" and e.get("rank") == 0), None),
        # what rank 0 trained on at each start, each name once (a job's lives may run on different GPUs)
        "devices": list(dict.fromkeys(e["device"] for e in events
                                      if e["event"] == "runtime" and e.get("rank") == 0 and e.get("device"))),
        "compile_cache_bytes_at_start": [e.get("compile_cache_bytes") for e in events
                                         if e["event"] == "runtime" and e.get("rank") == 0],
        # each start's torch.compile report after its first step (runner.speed.compile_report)
        "compile_at_start": [{"counters": e.get("counters") or {}, "phases_s": e.get("phases_s") or {},
                              **({"precompiled": e["precompiled"]} if e.get("precompiled") else {}),
                              **({"graph_tree_disagreed": e["graph_tree_disagreed"]}
                                 if e.get("graph_tree_disagreed") else {}),
                              **({"inductor_bytecode": e["inductor_bytecode"]} if e.get("inductor_bytecode") else {}),
                              **({"kept_autotune": e["kept_autotune"]} if e.get("kept_autotune") else {})}
                             for e in events if e["event"] == "compile"],
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
        # (step, held-out loss) at each validation; the validation's own time is not in any step's
        "validation_loss": [(e["step"], round(e["loss"], 6)) for e in events
                            if e["event"] == "validation" and e.get("rank") == 0],
        "validation_s": round(sum(e.get("duration_s", 0.0) for e in events if e["event"] == "validation"), 3),
        # lines of telemetry.jsonl that did not parse (a writer killed mid-line): passed over, by number
        "damaged_lines": list(events.damaged),
        # the job is every life it lived in this folder (costsim.contract.lives): each, and their totals
        "lives": [life.as_dict() for life in job.lives],
        "job": job.totals(),
        "exported": next(({"path": e["path"], "bytes": e["bytes"], "duration_s": round(e["duration_s"], 3)}
                          for e in reversed(events) if e["event"] == "export"), None),
        "summary": summary,
    }


def peak_growth(events: list[dict]) -> list[tuple]:
    growth, peak = [], 0.0
    for e in events:
        if e["event"] == "progress" and e.get("peak_reserved_gb", 0.0) > peak:
            peak = e["peak_reserved_gb"]
            growth.append((e["step"], round(peak, 2), e.get("alloc_retries")))
    return growth


def writing_slowdown(events: list[dict], skip: int = WARMUP_STEPS) -> float | None:
    """Mean step time beside an async save's background write over the mean of the other steady steps."""
    steps = classified_steps(events, skip)
    during = [t for t, window in steps if window is not None]
    steady = [t for t, window in steps if window is None]
    if not during or not steady:
        return None
    return round(statistics.fmean(during) / statistics.fmean(steady), 3)


def restart_phases(events: list[dict], median_s: float | None = None, warmup: int = WARMUP_STEPS,
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


def _compile_line(report: dict) -> str:
    """One start's compile report: Dynamo's time and frames, the caches' answers, the slowest backend phase."""
    c, phases = report["counters"], report["phases_s"]
    # an ahead-of-time compile (runtime.precompile) traces in fullgraph_capture, outside Dynamo's frame hook
    dynamo = phases.get("_compile.compile_inner", phases.get("fullgraph_capture", 0.0))
    parts = [f"Dynamo {dynamo:.1f} s over {c.get('frames.total', 0)} frame(s), "
             f"{c.get('stats.unique_graphs', 0)} graph(s)"]
    if c.get("recompiles"):
        parts.append(f"{c['recompiles']} recompile(s)")
    for label, group in (("FX graph cache", "inductor.fxgraph_cache"), ("AOTAutograd cache", "aot_autograd.autograd_cache")):
        hit, miss = c.get(f"{group}_hit", 0), c.get(f"{group}_miss", 0)
        if hit or miss:
            parts.append(f"{label} {hit} hit(s), {miss} miss(es)")
    backend = phases.get("OutputGraph.call_user_compiler")
    if backend is not None:
        parts.append(f"backend {backend:.1f} s")
    recorded = phases.get("CUDAGraphNode.record")   # compile_mode=reduce-overhead: every start records them again
    if recorded is not None:
        parts.append(f"CUDA graphs recorded {recorded:.1f} s")
    if report.get("graph_tree_disagreed"):   # runner.graph_trees put torch's own scans back
        parts.append(f"CUDA graph trees' index disagreed with torch ({report['graph_tree_disagreed']})")
    if c.get("inductor.cudagraph_skips"):
        parts.append(f"{c['inductor.cudagraph_skips']} graph(s) ran without CUDA graphs")
    for event in report.get("precompiled", []):   # runtime.precompile: the saved model's load, or its compile
        parts.append(_precompiled_part(event))
    kept = report.get("inductor_bytecode")   # runner.inductor_bytecode
    if kept and sum(v for k, v in kept.items() if k != "seconds"):
        damaged = f", {kept['damaged']} damaged" if kept.get("damaged") else ""
        parts.append(f"generated modules {kept.get('hits', 0)} from kept bytecode, "
                     f"{kept.get('compiled', 0) + kept.get('damaged', 0) + kept.get('unwritten', 0)} compiled"
                     f"{damaged} ({kept.get('seconds', 0.0):.1f} s)")
    tuned = report.get("kept_autotune")   # runner.autotune_kept
    if tuned and sum(v for k, v in tuned.items() if k != "seconds"):
        timed = tuned.get("timed", 0) + tuned.get("damaged", 0) + tuned.get("unkeyed", 0) + tuned.get("unwritten", 0)
        parts.append(f"Triton kernels {tuned.get('kept', 0)} with kept timings, {timed} timed "
                     f"({tuned.get('seconds', 0.0):.1f} s)")
    return "; ".join(parts)


def _precompiled_part(event: dict) -> str:
    op, size = event.get("op"), event.get("bytes")
    mb = (f", {size / 1e6:.0f} MB" if size >= 1e6 else f", {size / 1e3:.0f} kB") if size else ""
    if op == "load" and event.get("preloaded"):   # on a thread from before the checkpoint's read
        return (f"precompiled model loaded in {event['duration_s']:.1f} s{mb} beside the start (its first call "
                f"waited {event.get('waited_s', 0.0):.1f} s for it)")
    if op == "load":
        return f"precompiled model loaded in {event['duration_s']:.1f} s{mb}"
    if op == "compile":
        saved = mb if size else ", not saved"
        return f"model compiled ahead of time in {event['compile_s']:.1f} s{saved}"
    if op == "fallback":
        mode = f" in compile mode {event['mode']}" if event.get("mode") else ""
        return f"precompile fell back to torch.compile{mode} ({event.get('reason', '?')})"
    return f"precompiled file {op} ({event.get('file', '?')})"   # damaged, unloadable, guards failed, preload did not fit


def first_step_after(events: list[dict], name: str, index: int) -> float | None:
    marks = [e["t"] for e in events if e["event"] == name]
    if len(marks) <= index:
        return None
    t0 = marks[index]
    return next((round(e["t"] - t0, 3) for e in events if e["event"] == "step" and e["t"] > t0), None)


def restart_times(events: list[dict]) -> list[float | None]:
    """From the supervisor's restart decision to the end of the first step after it: process start,
    rendezvous, model build, checkpoint load, compilation (cached or not), first step."""
    count = sum(1 for e in events if e["event"] == "restart")
    return [first_step_after(events, "restart", i) for i in range(count)]


def table(figures: dict) -> str:
    """The figures for people: one row a figure, with units, rounded; `--format json` has them all."""
    f, rows = figures, []
    s, job = f["summary"], f["job"]
    if s:
        count = f"{job['lives']} li{'ves' if job['lives'] > 1 else 'fe'}"
        rows.append(("run", f"{s.get('status')}: {s.get('steps')} steps, {job['restarts']} restarts, "
                            f"{job['lost_steps']} steps trained again, {count}, wall {_duration(job['wall_s'])} "
                            f"({job['gpu_hours']:,.3g} GPU-h)"))
    if len(f["lives"]) > 1:
        for life in f["lives"]:
            rows.append((f"  life {life['number']}", f"{life['started']}, {life['market'] or '?'}"
                                                    + (f" on {life['host']}" if life["host"] else "")
                                                    + f": {life['trained']} steps ({life['trained_again']} again), "
                                                    f"{_duration(life['wall_s'])}, ended {life['ended']}"
                                                    + (f" ({life['relaunches']} relaunches)" if life["relaunches"] else "")))
    rows.append(("batch", f"{f['global_batch']} samples a step on {f['world_size']} process(es)"))
    if f["step_time_s"]:
        rows += [("step time", f"{_seconds(f['step_time_s'])} mean, {_seconds(f['step_time_median_s'])} median over "
                               f"{f['steps_measured']} steady steps ({f['slow_steps']} over 1.5x the median)"),
                 ("throughput", f"{f['samples_per_s']:,.1f} samples/s ({f['samples_per_s_per_gpu']:,.1f} per process)")]
    for split in f["by_split"] if len(f["by_split"]) > 1 else []:
        rows.append((f"  on {split['world_size']} x {split['micro_batch']} x {split['accumulation']}",
                     f"{_seconds(split['step_time_s'])} a step, {split['samples_per_s']:,.1f} samples/s "
                     f"({split['steps_measured']} steps)"))
    if f["checkpoint_bytes"]:
        rows.append(("checkpoint", _bytes(f["checkpoint_bytes"])))
    rows += [(name, _series(values)) for name, values in (
        ("sync saves", f["sync_save_s"]), ("async stalls", f["async_stall_s"]), ("async writes", f["async_write_s"]),
        ("async cost", f["async_cost_s"]), ("loads", f["load_s"])) if values]
    if f["store"]:
        parts = [f"uploads {_series(f['upload_s'])} at {_rates(f['upload_gb_per_s'])}"] if f["upload_s"] else []
        parts += [f"fetches at {_rates(f['fetch_gb_per_s'])}"] if f["fetch_gb_per_s"] else []
        rows.append(("object store", f"{f['store']}: " + ("; ".join(parts) or "no transfers")))
    if f["step_time_while_writing_ratio"]:
        rows.append(("steps while writing", f"{f['step_time_while_writing_ratio']:.2f}x a steady step"))
    if f["startup_to_first_step_s"] is not None:
        rows.append(("start to first step", _duration(f["startup_to_first_step_s"])
                     + _phases(f["startup_phases_s"][0] if f["startup_phases_s"] else None)))
    if f["restart_cost_s"]:
        rows.append(("restart cost", _series(f["restart_cost_s"]) + " (to the end of the warm-up, less as many "
                                                                    "steady steps: the planner's restart)"))
    for i, (total, phases) in enumerate(zip(f["restart_to_first_step_s"], f["restart_phases_s"]), start=1):
        rows.append((f"restart {i}", f"{_duration(total)} to the first step" + _phases(phases)))
    for i, report in enumerate(f["compile_at_start"], start=1):
        rows.append((f"compile, start {i}", _compile_line(report)))
    if f["devices"]:
        rows.append(("device", ", ".join(f["devices"])))
    if f["runtime"]:
        rows.append(("runner settings", ", ".join(f"{k}={v}" for k, v in f["runtime"].items())))
    end = f["end_of_run"]
    if end.get("peak_reserved_gb") is not None:
        rows.append(("GPU memory", f"peak {end.get('peak_allocated_gb', 0):.1f} GB allocated, "
                                   f"{end['peak_reserved_gb']:.1f} GB reserved, {end.get('alloc_retries', 0)} retries"))
    if end.get("final_loss") is not None:
        rows.append(("final loss", f"{end['final_loss']:.4g} (the last step's, mean over ranks)"))
    if f["damaged_lines"]:
        lines = f["damaged_lines"]
        rows.append(("telemetry", f"{len(lines)} damaged line(s) passed over (line "
                                  f"{', '.join(map(str, lines[:5]))}{' ...' if len(lines) > 5 else ''})"))
    if f["validation_loss"]:
        rows.append(("validation loss", ", ".join(f"{loss:.4g} at step {step}" for step, loss in f["validation_loss"])
                     + f" ({_duration(f['validation_s'])} in all)"))
    if f["exported"]:
        e = f["exported"]
        rows.append(("exported", f"{e['path']}, {_bytes(e['bytes'])} in {_duration(e['duration_s'])}"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(_wrapped(name.ljust(width), value) for name, value in rows)


def _wrapped(name: str, value: str) -> str:
    import textwrap
    return textwrap.fill(value, 120, initial_indent=f"{name}  ", subsequent_indent=" " * (len(name) + 2))


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"


def _duration(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min" if value < 7200 else f"{value / 3600:.2f} h"


def _bytes(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def _series(values: list[float]) -> str:
    """n values as count, mean and range in seconds."""
    if len(values) == 1:
        return _seconds(values[0])
    return f"{len(values)}, mean {_seconds(statistics.fmean(values))} ({_seconds(min(values))} to {_seconds(max(values))})"


def _rates(values: list[float]) -> str:
    """Bandwidths in GB/s: one, or the median and range."""
    if len(values) == 1:
        return f"{values[0]:.3g} GB/s"
    return f"{statistics.median(values):.3g} GB/s median ({min(values):.3g} to {max(values):.3g})"


PHASES = (("noticed_s", "noticed"), ("start_and_build_s", "start and build"), ("load_s", "load"),
          ("first_step_s", "first step"), ("later_warmup_excess_s", "warm-up"))


def _phases(phases: dict | None) -> str:
    if not phases:
        return ""
    parts = [f"{label} {_duration(phases[key])}" for key, label in PHASES if phases.get(key)]
    return f" ({', '.join(parts)})" if parts else ""


def plot(run_dir: Path, out: str, smooth: int = 9) -> None:
    """Loss (training, rank 0, and validation), step time and samples/s over wall time since the first
    launch, with checkpoint saves, restarts and preemptions marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costsim.report import save_figure

    events = read_job_events(Path(run_dir))
    t0 = next((e["t"] for e in events if e["event"] in ("launch", "start")), events[0]["t"] if events else 0.0)
    minutes = lambda e: (e["t"] - t0) / 60.0  # noqa: E731
    steps = [e for e in events if e["event"] == "step" and e.get("rank") == 0]
    # no line across a gap: a restart, or another `runner execute` on the folder (each launches anew)
    cuts = [minutes(e) for e in events if e["event"] in ("restart", "launch")]

    def line(ax, points, *style, **kw):   # no line across a restart's gap
        xs: list[float] = []
        ys: list[float] = []
        for x, y in points:
            if xs and any(xs[-1] < cut <= x for cut in cuts):
                xs.append(float("nan"))
                ys.append(float("nan"))
            xs.append(x)
            ys.append(y)
        ax.plot(xs, ys, *style, **kw)

    fig, (loss_ax, time_ax, rate_ax) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    train, seen = [], set()
    for e in events:   # the end's progress line repeats the last step's loss: one point per step
        if e["event"] == "progress" and e.get("loss_rank0") is not None and e["step"] not in seen:
            seen.add(e["step"])
            train.append((minutes(e), e["loss_rank0"]))
    if train:   # a short run has a handful of points: large enough to see
        line(loss_ax, train, "o-" if len(train) < 30 else ".-", ms=5 if len(train) < 30 else 3, lw=0.8,
             label="training loss (rank 0, every 5 s)")
    held_out = [(minutes(e), e["loss"]) for e in events if e["event"] == "validation" and e.get("rank") == 0]
    if held_out:
        line(loss_ax, held_out, "o-", ms=4, color="tab:purple", label="validation loss")
    loss_ax.set_ylabel("loss")
    xs = [minutes(e) for e in steps]
    times = [e["step_time_s"] for e in steps]
    time_ax.plot(xs, times, ".", ms=2, color="grey", label="step")
    rolling = [statistics.median(times[max(0, i - smooth + 1):i + 1]) for i in range(len(times))]
    line(time_ax, zip(xs, rolling), lw=1, color="black", label=f"median of {smooth}")
    time_ax.set_ylabel("step time (s)")
    if rolling:
        time_ax.set_ylim(0, 3 * max(statistics.median(times), 1e-9))   # the first step's compilation is off the chart
    line(rate_ax, zip(xs, [e["samples"] / t if t > 0 else float("nan") for e, t in zip(steps, rolling)]), lw=1,
         color="tab:blue")
    rate_ax.set_ylabel("samples/s")
    rate_ax.set_xlabel("wall time since the first launch (min)")
    marks = [("checkpoint_save", "tab:green", ":", "checkpoint"), ("restart", "tab:orange", "--", "restart"),
             ("preempted", "tab:red", "-", "preemption")]
    for name, colour, style, label in marks:
        at = sorted({round(minutes(e), 4) for e in events if e["event"] == name and e.get("rank") in (0, None)})
        for ax in (loss_ax, time_ax, rate_ax):
            for i, x in enumerate(at):
                ax.axvline(x, color=colour, ls=style, lw=0.8, alpha=0.7, label=label if i == 0 and ax is loss_ax else None)
    if loss_ax.get_legend_handles_labels()[0]:
        loss_ax.legend(fontsize=8, loc="upper right")
    time_ax.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"run {Path(run_dir).name}")
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)
