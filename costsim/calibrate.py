"""Calibrate: from what runs measured (telemetry) to the figures the planner uses, and how wrong
the previous prediction was. Reads run folders written by `runner execute` (telemetry.jsonl,
plan.json, summary.json); never imports the runner."""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from costsim import io
from costsim.contract.lives import lives
from costsim.contract.plan import Plan
from costsim.contract.steps import SKIP_AFTER_START, async_save_costs, steady_steps_by_split
from costsim.contract.telemetry import PLAN, TELEMETRY, Records, read_job_events, read_summary, run_folder
from costsim.contract.timing import first_life_start_cost_s, first_start_cost_s, restart_costs_s
from costsim.devices import gpu_type
from costsim.errors import InputError
from costsim.fit import Fit, Point, fit, predict_step_s
from costsim.runtime import Runtime, parse_runtime
from costsim.spec import GpuProfile, Profile


@dataclass(slots=True)
class Run:
    """What one run measured, and what its plan predicted."""

    path: Path
    plan: Plan
    summary: dict
    point: Point                          # the batch split most of its steady steps ran with
    steps: int
    points: list[Point] = field(default_factory=list)   # one per batch split it ran with
    sync_save_s: list[float] = field(default_factory=list)
    async_stall_s: list[float] = field(default_factory=list)
    async_cost_s: list[float] = field(default_factory=list)   # stall + slower steps beside the write
    interval_saves: int = 0
    final_save: bool = True               # profiling runs skip it
    fixed_s: float | None = None          # launch -> end of the warm-up steps, plus end -> exit, first attempt
    first_life_s: float | None = None     # where the first life ended at a notice: its start, plus notice -> exit
    first_cache_bytes: int = 0            # the compile cache its first start found (0: none, or not compiled)
    restart_s: list[float] = field(default_factory=list)
    runtime: Runtime = Runtime()          # the runner settings it ran with (its telemetry says)
    upload_gb_per_s: list[float] = field(default_factory=list)   # each save's upload to the object store
    fetch_gb_per_s: list[float] = field(default_factory=list)    # each fetch of a checkpoint from it
    damaged_lines: tuple[int, ...] = ()   # telemetry lines passed over (the contract's rule for damage)
    job_wall_s: float | None = None       # the sum of its lives' wall times, where it lived more than once
    steady_s: list[float] = field(default_factory=list)   # its steady steps at `point`'s split, in order
    device: str | None = None             # what rank 0 trained on, as the driver names it (runners since 2026-12-06)
    gpu: str = ""                         # the GPU type it ran on (`calibrate` resolves it; else the plan's)

    @property
    def ran_on_plans_gpu(self) -> bool:
        return self.gpu in ("", self.plan.resources.gpu)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def wall_s(self) -> float | None:
        """The job's wall time: every life's in this folder (costsim.contract.lives), else the summary's."""
        return self.job_wall_s if self.job_wall_s is not None else self.summary.get("wall_s")

    @property
    def ran_as_priced(self) -> bool:
        """Whether its steps ran the plan's batch split (GPUs, nodes, micro-batch, accumulation): only
        then is the plan's step time a prediction of this run's. On the GPU type its plan priced, too."""
        r, p = self.plan.resources, self.plan.prediction
        world = r.gpus_per_node * r.nodes
        micro = p.per_gpu_batch or self.plan.workload.global_batch // (world * p.accumulation)   # older plans lack it
        priced = (world, r.nodes, micro, p.accumulation)
        return self.ran_on_plans_gpu and (self.point.gpus, self.point.nodes, self.point.micro_batch,
                                          self.point.accumulation) == priced


