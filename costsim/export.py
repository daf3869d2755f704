"""A plan as a SkyPilot task YAML or a Slurm batch script whose run step is `runner execute plan.json`.

Both run every node's `runner execute` with the node's place taken from the scheduler's variables
(SKYPILOT_* or SLURM_*), and keep checkpoints on storage every node sees (a mounted bucket, or a
shared folder), so that a requeued or recovered job resumes from its last checkpoint.
"""

from __future__ import annotations

import math
import shlex

import yaml

from costsim.contract.plan import Plan
from costsim.errors import InputError
from costsim.spec import SPOT
from costsim.storage import disk_gb

DISK_TIER = "high"       # checkpoints are staged on it: the tier whose write speed the save figures assume

SETUP = "# the synced workdir is this repository (plan.json beside pyproject.toml)\npip install -e '.[runner,sdxl]'\n"
MARGIN = 1.25            # the time limit: P90 makespan x MARGIN + 30 minutes
MARGIN_FIXED_S = 1800.0


# The clouds SkyPilot launches on (its `cloud:` values, SkyPilot 0.10); a plan on anything else
# (owned hardware, the local drill offering) cannot be launched by it.
SKYPILOT_CLOUDS = ("aws", "azure", "cudo", "do", "fluidstack", "gcp", "hyperbolic", "ibm", "kubernetes", "lambda",
                   "nebius", "oci", "paperspace", "runpod", "scp", "vast", "vsphere")


def skypilot_task(plan: Plan, *, plan_file: str = "plan.json", bucket: str | None = None,
                  max_restarts_on_errors: int = 3, task_file: str | None = None) -> str:
    """SkyPilot task YAML: resources, spot and recovery, nodes, a checkpoint mount, the run step."""
    r, w = plan.resources, plan.workload
    if r.provider in (None, "owned"):
        raise InputError(plan_file, "resources.offering", f"{r.offering} is owned hardware: export it "
                         "--to slurm, or plan on a cloud offering for SkyPilot")
    if r.provider not in SKYPILOT_CLOUDS or r.gpu.lower() == "cpu":
        raise InputError(plan_file, "resources.offering", f"{r.offering} ({r.provider}, {r.gpu}) is not something "
                         f"SkyPilot launches (clouds: {', '.join(SKYPILOT_CLOUDS)}, with GPUs): plan on a cloud "
                         "offering, or export --to slurm")
    resources: dict[str, object] = {"cloud": r.provider, "region": r.region, "instance_type": r.instance,
                 "accelerators": f"{_sky_gpu(r.gpu)}:{r.gpus_per_node}",
                 "use_spot": r.market == SPOT,
                 "job_recovery": {"strategy": "FAILOVER", "max_restarts_on_errors": max_restarts_on_errors}}
    c = plan.checkpoint
    if c.node_disk_bytes:   # the node disk holds the local copies (and the mount's write-back cache)
        resources["disk_size"] = disk_gb(c.node_disk_bytes)
    resources["disk_tier"] = DISK_TIER
    mount = "/checkpoints"
    # MOUNT_CACHED: written to a local cache and uploaded behind, SkyPilot's advice for checkpoints
    # (MOUNT streams every write through FUSE); the cache lives on the node disk sized above.
    task = {"name": _name(w.name), "num_nodes": r.nodes, "resources": resources, "workdir": ".",
            "file_mounts": {mount: {"source": bucket, "mode": "MOUNT_CACHED"} if bucket else
                            {"name": f"{_name(w.name)}-checkpoints", "mode": "MOUNT_CACHED"}},
            "setup": SETUP,
            # SKYPILOT_TASK_ID is the same on every node and across recoveries: one run folder, resumed.
            "run": f"runner execute {shlex.quote(plan_file)} --run-dir {mount}/runs/$SKYPILOT_TASK_ID\n"}
    launch = task_file or f"{_name(w.name)}.yaml"
    header = (f"# SkyPilot task for plan {plan_file}: {w.name} on {r.offering} ({r.market}), exported by "
              f"costsim {plan.costsim_version or ''}.\n# Launch with: sky jobs launch {launch} "
              "(managed: recovers from preemptions)\n")
    return header + yaml.dump(task, Dumper=_BlockDumper, sort_keys=False)


def slurm_script(plan: Plan, *, plan_file: str = "plan.json", shared_dir: str = "$HOME/costsim-runs",
                 port: int = 29500) -> str:
    """A Slurm batch script: nodes, GPUs, a time limit from the P90, requeue on preemption, srun per node."""
    r, w = plan.resources, plan.workload
    p90 = plan.prediction.makespan_s.p90
    if p90 is None:
        raise InputError(plan_file, "prediction.makespan_s.p90", "missing: the time limit is derived from it")
    limit_s = math.ceil(p90 * MARGIN + MARGIN_FIXED_S)
    if r.nodes > 1:   # every node must read the checkpoints: the plan's location, else the run folder's
        c = plan.checkpoint
        where, field = (c.location, "checkpoint.location") if c.location else (shared_dir, "--shared-dir")
        if c.storage_kind == "node" or _node_local(where):
            raise InputError(plan_file if c.location or c.storage_kind == "node" else "--shared-dir", field,
                             f"{where}: each node's own disk cannot hold the checkpoints of a {r.nodes}-node job "
                             "(the other nodes cannot read them); give a shared folder or s3://bucket/prefix")
    cpu = r.gpu.lower() == "cpu"
    lines = ["#!/bin/bash",
             f"# Slurm job for plan {plan_file}: {w.name}, exported by costsim {plan.costsim_version or ''}.",
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
             'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
             f"export MASTER_PORT={int(port)}",
             f"RUN_DIR={shared_dir}/runs/$SLURM_JOB_ID   # shared storage: a requeued job resumes here",
             f'srun --kill-on-bad-exit=0 runner execute {shlex.quote(plan_file)} --run-dir "$RUN_DIR"',
             ""]
    return "\n".join(lines)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (setup, run) as literal blocks, the way people write SkyPilot YAML."""


_BlockDumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


NODE_LOCAL = ("/tmp", "/scratch", "/local", "/mnt/local", "/dev/shm", "/var/tmp")


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
