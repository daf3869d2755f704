"""A plan as a SkyPilot task YAML or a Slurm batch script whose run step is `runner execute PLAN`.

Both run every node's `runner execute` with the node's place taken from the scheduler's variables
(SKYPILOT_* or SLURM_*), and keep checkpoints on storage every node sees (a mounted bucket, a shared
folder, or the plan's `s3://` location), so that a requeued or recovered job resumes from its last
checkpoint.

What the node's command names must be on the node. SkyPilot syncs the workdir without the files git
ignores (`plan.json` is ignored in this repository, and a plan may live outside it), so the task
uploads the plan itself as a file mount (SkyPilot uploads a file named there whatever git ignores),
and each workload option that names a local file or folder the same way. A Slurm job reads the plan
where it is, through the cluster's shared filesystem, so the script names it by its absolute path.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from costsim.contract.plan import Plan
from costsim.errors import InputError
from costsim.spec import SPOT
from costsim.storage import disk_gb

DISK_TIER = "high"       # checkpoints are staged on it: the tier whose write speed the save figures assume
MARGIN = 1.25            # the P90 time limit: P90 makespan x MARGIN + 30 minutes
MARGIN_FIXED_S = 1800.0

# Where the task puts what it uploads, on each node (SkyPilot file mount destinations).
REMOTE_PLAN_DIR = "~/.costsim/plan"
REMOTE_INPUTS_DIR = "~/.costsim/inputs"
MOUNT = "/checkpoints"
NODE_RUNS = "~/costsim-runs"   # run folders on the node's disk, when no bucket is mounted for them

# The clouds SkyPilot launches on (its `cloud:` values, SkyPilot 0.10); a plan on anything else
# (owned hardware, the local drill offering) cannot be launched by it.
SKYPILOT_CLOUDS = ("aws", "azure", "cudo", "do", "fluidstack", "gcp", "hyperbolic", "ibm", "kubernetes", "lambda",
                   "nebius", "oci", "paperspace", "runpod", "scp", "vast", "vsphere")
# The bucket URLs SkyPilot mounts (sky/data/data_utils.py); a bare name would be read as a local path.
BUCKET_SCHEMES = ("s3://", "gs://", "r2://", "cos://", "oci://", "nebius://", "https://")
# The runner reaches an s3:// store through the usual AWS variables (runner/store.py): the endpoint
# and region are settings written into the task, the keys are SkyPilot secrets given at launch.
STORE_SETTINGS = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")
STORE_SECRETS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanFile:
    """A plan and the file it was read from (absolute: the exported job names it from elsewhere)."""

    plan: Plan
    path: Path

    @classmethod
    def read(cls, path: str | Path) -> PlanFile:
        return cls(plan=Plan.read(path), path=Path(path).resolve())


def workdir_of(given: str | None) -> Path:
    """The costsim repository the nodes install from: `given`, else the one this costsim runs from."""
    tree = Path(given).resolve() if given else Path(__file__).resolve().parents[1]
    pyproject = tree / "pyproject.toml"
    if not (pyproject.is_file() and 'name = "costsim"' in pyproject.read_text()):
        raise InputError("--workdir", "workdir", f"{tree} is not the costsim repository" + (
            "" if given else " (this costsim is installed from a wheel)") + ": give the costsim source folder the "
            "nodes install from")
    return tree


def skypilot_task(source: PlanFile, *, workdir: Path, bucket: str | None = None,
                  store_env: Mapping[str, str] | None = None, max_restarts_on_errors: int = 3,
                  task_file: str | None = None) -> str:
    """SkyPilot task YAML: resources, spot and recovery, nodes, what the node needs, the run step."""
    plan, plan_file = source.plan, str(source.path)
    r, w, c = plan.resources, plan.workload, plan.checkpoint
    _check_skypilot_offering(plan, plan_file)
    if bucket is not None and not bucket.startswith(BUCKET_SCHEMES):
        raise InputError("--bucket", "bucket", f"got {bucket!r}; give the bucket's URL with its scheme, e.g. "
                         f"s3://{bucket.strip('/') or 'my-ckpts'} (SkyPilot reads a bare name as a local folder; "
                         f"allowed: {', '.join(BUCKET_SCHEMES)})")
    store = c.location is not None and c.location.startswith("s3://")
    if c.location is not None and not store and (r.market == SPOT or r.nodes > 1):
        raise InputError(plan_file, "checkpoint.location", f"{c.location} is a folder on the node's own disk on a "
                         "SkyPilot node, gone with a spot node and unseen by the others: give s3://bucket/prefix, "
                         "or leave it out to keep checkpoints in the mounted bucket")
    remote_plan = f"{REMOTE_PLAN_DIR}/{_safe(source.path.name)}"
    mounts: dict[str, object] = {remote_plan: plan_file}
    inputs = _local_inputs(plan)
    mounts.update({f"{REMOTE_INPUTS_DIR}/{_safe(key)}": str(path) for key, path in inputs.items()})
    run_root = NODE_RUNS
    if bucket or not store:   # the run folder (and, without a store, the checkpoints) in a bucket
        # MOUNT_CACHED: written to a local cache and uploaded behind, SkyPilot's advice for checkpoints
        # (MOUNT streams every write through FUSE); the cache lives on the node disk sized below.
        mounts[MOUNT] = ({"source": bucket, "mode": "MOUNT_CACHED"} if bucket
                         else {"name": f"{_name(w.name)}-checkpoints", "mode": "MOUNT_CACHED"})
        run_root = f"{MOUNT}/runs"
    # SKYPILOT_TASK_ID is the same on every node and across recoveries: one run folder, resumed.
    command = f"runner execute {remote_plan} --run-dir {run_root}/$SKYPILOT_TASK_ID"
    for key in inputs:
        command += f" --option {shlex.quote(key + '=')}{REMOTE_INPUTS_DIR}/{_safe(key)}"
    task: dict[str, object] = {"name": _name(w.name), "num_nodes": r.nodes,
                               "resources": _sky_resources(plan, max_restarts_on_errors), "workdir": str(workdir),
                               "file_mounts": mounts}
    if store:
        settings = {k: v for k, v in (store_env or {}).items() if k in STORE_SETTINGS and v}
        if settings:
            task["envs"] = settings
        task["secrets"] = {name: None for name in STORE_SECRETS}
    extras = "runner,sdxl,store" if store else "runner,sdxl"
    task["setup"] = f"# the workdir is the costsim repository\npip install -e '.[{extras}]'\n"
    task["run"] = command + "\n"
    return _sky_header(plan, plan_file, task_file, store, run_root) + yaml.dump(task, Dumper=_BlockDumper,
                                                                                sort_keys=False)


def _check_skypilot_offering(plan: Plan, plan_file: str) -> None:
    r = plan.resources
    if r.provider in (None, "owned"):
        raise InputError(plan_file, "resources.offering", f"{r.offering} is owned hardware: export it "
                         "--to slurm, or plan on a cloud offering for SkyPilot")
    if r.provider not in SKYPILOT_CLOUDS or r.gpu.lower() == "cpu":
        raise InputError(plan_file, "resources.offering", f"{r.offering} ({r.provider}, {r.gpu}) is not something "
                         f"SkyPilot launches (clouds: {', '.join(SKYPILOT_CLOUDS)}, with GPUs): plan on a cloud "
                         "offering, or export --to slurm")


def _sky_resources(plan: Plan, max_restarts_on_errors: int) -> dict[str, object]:
    r, c = plan.resources, plan.checkpoint
    resources: dict[str, object] = {"cloud": r.provider, "region": r.region, "instance_type": r.instance,
                                    "accelerators": f"{_sky_gpu(r.gpu)}:{r.gpus_per_node}",
                                    "use_spot": r.market == SPOT,
                                    "job_recovery": {"strategy": "FAILOVER",
                                                     "max_restarts_on_errors": max_restarts_on_errors}}
    if c.node_disk_bytes:   # the node disk holds the local copies (and the mount's write-back cache)
        resources["disk_size"] = disk_gb(c.node_disk_bytes)
    resources["disk_tier"] = DISK_TIER
    return resources


def _sky_header(plan: Plan, plan_file: str, task_file: str | None, store: bool, run_root: str) -> str:
    r, w = plan.resources, plan.workload
    launch = f"sky jobs launch {task_file or _name(w.name) + '.yaml'}"
    if store:
        launch += "".join(f" --secret {name}" for name in STORE_SECRETS)
    lines = [f"# SkyPilot task for plan {plan_file}: {w.name} on {r.offering} ({r.market}), exported by costsim "
             f"{plan.costsim_version or ''}.",
             f"# Launch with: {launch} (managed: recovers from preemptions)"]
    if store:
        lines.append(f"# Checkpoints: {plan.checkpoint.location} (the plan's checkpoint.location; the keys come from "
                     "your environment at launch); run folders: " + run_root)
    return "\n".join(lines) + "\n"


def _local_inputs(plan: Plan) -> dict[str, Path]:
    """The plan's workload options that name a file or folder here (weights=, data=): the node needs them."""
    found = {}
    for key, value in sorted(plan.workload.options.items()):
        path = Path(value).expanduser()
        if "://" not in value and path.exists():
            found[key] = path.resolve()
    return found


