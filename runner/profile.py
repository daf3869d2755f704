"""`runner profile`: measure a throughput profile directly, one short run per (GPUs, batch).

Each configuration runs through the normal runner (torchrun, DDP, telemetry) without periodic
checkpoints; its steady step time is the mean over the steps after warm-up. The runs are then
calibrated exactly as `costsim calibrate` would calibrate them, so the profile has the same format.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from costsim import io as cio
from costsim.contract.plan import Checkpoint, Plan, Policy, Prediction, ProfileRef, Resources, Workload
from costsim.runtime import parse_pairs
from costsim.spec import OWNED
from costsim.throughput import Infeasible, step_model
from runner.launch import Node
from runner.plan import effective_plan, load_run_spec
from runner.supervisor import Execution, Supervisor, prepare_run_dir


def synthetic_plan(workload, profile, gpu: str, gpus: int, per_gpu_batch: int, accumulation: int = 1) -> Plan:
    """The plan for one profiling configuration (single node, no periodic checkpoints); with `accumulation`
    micro-batches a step (gradient accumulation: the global batch the plan trains at on fewer GPUs)."""
    prior = profile.gpus.get(gpu)
    global_batch = gpus * per_gpu_batch * accumulation
    step_s = 1.0
    if prior is not None:
        try:
            step_s = step_model(prior, global_batch=global_batch, gpus_per_node=gpus, nodes=1,
                                inter_node_gbps=0).step_s
        except Infeasible:
            pass
    return Plan(workload=Workload(name=f"{workload.name}-profile", model=workload.model, samples=global_batch * 10**6,
                                  global_batch=global_batch, precision=workload.precision, source=workload.source),
                resources=Resources(offering=f"profile/{gpu}", gpu=gpu, gpus_per_node=gpus, nodes=1, market=OWNED),
                policy=Policy(name="owned", deadline_s=1e9),
                checkpoint=Checkpoint(interval_s=1e9, keep=1, async_=False),
                prediction=Prediction(step_time_s=step_s, samples_per_s=global_batch / step_s,
                                      per_gpu_batch=per_gpu_batch),
                profile=ProfileRef(id=profile.id, sha256=profile.sha256, path=profile.path),
                created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                costsim_version="profile")


def measure(workload_ref: str, *, gpus: list[int], batches: list[int], steps: int, gpu: str, out: str,
            run_root: Path, options: list[str], runtime: Sequence[str] = (), workload_entry: str | None = None) -> Path:
    workload = cio.load_workload(workload_ref)
    profile = cio.load_profile(workload.profile)
    run_dirs = []
    for count in gpus:
        for batch in batches:
            folder = run_root / f"gpus{count}-batch{batch}"
            synthetic = synthetic_plan(workload, profile, gpu, count, batch)
            written = prepare_run_dir(folder, effective_plan(
                synthetic, runtime=parse_pairs(runtime, base=synthetic.runtime), steps=steps,
                options=dict(o.split("=", 1) for o in options), workload_entry=workload_entry, final_save=False))
            print(f"runner profile: {count} x {gpu}, batch {batch} per GPU, {steps} steps", file=sys.stderr, flush=True)
            execution = Execution(spec=load_run_spec(written), node=Node(nnodes=1, node_rank=0, endpoint=None,
                                                                          run_id=None, source="profile"),
                                  run_dir=folder, run_id=folder.name, nproc_per_node=count, max_restarts=0)
            if Supervisor(execution).run() != 0:
                raise RuntimeError(f"profiling run {folder} failed: see its output above")
            run_dirs.append(folder)
    # The fit is costsim's (`costsim calibrate`), run as its own command: the runner reads its telemetry
    # through the contract and never imports the fitter (scipy, the profile's YAML).
    fitted = subprocess.run([sys.executable, "-m", "costsim", "calibrate", *map(str, run_dirs), "--profile",
                             profile.path, "--out", str(out)], stdout=sys.stderr)
    if fitted.returncode != 0:
        raise RuntimeError(f"costsim calibrate of {', '.join(map(str, run_dirs))} failed (exit {fitted.returncode})")
    return Path(out)
