"""The planner's side of plan.json: a ranked candidate of a plan result as a Plan.

The contract itself (fields, validation, reading and writing) is costsim.contract.plan.
"""

from __future__ import annotations

import datetime

import costsim
from costsim.contract.plan import (
    Billing,
    Checkpoint,
    Plan,
    Policy,
    Prediction,
    ProfileRef,
    Resources,
    Spread,
    Workload,
)
from costsim.policies import POLICY_MARKETS
from costsim.spec import ON_DEMAND, SPOT
from costsim.units import finite_or_none


def spot_model_name(offering, policy: str) -> str | None:
    """The spot capacity model a candidate was simulated with (None when its policy never uses spot)."""
    uses_spot = SPOT in POLICY_MARKETS[policy]
    return offering.spot_model.name if uses_spot and offering.spot_model is not None else None


def plan_of(result, ranked) -> Plan:
    """The Plan for one ranked candidate of a plan result."""
    c, stats, step = ranked.configured.candidate, ranked.stats, ranked.configured.step
    params = ranked.configured.config.params
    gpu, checkpoints = ranked.configured.gpu, ranked.configured.checkpoints
    markets = POLICY_MARKETS[c.policy]
    uses_market = SPOT in markets and ranked.configured.config.market is not None
    w, o = result.workload, c.offering
    return Plan(
        workload=Workload(name=w.name, model=w.model, samples=w.samples, global_batch=w.global_batch,
                          precision=w.precision, resolution=w.resolution, source=w.source, options=dict(w.options)),
        resources=Resources(offering=o.id, provider=o.provider, region=o.region, instance=o.instance, gpu=o.gpu,
                            gpus_per_node=o.gpus_per_node, nodes=c.nodes, market=markets[0],
                            fallback=ON_DEMAND if SPOT in markets and ON_DEMAND in markets else None,
                            price_per_node_h={m: o.price_per_h(m) for m in o.markets}, currency=o.currency,
                            price_read_date=o.read_date, catalog=o.catalog, spot_model=spot_model_name(o, c.policy),
                            billing=Billing(increment_s=o.billing_increment_s, minimum_s=o.billing_minimum_s),
                            spot_notice_s=o.spot_notice_s if SPOT in o.markets else None),
        policy=Policy(name=c.policy, deadline_s=result.deadline_s, changeover_s=params.changeover_s,
                      p_deadline_target=result.target),
        checkpoint=Checkpoint(interval_s=c.checkpoint_interval_s, keep=w.checkpoint_keep, async_=c.checkpoint_async,
                              bytes=checkpoints.bytes, storage=checkpoints.store.name,
                              storage_kind=checkpoints.store.kind, node_disk_bytes=checkpoints.node_disk_bytes),
        prediction=Prediction(
            makespan_s=Spread(mean=finite_or_none(stats.makespan_mean_s), p10=finite_or_none(stats.makespan_p10_s),
                              p50=finite_or_none(stats.makespan_p50_s), p90=finite_or_none(stats.makespan_p90_s)),
            cost=Spread(mean=stats.cost_mean, p10=stats.cost_p10, p50=stats.cost_p50, p90=stats.cost_p90),
            market=ranked.configured.config.market.spec.as_dict() if uses_market else None,
            step_time_spread=params.speed_spread,
            worst_group=({"name": stats.worst_group, "p_deadline": stats.worst_group_p_deadline}
                         if stats.worst_group is not None else None),
            group_p_deadline=dict(stats.group_p_deadline),
            p_deadline=stats.p_deadline, preemptions_mean=stats.preemptions_mean, work_s=params.work_s,
            step_time_s=step.step_s, samples_per_s=step.samples_per_s, per_gpu_batch=step.per_gpu_batch,
            accumulation=step.accumulation, checkpoint_save_s=params.checkpoint_s,
            checkpoint_upload_s=checkpoints.upload_s if checkpoints.upload_s > 0 else None,
            checkpoint_stall_s=checkpoints.stall_s, restart_s=params.restart_s, startup_s=gpu.startup_s,
            trials=stats.trials, seed=result.seed),
        runtime=gpu.runtime,
        profile=ProfileRef(id=result.profile.id, sha256=result.profile.sha256, source=gpu.source,
                           path=result.profile.path, variant=gpu.variant or None),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        costsim_version=costsim.__version__)