def load_run(ref: str, events: Records | None = None) -> Run:
    """A run folder (or its telemetry.jsonl) as measurements; `events`: its job's events, where read already."""
    folder = run_folder(ref)
    telemetry = str(folder / TELEMETRY)
    plan = Plan.read(folder / PLAN)
    summary = read_summary(folder)
    if events is None:
        events = read_job_events(folder)   # every life of the job, its other nodes' included
    world = next((e["world_size"] for e in events if e.get("world_size")), None)
    if world is None:
        raise InputError(telemetry, "world_size", "no worker events: the run never started")
    # Runs recorded before the runner wrote its batch split: the plan's accumulation on the first world size.
    accumulation = plan.prediction.accumulation
    default = (world, plan.resources.nodes, plan.workload.global_batch // world // accumulation, accumulation)
    by_split = steady_steps_by_split(events, default)
    if not by_split:
        raise InputError(telemetry, "step",
                         f"fewer than {SKIP_AFTER_START + 1} steps after a start, outside checkpoints and their writes")
    # The mean, not the median: wall time is the sum of steps, pauses included. Step time is per
    # (micro-batch, accumulation): 4 micro-steps of 8 are not one of 32.
    points = {split: Point(*split, statistics.fmean(times)) for split, times in by_split.items()}
    main_split = max(by_split, key=lambda split: len(by_split[split]))
    main = points[main_split]
    saves = [e for e in events if e["event"] == "checkpoint_save" and e.get("rank") == 0]
    run = Run(path=folder, plan=plan, summary=summary, point=main, points=list(points.values()),
              steps=summary.get("steps") or max((e["step"] for e in events if e["event"] == "step"), default=0),
              # the local save (the profile's figure): the planner adds the store's upload from its bandwidth
              sync_save_s=[e["duration_s"] - (e.get("upload_s") or 0.0) for e in saves if e.get("mode") == "sync"],
              async_stall_s=[e["stall_s"] for e in saves if e.get("mode") == "async"],
              interval_saves=sum(1 for e in saves if e.get("reason") == "interval"),
              final_save=any(e.get("reason") == "final" for e in saves) or not any(e["event"] == "end" for e in events),
              steady_s=list(by_split[main_split]))
    run.fixed_s = first_start_cost_s(events, run.point.step_s)
    run.first_life_s = first_life_start_cost_s(events, run.point.step_s) if run.fixed_s is None else None
    first = next((e for e in events if e["event"] == "runtime" and e.get("rank") == 0), None)
    if first is not None and first.get("compiled_modules"):
        run.first_cache_bytes = int(first.get("compile_cache_bytes") or 0)
    run.restart_s = restart_costs_s(events, run.point.step_s)
    run.upload_gb_per_s = [e["bytes"] / e["upload_s"] / 1e9 for e in saves if e.get("upload_s") and e.get("bytes")]
    run.fetch_gb_per_s = [e["bytes"] / e["duration_s"] / 1e9 for e in events if e["event"] == "checkpoint_fetch"
                          and e.get("bytes") and e.get("duration_s")]
    run.async_cost_s = async_save_costs(events, run.point.step_s)
    run.damaged_lines = events.damaged
    job = lives(events)
    run.job_wall_s = job.wall_s if len(job.lives) > 1 else None
    run.runtime, run.device = ran_with(events, plan, telemetry)
    return run


def ran_with(events, plan: Plan, telemetry: str) -> tuple[Runtime, str | None]:
    """The runner settings and the device of a run's first start (rank 0's `runtime` event): the plan's settings
    where it recorded none, no device where it did not say (runners before 2026-12-06)."""
    started: dict = next((e for e in events if e["event"] == "runtime" and e.get("rank") == 0), {})
    settings, device = started.get("settings"), started.get("device")
    return (parse_runtime(settings, telemetry) if settings is not None else plan.runtime,
            device if isinstance(device, str) else None)


@dataclass(slots=True)
class OutOfMemory:
    """A run that stopped out of memory (the runner's `fatal` event, kind out_of_memory): a micro-batch that its GPU,
    under its settings, did not hold. Calibration lowers the GPU's batch limit below it."""

    path: Path
    plan: Plan
    micro_batch: int
    runtime: Runtime
    device: str | None = None
    gpu: str = ""                         # as Run.gpu: `calibrate` resolves it

    @property
    def name(self) -> str:
        return self.path.name


def load_out_of_memory(ref: str, events: Records | None = None) -> OutOfMemory | None:
    """The run folder's out-of-memory stop, if it had one (whether or not it trained before it)."""
    folder = run_folder(ref)
    if events is None:
        events = read_job_events(folder)
    stop = next((e for e in events if e["event"] == "fatal" and e.get("kind") == "out_of_memory"
                 and isinstance(e.get("micro_batch"), int) and e["micro_batch"] >= 1), None)
    if stop is None:
        return None
    plan = Plan.read(folder / PLAN)
    runtime, device = ran_with(events, plan, str(folder / TELEMETRY))
    return OutOfMemory(path=folder, plan=plan, micro_batch=stop["micro_batch"], runtime=runtime, device=device)


def load_runs(refs: list[str]) -> tuple[list[Run], list[OutOfMemory]]:
    """The runs given to `costsim calibrate`, each folder read once: those that trained, and those that stopped out
    of memory (a run may be both: it tells the batch limit whether or not it trained first)."""
    loaded: list[Run] = []
    stops: list[OutOfMemory] = []
    for ref in refs:
        events = read_job_events(run_folder(ref))
        stop = load_out_of_memory(ref, events)
        try:
            loaded.append(load_run(ref, events))
        except InputError:
            if stop is None:
                raise
        if stop is not None:
            stops.append(stop)
    if not loaded:
        raise InputError(refs[0], "step", "every run given ran out of memory before it trained: give a run that "
                         "trained too (its figures are fitted, and the limit lowered below what ran out)")
    return loaded, stops


def resolve_gpus(runs: list, profile: Profile, notes: list[str], given: str | None = None) -> None:
    """Each run's (Run or OutOfMemory) GPU type: the one its device's name says, else `given` (calibrate --gpu: runs
    whose telemetry does not name their device), else (a name the profile has no type for) its plan's."""
    known = set(profile.gpus) | {r.plan.resources.gpu for r in runs}
    if given is not None:
        spelled = {k.casefold(): k for k in profile.gpus}
        if given.casefold() not in spelled:
            why = next((f" ({name} is unsupported: {reason}; a profile of your own with a gpus.{name} entry "
                        "calibrates it)" for name, reason in profile.unsupported.items()
                        if name.casefold() == given.casefold()), "")
            raise InputError("--gpu", "gpu", f"{given!r} is no GPU type of {profile.path}{why}; allowed: "
                             f"{', '.join(sorted(profile.gpus))}")
        given = spelled[given.casefold()]
    for run in runs:
        planned = run.plan.resources.gpu
        said = gpu_type(run.device, known)
        if given is not None and said not in (None, given):
            raise InputError(str(run.path), "runtime.device", f"its workers ran on {run.device} ({said}), not the "
                             f"--gpu {given} given: leave --gpu out, or calibrate its GPU's runs apart")
        run.gpu = said or given or planned
        if run.gpu != planned and not said:
            notes.append(f"{run.name} ran on {given} (--gpu), its plan priced "
                         f"{planned}: it refits {given}'s figures, and none of its figures is compared with the plan's")
        elif run.device and said is None:
            notes.append(f"{run.name} ran on {run.device}, which names no GPU type of {profile.path} "
                         f"({', '.join(sorted(known))}): taken as its plan's {planned}")
        elif said and said != planned:
            notes.append(f"{run.name} ran on {run.device} ({said}), its plan priced {planned}: it refits {said}'s "
                         f"figures, and none of its figures is compared with the plan's")


def plan_profile(run: Run) -> Profile:
    """The profile a run's plan was made with: its recorded path, else the built-in of that name
    (a run made on another machine records that machine's path)."""
    ref = run.plan.profile.path or ""
    if ref and Path(ref).is_file():
        return io.load_profile(ref)
    try:
        return io.load_profile(Path(ref).stem or run.plan.workload.model)
    except InputError:
        raise InputError(str(run.path / PLAN), "profile.path",
                         f"{ref or 'none recorded'} is not here and no built-in profile has its name; "
                         "pass --profile FILE") from None


def check_compatible(runs: list[Run]) -> None:
    """One fit is for one workload on one GPU type (the one each ran on: resolve_gpus)."""
    first = runs[0]
    for run in runs[1:]:
        for key, label, a, b in (("workload.model", "workload", first.plan.workload.model, run.plan.workload.model),
                                 ("resources.gpu", "GPU type", first.gpu or first.plan.resources.gpu,
                                  run.gpu or run.plan.resources.gpu)):
            if a != b:
                raise InputError(str(run.path), key, f"{label} {b!r} differs from {first.name}'s {a!r}; "
                                 "calibrate one workload on one GPU type at a time")
        if run.runtime != first.runtime:
            raise InputError(str(run.path), "runtime", f"ran with {run.runtime.describe()!r}, {first.name} with "
                             f"{first.runtime.describe()!r}; calibrate one runner configuration at a time")


@dataclass(slots=True)
class Calibration:
    runs: list[Run]
    gpu: str
    before: GpuProfile
    after: GpuProfile
    step_fit: Fit
    notes: list[str]
    loo_step_error: dict = field(default_factory=dict)   # run -> relative error predicting it without it
    store: dict | None = None     # the object store's measured bandwidth: name, write/read GB/s, counts
    # the runs' runner settings are none of the GPU's configurations: they join the profile as a variant of this
    # name (after.variant), and the main entry (named main_name where it had no name) keeps its figures
    new_configuration: bool = False
    main_name: str = ""


def calibrate(runs: list[Run], profile: Profile, gpu: str | None = None,
              out_of_memory: list[OutOfMemory] | None = None) -> Calibration:
    """Refit the GPU's step-time model, checkpoint, start-up and restart figures from the runs (on the GPU they
    ran on: resolve_gpus; `gpu` for runs whose telemetry does not name it), and its batch limit from the runs that
    stopped out of memory."""
    notes: list[str] = []
    resolve_gpus(runs, profile, notes, gpu)
    check_compatible(runs)
    gpu = runs[0].gpu
    if gpu not in profile.gpus:
        raise InputError(profile.path, f"gpus.{gpu}", "no prior figures for this GPU type to start the fit from")
    before = next((g for g in profile.configurations(gpu) if g.runtime == runs[0].runtime), None)
    new_configuration, main_name, new_name = before is None, "", ""
    if before is None:   # settings the profile has no figures for: start from the GPU's main configuration
        before = profile.gpus[gpu]
        taken = {g.variant for g in profile.configurations(gpu) if g.variant}
        main_name = before.variant or configuration_name(before.runtime, taken)
        new_name = configuration_name(runs[0].runtime, taken | {main_name})
        kept = ", ".join(repr(n) for n in sorted(taken | {main_name}))
        notes.append(f"no {gpu} configuration of {profile.path} ran {runs[0].runtime.describe()}: "
                     f"the fit starts from the main one's figures ({before.runtime.describe()}), and the calibrated "
                     f"profile adds it as {gpu}'s configuration {new_name!r}, and the others ({kept}) keep their "
                     "figures (the planner weighs them all)")
    step_fit = fit([p for r in runs for p in r.points], before)
    notes += [f"{name} pinned: {why}" for name, why in step_fit.pinned.items()]
    after = replace(step_fit.profile, source=f"measured ({len(runs)} run(s), calibrated {datetime.date.today()})")
    if new_configuration:
        after = replace(after, variant=new_name, runtime=runs[0].runtime)
    after = replace(after, **_overheads(runs, before, notes))
    after = replace(after, step_time_spread=step_time_spread(runs, before.step_time_spread, notes))
    trained = max(p.micro_batch for r in runs for p in r.points)   # a run that trained at a micro-batch proves it fits
    if trained > after.max_batch_per_gpu:
        notes.append(f"max_batch_per_gpu raised from {after.max_batch_per_gpu} to {trained}: a run trained at it")
        after = replace(after, max_batch_per_gpu=trained)
    after = _below_out_of_memory(after, runs, out_of_memory or [], profile, gpu, notes)
    for run in runs:
        if run.ran_on_plans_gpu and not run.ran_as_priced:
            r = run.plan.resources
            notes.append(f"{run.name} ran {run.point.gpus} GPU(s) on {run.point.nodes} node(s) at micro-batch "
                         f"{run.point.micro_batch} x accumulation {run.point.accumulation}, not the "
                         f"{r.gpus_per_node * r.nodes} GPU(s) on {r.nodes} node(s) its plan priced: its step time "
                         "and wall time are not compared with the plan's")
        if run.ran_on_plans_gpu and run.steps != run.plan.job_steps:
            notes.append(f"{run.name} ran {run.steps} of its plan's {run.plan.job_steps} steps: "
                         "its wall time is not compared with the plan's")
        if run.restart_s and run.ran_on_plans_gpu and not restarts_as_priced(run):
            notes.append(f"{run.name}'s plan prices a restart with the checkpoint's fetch from its object store, "
                         "which a run's restart leaves out (the fetch is compared as the store's read rate): its "
                         "restart is not compared with the plan's")
        if run.damaged_lines:
            notes.append(f"{run.name}'s telemetry has {len(run.damaged_lines)} damaged line(s), passed over")
        restarts, lost = run.summary.get("restarts", 0), run.summary.get("lost_steps", 0)
        if restarts or lost:
            notes.append(f"{run.name}'s refit wall time counts its own {restarts} restart(s) and {lost} steps trained "
                         "again after them, as they happened (the plan's makespan prices preemptions by its model)")
    loo = {}
    if len(runs) >= 2:
        for i, run in enumerate(runs):
            others = [p for j, r in enumerate(runs) if j != i for p in r.points]
            predicted = predict_step_s(fit(others, before).profile, run.point)
            loo[run.name] = predicted / run.point.step_s - 1.0
    return Calibration(runs=runs, gpu=gpu, before=before, after=after, step_fit=step_fit, notes=notes,
                       loo_step_error=loo, store=_store_fit(runs), new_configuration=new_configuration,
                       main_name=main_name)


def configuration_name(runtime: Runtime, taken: set[str]) -> str:
    """A name for a GPU's runner configuration in a profile's `variants`: its compilation, `graphs` under CUDA
    graphs (`model`, `blocks-graphs`, `eager`), numbered where another has it."""
    base = "-".join(["eager" if runtime.compile == "off" else runtime.compile] + (["graphs"] if runtime.cuda_graphs
                                                                                   else []))
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


SPREAD_CHUNKS = 5          # a run's steady steps in this many stretches, to see it drift
MIN_CHUNK_STEPS = 10


def step_time_spread(runs: list[Run], prior: float, notes: list[str]) -> float:
    """How much a job's mean step time varies from run to run (relative sd): across runs of the same
    batch split (two or more), and within each run across its stretches of steady steps (a machine
    whose speed drifts in a run drifts between runs); the larger. No evidence: the prior's."""
    found: list[tuple[float, str]] = []
    by_split: dict[tuple, list[Run]] = {}
    for run in runs:
        p = run.point
        by_split.setdefault((p.gpus, p.nodes, p.micro_batch, p.accumulation), []).append(run)
    for split, same in by_split.items():
        if len(same) >= 2:
            means = [r.point.step_s for r in same]
            found.append((statistics.stdev(means) / statistics.fmean(means),
                          f"across {len(same)} runs ({min(means) * 1e3:.4g}-{max(means) * 1e3:.4g} ms a step)"))
    for run in runs:
        size = len(run.steady_s) // SPREAD_CHUNKS
        if size >= MIN_CHUNK_STEPS:
            means = [statistics.fmean(run.steady_s[i * size:(i + 1) * size]) for i in range(SPREAD_CHUNKS)]
            found.append((statistics.stdev(means) / statistics.fmean(means),
                          f"within {run.name} ({SPREAD_CHUNKS} stretches of {size} steps)"))
    if not found:
        return prior
    spread, where = max(found)
    notes.append(f"step time spread {spread:.1%} (relative sd), {where}: each trial of a plan draws its own speed")
    return min(spread, 0.99)


def _store_fit(runs: list[Run]) -> dict | None:
    """The object store's write and read bandwidth as the runs saw it (medians), under the store name
    their plan was priced with; None when no run uploaded or fetched."""
    uploads = [v for r in runs for v in r.upload_gb_per_s]
    fetches = [v for r in runs for v in r.fetch_gb_per_s]
    if not uploads and not fetches:
        return None
    name = runs[0].plan.checkpoint.storage or "object-store"
    return {"name": name, "write_gb_per_s": _median(uploads), "read_gb_per_s": _median(fetches),
            "uploads": len(uploads), "fetches": len(fetches)}


def _overheads(runs: list[Run], before: GpuProfile, notes: list[str]) -> dict:
    def median_or(values, prior, label):
        values = [v for v in values if v is not None]
        if not values:
            notes.append(f"{label}: not measured in these runs, kept at {prior:.3g}s")
            return prior
        return statistics.median(values)
    sizes = {r.summary.get("checkpoint_bytes") for r in runs}
    if len(sizes) <= 1:
        notes.append("checkpoint save time is a median: every run saved the same state size")
    return {"checkpoint_save_s": median_or([v for r in runs for v in r.sync_save_s], before.checkpoint_save_s,
                                           "synchronous save"),
            # what an async checkpoint costs training: the stall and the slower steps beside its write
            "checkpoint_stall_s": median_or([v for r in runs for v in r.async_cost_s], before.checkpoint_stall_s,
                                            "async stall"),
            "startup_s": _startup_s(runs, before, notes),
            "restart_s": median_or([v for r in runs for v in r.restart_s], before.restart_s, "restart")}


def _startup_s(runs: list[Run], before: GpuProfile, notes: list[str]) -> float:
    """The start-up: the runs that started once and ended (their first start and their exit); where none did, the
    first lives that ended at a notice (their starts, and their exits after the notice); else the prior. Of those,
    the starts that compiled from an empty compile cache where any did: a new node's start, as the profile's
    start-up is; one that found the cache of an earlier run on its machine compiled little and starts as a restart
    does."""
    starts = [(r, r.fixed_s) for r in runs if r.fixed_s is not None]
    if not starts:
        starts = [(r, r.first_life_s) for r in runs if r.first_life_s is not None]
        if starts:
            notes.append(f"start-up: from the first lives of {len(starts)} run(s) whose first life ended at a notice "
                         "(no run ran without a restart): their starts, and their exits after the notice")
    if not starts:
        notes.append(f"start-up: not measured in these runs, kept at {before.startup_s:.3g}s")
        return before.startup_s
    cold = [(r, s) for r, s in starts if not r.first_cache_bytes]
    warm = [r for r, _ in starts if r.first_cache_bytes]
    if warm and cold:
        notes.append(f"start-up: from the {len(cold)} run(s) whose first start compiled from an empty cache; "
                     f"{', '.join(r.name for r in warm)} found an earlier run's cache and are left out")
    elif warm:
        found = max(r.first_cache_bytes for r in warm) / 1e6
        notes.append(f"start-up: every first start here found an earlier run's compile cache (up to {found:.0f} MB): "
                     "a new node compiles first, so its start-up is longer than this one")
    return statistics.median(s for _, s in (cold or starts))


def predicted_wall_s(p: GpuProfile, run: Run) -> float:
    """A run's wall time under a profile: start-up, steps, interval saves, final save, and the run's own
    failures as they happened (its restarts, and the steps it trained again after them)."""
    async_mode = run.plan.checkpoint.async_
    per_save = p.checkpoint_stall_s if async_mode else p.checkpoint_save_s
    final = p.checkpoint_save_s if run.final_save else 0.0
    step_s = predict_step_s(p, run.point)
    failures_s = run.summary.get("restarts", 0) * p.restart_s + run.summary.get("lost_steps", 0) * step_s
    return p.startup_s + run.steps * step_s + run.interval_saves * per_save + final + failures_s


def _below_out_of_memory(after: GpuProfile, runs: list[Run], stops: list[OutOfMemory], profile: Profile,
                         given: str | None, notes: list[str]) -> GpuProfile:
    """The batch limit below every micro-batch that ran out of memory on this GPU under these settings: the
    largest a run trained at below it, else one less (the planner takes the largest that divides a rank's share).
    A micro-batch that one run trained at and another ran out at stays (a run that trained proves it fits)."""
    resolve_gpus(stops, profile, notes, given)
    gpu, runtime = runs[0].gpu, runs[0].runtime
    trained = [p.micro_batch for r in runs for p in r.points]
    for stop in stops:
        if (stop.gpu, stop.runtime) != (gpu, runtime):
            notes.append(f"{stop.name} ran out of memory at {stop.micro_batch} a GPU on {stop.gpu} under "
                         f"{stop.runtime.describe()}: another GPU or settings than the runs fitted, not used")
        elif stop.micro_batch <= max(trained):
            notes.append(f"{stop.name} ran out of memory at {stop.micro_batch} a GPU, where a run trained at "
                         f"{max(trained)}: the limit stays {after.max_batch_per_gpu} (a run that trained proves it fits)")
        elif stop.micro_batch <= after.max_batch_per_gpu:
            limit = max((m for m in trained if m < stop.micro_batch), default=stop.micro_batch - 1)
            notes.append(f"max_batch_per_gpu lowered from {after.max_batch_per_gpu} to {limit}: {stop.name} ran "
                         f"out of memory at {stop.micro_batch} a GPU")
            after = replace(after, max_batch_per_gpu=limit)
    return after


def restarts_as_priced(run: Run) -> bool:
    """Whether a run's measured restarts are what its plan's restart prices. With object storage the plan
    prices a new node's restart with the checkpoint's fetch (costsim.storage), and a run's restart leaves any
    fetch out (costsim.contract.timing; the fetches are compared as the store's read rate)."""
    return run.ran_on_plans_gpu and run.plan.checkpoint.storage_kind != "object"


def report_rows(c: Calibration) -> list[dict]:
    """Per run: the plan's prediction, the refitted one and the measurement."""
    rows = []
    for run in c.runs:
        pred, batch, async_mode = run.plan.prediction, run.plan.workload.global_batch, run.plan.checkpoint.async_
        as_priced = run.ran_as_priced
        measured_wall = run.wall_s
        rows.append({
            "run": run.name, "gpus": run.point.gpus, "micro_batch": run.point.micro_batch,
            "step_s": {"plan": pred.step_time_s if as_priced else None, "refit": predict_step_s(c.after, run.point),
                       "measured": run.point.step_s},
            "samples_per_s": {"plan": pred.samples_per_s if as_priced else None,
                              "refit": batch / predict_step_s(c.after, run.point),
                              "measured": batch / run.point.step_s},
            # the plan's makespan is for its whole job on what it priced: no measure of a run cut short
            # (`--steps`) or run on other GPUs
            "wall_s": {"plan": pred.makespan_s.p50 if run.steps == run.plan.job_steps and as_priced else None,
                       "refit": predicted_wall_s(c.after, run),
                       "measured": measured_wall},
            # like with like: an async plan's stall against async saves' stalls (a run's final
            # synchronous save is no measurement of it), a synchronous plan's save against sync saves
            "checkpoint_stall_s": {"plan": None if not run.ran_on_plans_gpu
                                   else pred.checkpoint_stall_s if async_mode else pred.checkpoint_save_s,
                                   "measured": _median(run.async_cost_s if async_mode else run.sync_save_s)},
            "restart_s": {"plan": pred.restart_s if restarts_as_priced(run) else None,
                          "measured": _median(run.restart_s)},
            **_store_rows(run),
            "loo_step_error": c.loo_step_error.get(run.name),
        })
    return rows


def _store_rows(run: Run) -> dict:
    """The store's bandwidth, the plan's assumption against the run's uploads and fetches."""
    if not run.upload_gb_per_s and not run.fetch_gb_per_s:
        return {}
    from costsim.storage import load_storage
    store = load_storage().stores.get(run.plan.checkpoint.storage or "")
    return {"store_write_gb_per_s": {"plan": store.write_gb_per_s if store else None,
                                     "measured": _median(run.upload_gb_per_s)},
            "store_read_gb_per_s": {"plan": store.read_gb_per_s if store else None,
                                    "measured": _median(run.fetch_gb_per_s)}}


def _median(values):
    return statistics.median(values) if values else None


def relative_error(predicted, measured) -> float | None:
    if predicted is None or measured in (None, 0):
        return None
    return predicted / measured - 1.0


def updated_profile_document(profile_path: str, c: Calibration) -> dict:
    """The profile file with the calibrated GPU's figures replaced and provenance added."""
    import yaml
    doc = yaml.safe_load(Path(profile_path).read_text())
    entry = doc.setdefault("gpus", {}).setdefault(c.gpu, {})
    a = c.after
    if c.new_configuration:   # a configuration of its own beside the others, whose figures stay
        if not entry.get("variant"):
            entry["variant"] = c.main_name
        entry = entry.setdefault("variants", {}).setdefault(a.variant, {})
    elif a.variant in (entry.get("variants") or {}):   # the runs' configuration is one of the GPU's variants
        entry = entry["variants"][a.variant]
    entry.update({"source": a.source, "compute_overhead": f"{a.compute_overhead_s:.6g}s",
                  "compute_per_sample": f"{a.compute_per_sample_s:.6g}s", "max_batch_per_gpu": a.max_batch_per_gpu,
                  "intra_node": {"a": f"{a.intra_a_s:.6g}s", "b": f"{a.intra_b_s:.6g}s"},
                  "overlap_gamma": round(a.overlap_gamma, 4), "checkpoint_save": f"{a.checkpoint_save_s:.6g}s",
                  "checkpoint_stall": f"{a.checkpoint_stall_s:.6g}s", "restart": f"{a.restart_s:.6g}s",
                  "startup": f"{a.startup_s:.6g}s", "step_time_spread": round(a.step_time_spread, 4),
                  "runtime": c.runs[0].runtime.as_dict()})
    if c.store is not None:   # the planner takes these over the storage catalog's for that store
        # significant digits, not decimals: a slow store (0.0308 GB/s) kept three of its figures' digits
        measured = {k: float(f"{c.store[k]:.6g}") for k in ("write_gb_per_s", "read_gb_per_s")
                    if c.store[k] is not None}
        doc.setdefault("storage", {}).setdefault(c.store["name"], {}).update(
            measured, source=f"measured: {c.store['uploads']} upload(s), {c.store['fetches']} fetch(es) "
                             f"({', '.join(str(r.path) for r in c.runs)}), calibrated {datetime.date.today()}")
    doc["id"] = f"{doc.get('id', 'profile')}+cal{datetime.date.today():%Y%m%d}"
    doc["source"] = "measured"
    doc["date"] = datetime.date.today().isoformat()
    doc.setdefault("calibrations", []).append({
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": c.gpu,
        "runs": [str(r.path) for r in c.runs],
        "hardware": sorted({r.plan.resources.offering for r in c.runs}),   # what their plans named
        "devices": sorted({r.device or f"not recorded ({r.gpu or r.plan.resources.gpu})" for r in c.runs}),
        "fitted": list(c.step_fit.fitted), "pinned": c.step_fit.pinned,
        "step_rms_relative_error": round(c.step_fit.rms_relative_error, 6), "notes": c.notes})
    return doc
