"""What defines a job, and a run folder's binding to one.

A run folder belongs to one job. What defines it is what decides the trained weights: the workload
and model (or the user's entry point), the samples and global batch (the sample order follows from
them and the seed), the precision, the seed and the workload's options (weights, data, EMA, ...).
What may change between attempts of the same job does not count: GPUs, nodes, market, runner
settings, `--steps`. RUN/plan.json is written once, by the first `runner execute` on the folder,
with the fingerprint of these; a later `runner execute` with another job is refused before anything
is touched, unless the user says to go on with the changed plan (recorded).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from costsim.contract.plan import Plan
from costsim.contract.telemetry import PLAN, read_events
from costsim.errors import InputError


def defining(plan: Plan) -> dict[str, Any]:
    """The fields that define the job, by name (the run section's, where a run set them)."""
    w, run = plan.workload, plan.run
    return {"workload": w.name, "model": w.model, "workload_entry": run.workload_entry if run else None,
            "samples": w.samples, "global_batch": w.global_batch, "precision": w.precision,
            "seed": run.seed if run else 0, "options": dict(sorted((run.options if run else {}).items()))}


def fingerprint(plan: Plan) -> str:
    """A short hash of `defining(plan)`: equal for the same job."""
    text = json.dumps(defining(plan), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def differences(recorded: Plan, given: Plan) -> list[str]:
    """What differs between two plans' jobs, for people: ["model: tiny -> sdxl-unet", ...]."""
    return differences_of(defining(recorded), defining(given))


def differences_of(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two jobs' defining fields (`defining`), for people."""
    out = []
    for key in a:
        if a.get(key) == b.get(key):
            continue
        if key == "options":
            x, y = a.get(key) or {}, b.get(key) or {}
            out += [f"option {k}: {x.get(k, '(unset)')} -> {y.get(k, '(unset)')}" for k in sorted(set(x) | set(y))
                    if x.get(k) != y.get(k)]
        else:
            out.append(f"{key}: {a.get(key)} -> {b.get(key)}")
    return out


class Finished(Exception):
    """The run folder's job has already run to the steps asked for: nothing to do."""

    def __init__(self, run_dir: Path, step: int):
        super().__init__(f"{run_dir}: finished at step {step}; nothing to do (another --run-dir starts another run, "
                         "a larger --steps goes on from the final checkpoint)")
        self.step = step


def check_binding(run_dir: Path, given: Plan, *, accept_change: bool = False) -> list[str]:
    """Whether `given` may run in `run_dir`: the differences it brings (empty: the same job, or a new
    folder). An InputError when it is another job and `accept_change` is off; Finished when the job
    already ran to the steps `given` asks for. Reads only: nothing is written."""
    recorded_path = Path(run_dir) / PLAN
    if not recorded_path.exists():
        return []
    recorded = Plan.read(recorded_path)
    changes = differences(recorded, given)
    if changes and not accept_change:
        raise InputError(str(recorded_path), "job", f"this run folder holds another job ({'; '.join(changes)}); "
                         "give another --run-dir, or --accept-plan-change to go on with this plan (recorded)")
    ends = [e for e in read_events(run_dir) if e.get("event") == "end" and e.get("rank") in (0, None)]
    wanted = given.run.steps if given.run and given.run.steps else given.job_steps
    if ends and ends[-1].get("step", 0) >= wanted and not changes:
        raise Finished(Path(run_dir), int(ends[-1]["step"]))
    return changes
