"""What the runner needs from plan.json (the contract, validated once, is costsim.contract.plan).

`runner execute` writes the effective plan into the run folder (RUN/current-plan.json; RUN/plan.json
is the job's, written once): the plan with the runner settings in force (its own, with `--runtime`
over them) and a `run` section holding the command line's choices (`steps`, `options`,
`workload_entry`, `seed`, `final_save`). The workers read only that file; nothing is parsed twice or
passed on as argv.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from costsim.contract.plan import Plan, RunSection, job_steps
from costsim.errors import InputError
from costsim.runtime import Runtime
from runner.batching import BatchSplit, BatchSplitError, split_batch
from runner.store import is_store


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
    checkpoint_location: str | None = None   # a folder or s3://bucket/prefix; None: RUN/checkpoints
    checkpoint_bytes: float = 0.0            # one checkpoint's size as planned (0: unknown)
    min_nodes: int | None = None     # elastic range min_nodes..nodes, global batch kept
    runtime: Runtime = Runtime()     # speed settings in force (the plan's, with --runtime over them)
    # the `run` section of an effective plan (runner execute's command line)
    steps: int | None = None         # stop after this many steps (drills, profiling); None: the whole job
    options: dict = field(default_factory=dict)   # --option KEY=VALUE for the workload
    workload_entry: str | None = None
    seed: int = 0
    final_save: bool = True          # off only for profiling runs, whose state is thrown away
    notice_s: float | None = None    # the provider's warning before a reclaim (None: not known)
    planned_save_s: float | None = None   # a checkpoint save as the plan priced it, until this run measures one
    notice_save: str = "auto"        # costsim.contract.notice's mode

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
    return run_spec(Plan.read(path), str(path), with_run=with_run)


def run_spec(plan: Plan, path: str, *, with_run: bool = True) -> RunSpec:
    """What the runner needs of a Plan (already validated by costsim.contract.plan)."""
    w, r, c = plan.workload, plan.resources, plan.checkpoint
    run = plan.run if with_run and plan.run is not None else RunSection()
    return RunSpec(plan_path=path, workload=w.name, model=w.model, samples=w.samples, global_batch=w.global_batch,
                   precision=w.precision, gpu=r.gpu, gpus_per_node=r.gpus_per_node, nodes=r.nodes, market=r.market,
                   offering=r.offering, interval_s=None if c.interval_steps else c.interval_s,
                   interval_steps=c.interval_steps, keep=c.keep, async_checkpoint=c.async_,
                   per_gpu_batch=plan.prediction.per_gpu_batch or _profile_max_batch(path, plan),
                   min_nodes=r.min_nodes, runtime=plan.runtime, checkpoint_location=c.location,
                   checkpoint_bytes=c.bytes or 0.0, steps=run.steps, options=dict(run.options),
                   workload_entry=run.workload_entry, seed=run.seed, final_save=run.final_save,
                   notice_s=r.spot_notice_s, planned_save_s=planned_save_s(plan),
                   notice_save=c.notice_save)


def planned_save_s(plan: Plan) -> float | None:
    """A save as the plan priced it, for this run's notice rule until it measures one: the local write, and the upload
    where the checkpoints go to the object store the plan priced (`checkpoint.location` an s3:// URL); a run whose
    checkpoints stay on its own disk uploads nothing."""
    p, c = plan.prediction, plan.checkpoint
    if p.checkpoint_save_s is None or not p.checkpoint_upload_s or is_store(c.location):
        return p.checkpoint_save_s
    return max(0.0, p.checkpoint_save_s - p.checkpoint_upload_s)


def effective_plan(plan: Plan, *, runtime: Runtime, steps: int | None = None, options: dict | None = None,
                   workload_entry: str | None = None, seed: int = 0, final_save: bool = True,
                   checkpoint_location: str | None = None, notice_save: str | None = None) -> Plan:
    """The plan as a run carries it out: the settings in force and the command line's choices
    (`checkpoint_location`: --checkpoint-dir, `notice_save`: --notice-save, over the plan's)."""
    checkpoint = replace(plan.checkpoint, location=checkpoint_location) if checkpoint_location else plan.checkpoint
    if notice_save:
        checkpoint = replace(checkpoint, notice_save=notice_save)
    return replace(plan, runtime=runtime, checkpoint=checkpoint,
                   run=RunSection(steps=steps, options=dict(options or {}), workload_entry=workload_entry, seed=seed,
                                  final_save=final_save))


def _profile_max_batch(path: str, plan: Plan) -> int:
    """A plan without `prediction.per_gpu_batch` (older costsim) takes the profile's
    `max_batch_per_gpu` for its GPU."""
    from costsim import io  # yaml: only for plans that predate per_gpu_batch
    gpu = plan.resources.gpu
    ref = plan.profile.path or plan.workload.model
    try:
        profile = io.load_profile(ref if Path(ref).is_file() else Path(ref).stem)
        return profile.gpus[gpu].max_batch_per_gpu
    except (InputError, KeyError):
        raise InputError(str(path), "prediction.per_gpu_batch", f"missing, and no profile {ref!r} with GPU {gpu!r} "
                         "is here to take max_batch_per_gpu from; add it to the plan") from None