def _safe(name: str) -> str:
    """A file name the node's shell takes as it is (remote names are ours to choose)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", name).lstrip(".-") or "plan.json"


def time_limit_s(plan: Plan, plan_file: str, override_s: float | None = None) -> tuple[int, str]:
    """The Slurm time limit of one run of the job, and where it came from (the script says it).

    The shorter of the deadline (a run still going then has missed it; the runner checkpoints on the
    TERM 120 s before) and the P90 finish x 1.25 + 30 min (a tighter limit is scheduled sooner by
    backfill); --time-limit overrides both.
    """
    if override_s is not None:
        return math.ceil(override_s), "--time-limit"
    p90 = plan.prediction.makespan_s.p90
    if p90 is None:
        raise InputError(plan_file, "prediction.makespan_s.p90", "missing: the time limit is derived from it "
                         "(or give --time-limit)")
    from_p90 = math.ceil(p90 * MARGIN + MARGIN_FIXED_S)
    deadline = math.ceil(plan.policy.deadline_s)
    if deadline <= from_p90:
        return deadline, f"the plan's deadline (P90 finish x {MARGIN} + 30 min would be {_hms(from_p90)})"
    return from_p90, f"P90 finish x {MARGIN} + 30 min (the deadline is {_hms(deadline)})"


def slurm_script(source: PlanFile, *, shared_dir: str = "$HOME/costsim-runs", port: int = 29500,
                 time_limit: float | None = None) -> str:
    """A Slurm batch script: nodes, GPUs, a time limit, requeue on preemption, srun per node."""
    plan, plan_file = source.plan, str(source.path)
    r, w = plan.resources, plan.workload
    shared_dir = script_folder(shared_dir)
    limit_s, why = time_limit_s(plan, plan_file, time_limit)
    if r.nodes > 1:   # every node must read the plan and the checkpoints (the plan's location, else the run folder's)
        c = plan.checkpoint
        where, field = (c.location, "checkpoint.location") if c.location else (shared_dir, "--shared-dir")
        if c.storage_kind == "node" or _node_local(where):
            raise InputError(plan_file if c.location or c.storage_kind == "node" else "--shared-dir", field,
                             f"{where}: each node's own disk cannot hold the checkpoints of a {r.nodes}-node job "
                             "(the other nodes cannot read them); give a shared folder or s3://bucket/prefix")
        if _node_local(plan_file):
            raise InputError(plan_file, "file", f"in a node-local folder: the other nodes of a {r.nodes}-node job "
                             "cannot read it; put the plan in a folder every node sees (e.g. the --shared-dir)")
    cpu = r.gpu.lower() == "cpu"
    lines = ["#!/bin/bash",
             f"# Slurm job for plan {plan_file}: {w.name}, exported by costsim {plan.costsim_version or ''}.",
             f"# Time limit of each run of the job: {why}.",
             f"#SBATCH --job-name={_name(w.name)}",
             f"#SBATCH --nodes={r.nodes}",
             "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --cpus-per-task={r.gpus_per_node if cpu else 8 * r.gpus_per_node}",
             *([] if cpu else [f"#SBATCH --gpus-per-node={r.gpus_per_node}"]),
             f"#SBATCH --time={_hms(limit_s)}",
             "#SBATCH --requeue",
             "#SBATCH --signal=TERM@120",
             "#SBATCH --open-mode=append",
             f"#SBATCH --output={_name(w.name)}-%j.out",
             "set -euo pipefail",
             "# Node 0 hosts the rendezvous; every node's runner reads SLURM_NODEID and SLURM_NNODES.",
             'FIRST="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
             "# its address as Slurm knows it (NodeAddr: the node's name, unless the cluster says otherwise)",
             'export MASTER_ADDR="$(scontrol show node "$FIRST" -o | tr " " "\\n" | sed -n "s/^NodeAddr=//p")"',
             f"export MASTER_PORT={int(port)}",
             f'RUN_DIR="{shared_dir}/runs/$SLURM_JOB_ID"   # shared storage: a requeued job resumes here',
             "# the plan where it was exported: every node reads it through the shared filesystem",
             f'srun --kill-on-bad-exit=0 runner execute {shlex.quote(plan_file)} --run-dir "$RUN_DIR"',
             ""]
    return "\n".join(lines)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (setup, run) as literal blocks, the way people write SkyPilot YAML."""


_BlockDumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


NODE_LOCAL = ("/tmp", "/scratch", "/local", "/mnt/local", "/dev/shm", "/var/tmp")


def script_folder(text: str) -> str:
    """--shared-dir as a batch script names it inside double quotes: absolute, or under an environment variable
    ($HOME/runs, ~/runs as $HOME/runs); a relative one is made absolute here, since the job may be submitted
    from another folder. What the shell would read as more than a path (quotes, backslashes, backticks, a
    command's substitution) is an InputError."""
    special = next((c for c in ('"', "`", "\\", "$(", "\n") if c in text), None)
    if not text.strip() or special is not None:
        raise InputError("--shared-dir", "shared_dir",
                         f"{text!r}: {'empty' if special is None else repr(special) + ' is not allowed'}; give a "
                         "folder's path, which may begin with an environment variable such as $HOME")
    if text == "~" or text.startswith("~/"):
        return "$HOME" + text[1:]
    if text.startswith(("/", "$")):
        return text
    return str(Path(text).resolve())


def _node_local(location: str) -> bool:
    """A folder that is each node's own on a cluster (the usual node-local scratch places)."""
    return any(location == p or location.startswith(p + "/") for p in NODE_LOCAL)


def _sky_gpu(gpu: str) -> str:
    return {"A100-40GB": "A100", "A100-80GB": "A100-80GB", "V100-16GB": "V100"}.get(gpu, gpu)


def _name(text: str) -> str:
    return "".join(c if c.isalnum() or c == "-" else "-" for c in text.lower()).strip("-") or "costsim-job"


def _hms(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    days, hours = divmod(hours, 24)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}" if days else f"{hours:02d}:{minutes:02d}:{secs:02d}"
