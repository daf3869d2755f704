"""What the runner needs from plan.json, validated once (the contract is costsim.planfile's).

`runner execute` writes the effective plan into the run folder once: the plan with the runner
settings in force (its own, with `--runtime` over them) and a `run` section holding the command
line's choices (`steps`, `options`, `workload_entry`, `seed`, `final_save`). The workers read only
that file; nothing is parsed twice or passed on as argv.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from costsim.errors import InputError
from costsim.planfile import job_steps, read_plan
from costsim.runtime import Runtime, parse_runtime
from runner.batching import BatchSplit, BatchSplitError, split_batch


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    plan_path: str
    workload: str            # the plan's workload name
    model: str               # a runner workload name (registry) or the user's entry point's name
    samples: int
    global_batch: int
    precision: str
    gpu: str
    gpus_per_node: int
    nodes: int
    market: str
    offering: str
    interval_s: float | None
    interval_steps: int | None
    keep: int
    async_checkpoint: bool
    per_gpu_batch: int               # the micro-batch the plan was priced at: never exceeded
    min_nodes: int | None = None     # elastic range min_nodes..nodes, global batch kept
    runtime: Runtime = Runtime()     # speed settings in force (the plan's, with --runtime over them)
    # the `run` section of an effective plan (runner execute's command line)
    steps: int | None = None         # stop after this many steps (drills, profiling); None: the whole job
    options: dict = field(default_factory=dict)   # --option KEY=VALUE for the workload
    workload_entry: str | None = None
    seed: int = 0
    final_save: bool = True          # off only for profiling runs, whose state is thrown away

    @property
    def total_steps(self) -> int:
        return self.steps or job_steps(self.samples, self.global_batch)

    @property
    def cpu(self) -> bool:
        return self.gpu.lower() == "cpu"

    def split(self, world_size: int) -> BatchSplit:
        """The plan's global batch on `world_size` processes (BatchSplitError names the numbers)."""
        return split_batch(self.global_batch, world_size, self.per_gpu_batch)

    def check_split(self, processes_per_node: int, node_counts) -> dict[int, BatchSplit]:
        """The split at every node count the job may run on; an InputError before anything starts."""
        splits = {}
        for nodes in node_counts:
            try:
                splits[nodes] = self.split(processes_per_node * nodes)
            except BatchSplitError as exc:
                raise InputError(self.plan_path, "workload.global_batch",
                                 f"{exc} ({nodes} node(s) x {processes_per_node} per node); "
                                 "run on a number of processes that divides it") from None
        return splits


def load_run_spec(path: str | Path, *, with_run: bool = True) -> RunSpec:
    """RunSpec from plan.json; bad content is an InputError naming the file and field. `with_run`
    False leaves out a `run` section: `runner execute` takes those choices from its own command line
    only, never from a plan it is given."""
    doc = read_plan(path)
    if not with_run:
        doc = {k: v for k, v in doc.items() if k != "run"}
    w, r, c = doc["workload"], doc["resources"], doc["checkpoint"]
    interval_steps = c.get("interval_steps")
    if interval_steps is not None and (not isinstance(interval_steps, int) or interval_steps < 1):
        raise InputError(str(path), "checkpoint.interval_steps", f"got {interval_steps!r}; expected an integer >= 1")
    precision = w.get("precision", "fp32")
    if precision not in ("bf16", "fp16", "fp32"):
        raise InputError(str(path), "workload.precision", f"got {precision!r}; allowed: bf16, fp16, fp32")
    return RunSpec(plan_path=str(path), workload=w["name"], model=w["model"], samples=int(w["samples"]),
                   global_batch=int(w["global_batch"]), precision=precision, gpu=str(r["gpu"]),
                   gpus_per_node=int(r["gpus_per_node"]), nodes=int(r["nodes"]), market=str(r.get("market", "")),
                   offering=str(r.get("offering", "")),
                   interval_s=None if interval_steps else float(c["interval_s"]), interval_steps=interval_steps,
                   keep=int(c["keep"]), async_checkpoint=bool(c["async"]),
                   per_gpu_batch=_per_gpu_batch(path, doc),
                   min_nodes=_min_nodes(path, r), runtime=parse_runtime(doc.get("runtime"), str(path)),
                   **_run_section(path, doc.get("run")))


RUN_FIELDS = ("steps", "options", "workload_entry", "seed", "final_save")


def effective_plan(doc: dict, *, runtime: Runtime, steps: int | None = None, options: dict | None = None,
                   workload_entry: str | None = None, seed: int = 0, final_save: bool = True) -> dict:
    """The plan as a run carries it out: the settings in force and the command line's choices."""
    return {**doc, "runtime": runtime.as_dict(),
            "run": {"steps": steps, "options": dict(options or {}), "workload_entry": workload_entry, "seed": seed,
                    "final_save": final_save}}


def _run_section(path, run) -> dict:
    if run is None:
        return {}
    if not isinstance(run, dict) or set(run) - set(RUN_FIELDS):
        raise InputError(str(path), "run", f"expected a mapping of {', '.join(RUN_FIELDS)}")
    steps, options, entry, seed = run.get("steps"), run.get("options") or {}, run.get("workload_entry"), run.get("seed", 0)
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
        raise InputError(str(path), "run.steps", f"got {steps!r}; expected an integer >= 1 or null")
    if not isinstance(options, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
        raise InputError(str(path), "run.options", "expected a mapping of option names to text")
    if entry is not None and not isinstance(entry, str):
        raise InputError(str(path), "run.workload_entry", f"got {entry!r}; expected module:function or null")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InputError(str(path), "run.seed", f"got {seed!r}; expected an integer")
    return {"steps": steps, "options": dict(options), "workload_entry": entry, "seed": seed,
            "final_save": bool(run.get("final_save", True))}


def _min_nodes(path, resources: dict) -> int | None:
    value = resources.get("min_nodes")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= int(resources["nodes"]):
        raise InputError(str(path), "resources.min_nodes", f"got {value!r}; expected 1..resources.nodes")
    return value


def _per_gpu_batch(path, doc: dict) -> int:
    """The plan's `prediction.per_gpu_batch`; a plan without it (older costsim) takes the profile's
    `max_batch_per_gpu` for its GPU."""
    value = doc["prediction"].get("per_gpu_batch")
    if value is None:
        return _profile_max_batch(path, doc)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(str(path), "prediction.per_gpu_batch", f"got {value!r}; expected an integer >= 1")
    return value


def _profile_max_batch(path, doc: dict) -> int:
    from costsim import io  # yaml: only for plans that predate per_gpu_batch
    gpu = doc["resources"].get("gpu", "cpu")
    ref = (doc.get("profile") or {}).get("path") or doc["workload"]["model"]
    try:
        profile = io.load_profile(ref if Path(ref).is_file() else Path(ref).stem)
        return profile.gpus[gpu].max_batch_per_gpu
    except (InputError, KeyError):
        raise InputError(str(path), "prediction.per_gpu_batch", f"missing, and no profile {ref!r} with GPU {gpu!r} "
                         "is here to take max_batch_per_gpu from; add it to the plan") from None
