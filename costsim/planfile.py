"""plan.json (schema costsim.plan/1): built from a plan result, and read back with validation.

This file is the whole contract between `costsim plan` and `runner execute`.
"""

from __future__ import annotations

import datetime
import math

import costsim
from costsim.errors import InputError
from costsim.io.files import Fields, read_json
from costsim.policies import POLICIES, POLICY_MARKETS
from costsim.runtime import parse_runtime
from costsim.spec import ON_DEMAND, SPOT
from costsim.units import finite_or_none

SCHEMA = "costsim.plan/1"


def job_steps(samples: int, global_batch: int) -> int:
    """Optimizer steps of a plan's whole job: what `runner execute` runs unless told `--steps`."""
    return max(1, math.ceil(samples / global_batch))


def spot_model_name(offering, policy: str) -> str | None:
    """The spot capacity model a candidate was simulated with (None when its policy never uses spot)."""
    uses_spot = SPOT in POLICY_MARKETS[policy]
    return offering.spot_model.name if uses_spot and offering.spot_model is not None else None


def plan_document(result, ranked) -> dict:
    """The plan.json content for one ranked candidate of a plan result."""
    c, stats, step = ranked.configured.candidate, ranked.stats, ranked.configured.step
    params = ranked.configured.config.params
    gpu = ranked.configured.gpu
    markets = POLICY_MARKETS[c.policy]
    w = result.workload
    return {
        "schema": SCHEMA,
        "workload": {"name": w.name, "model": w.model, "samples": w.samples, "global_batch": w.global_batch,
                     "precision": w.precision, "resolution": w.resolution, "source": w.source},
        "resources": {"offering": c.offering.id, "provider": c.offering.provider, "region": c.offering.region,
                      "instance": c.offering.instance, "gpu": c.offering.gpu,
                      "gpus_per_node": c.offering.gpus_per_node, "nodes": c.nodes, "market": markets[0],
                      "fallback": ON_DEMAND if SPOT in markets and ON_DEMAND in markets else None,
                      "price_per_node_h": {m: c.offering.price_per_h(m) for m in c.offering.markets},
                      "currency": c.offering.currency, "price_read_date": c.offering.read_date,
                      "spot_model": spot_model_name(c.offering, c.policy),
                      "billing": {"increment_s": c.offering.billing_increment_s,
                                  "minimum_s": c.offering.billing_minimum_s},
                      "spot_notice_s": c.offering.spot_notice_s if SPOT in c.offering.markets else None},
        "policy": {"name": c.policy, "deadline_s": result.deadline_s, "changeover_s": params.changeover_s,
                   "p_deadline_target": result.target},
        "checkpoint": {"interval_s": c.checkpoint_interval_s, "keep": w.checkpoint_keep,
                       "async": c.checkpoint_async},
        "prediction": {
            "makespan_s": {"mean": finite_or_none(stats.makespan_mean_s),
                           "p50": finite_or_none(stats.makespan_p50_s), "p90": finite_or_none(stats.makespan_p90_s)},
            "cost": {"mean": stats.cost_mean, "p50": stats.cost_p50, "p90": stats.cost_p90},
            "p_deadline": stats.p_deadline, "preemptions_mean": stats.preemptions_mean,
            "work_s": params.work_s, "step_time_s": step.step_s, "samples_per_s": step.samples_per_s,
            "per_gpu_batch": step.per_gpu_batch, "accumulation": step.accumulation,
            "checkpoint_save_s": gpu.checkpoint_save_s, "checkpoint_stall_s": gpu.checkpoint_stall_s,
            "restart_s": gpu.restart_s, "startup_s": gpu.startup_s, "trials": stats.trials, "seed": result.seed,
        },
        "runtime": gpu.runtime.as_dict(),
        "profile": {"id": result.profile.id, "sha256": result.profile.sha256, "source": gpu.source,
                    "path": result.profile.path, "variant": gpu.variant or None},
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "costsim_version": costsim.__version__,
    }


def read_plan(path) -> dict:
    """Read and validate plan.json; errors name the file and the field."""
    doc = read_json(path)
    f = Fields(path, doc)
    if f.text("schema") != SCHEMA:
        raise InputError(path, "schema", f"got {doc.get('schema')!r}; expected {SCHEMA!r}")
    workload = f.mapping_of("workload")
    workload.text("name"), workload.text("model")
    workload.number("samples", integer=True), workload.number("global_batch", integer=True)
    resources = f.mapping_of("resources")
    resources.text("gpu")   # required: a plan without it is not a CPU run
    resources.number("gpus_per_node", integer=True), resources.number("nodes", integer=True)
    policy = f.mapping_of("policy")
    if policy.text("name") not in POLICIES:
        raise InputError(path, "policy.name", f"unknown; allowed: {', '.join(sorted(POLICIES))}")
    checkpoint = f.mapping_of("checkpoint")
    checkpoint.number("interval_s"), checkpoint.number("keep", integer=True), checkpoint.boolean("async")
    prediction = f.mapping_of("prediction")
    prediction.number("step_time_s"), prediction.number("samples_per_s")
    parse_runtime(doc.get("runtime"), str(path))
    return doc
