"""`costsim control`: set a controlled run up from the command line (or pick one up again), run the
controller, and write what it cost against what the simulator predicted."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from costsim import policies
from costsim.contract.plan import Billing, Plan
from costsim.control.backend import Backend, check_runner
from costsim.control.controller import Clock, Controller, PlanFigures, ended_as, stint_dynamics, unseen_step_factor
from costsim.control.journal import Journal, Lock
from costsim.control.local import LocalBackend, Processes, TraceCapacity
from costsim.control.progress import RunFolder
from costsim.control.report import ObservedTimeline, Prices, plan_band, predict, predict_as_known, summary
from costsim.errors import InputError
from costsim.io.specs import load_gang_trace
from costsim.sim.market import TraceTimeline
from costsim.spec import SPOT
from costsim.units import format_duration

BACKENDS = ("local", "slurm")


@dataclass(kw_only=True)
class Request:
    """What the command line asked for (a resumed run takes its settings from the journal instead)."""

    plan: str
    backend: str | None = None        # None (here and below): not given; a new run takes the default
    run_dir: str | None = None
    policy: str | None = None
    trace: str | None = None
    reclaim_trace: str | None = None
    time_scale: float | None = None
    notice_s: float | None = None
    deadline_s: float | None = None
    poll_s: float | None = None       # wall seconds between looks at the job and the market
    runner_args: list[str] = field(default_factory=list)
    steps: int | None = None
    partitions: dict[str, str] | None = None   # slurm: market -> partition (default spot, on-demand)


DEFAULT_BACKEND, DEFAULT_TIME_SCALE, DEFAULT_POLL_S = "local", 1.0, 0.5


def disagreements(req: Request, journal: Journal) -> list[str]:
    """What the command line asks for that the journal of the run being picked up says otherwise: a
    resumed run keeps its policy, market, clock and job (the journal is what was billed)."""
    trace = req.trace or req.reclaim_trace
    given = {"plan": str(Path(req.plan).resolve()), "--backend": req.backend, "--policy": req.policy,
             "--trace" if req.trace else "--reclaim-trace": str(Path(trace).resolve()) if trace else None,
             "--time-scale": req.time_scale, "--notice": req.notice_s, "--deadline": req.deadline_s,
             "--poll": req.poll_s, "--steps": req.steps, "runner options": req.runner_args or None,
             "partitions": {**journal.partitions, **req.partitions} if req.partitions else None}
    recorded = {"plan": journal.plan_file, "--backend": journal.backend, "--policy": journal.policy,
                "--trace": journal.trace, "--reclaim-trace": journal.trace, "--time-scale": journal.time_scale,
                "--notice": journal.notice_s, "--deadline": journal.deadline_s, "--poll": journal.poll_s,
                "--steps": journal.steps, "runner options": journal.runner_args or None,
                "partitions": journal.partitions}
    return [f"{name} {value} (the journal: {recorded[name]})" for name, value in given.items()
            if value is not None and value != recorded[name]]


def plan_figures(plan: Plan, steps: int | None) -> PlanFigures:
    p, c = plan.prediction, plan.checkpoint
    return PlanFigures(total_steps=steps or plan.job_steps, step_s=p.step_time_s,
                   start_s=p.startup_s or p.restart_s or 0.0, checkpoint_s=p.checkpoint_save_s or 0.0,
                   checkpoint_stall_s=p.checkpoint_stall_s if c.async_ and p.checkpoint_stall_s else None,
                   interval_s=c.interval_s, restart_s=p.restart_s or 0.0,
                   unseen_step=unseen_step_factor(plan.profile.source))


def plan_prices(path: str, plan: Plan) -> Prices:
    r = plan.resources
    if not r.price_per_node_h:
        raise InputError(path, "resources.price_per_node_h", "missing: the bill needs the plan's prices")
    billing = r.billing or Billing()
    return Prices(per_node_h=dict(r.price_per_node_h), nodes=r.nodes, increment_s=billing.increment_s,
                  minimum_s=billing.minimum_s, currency=r.currency or "USD")


def check_policy(path: str, plan: Plan, policy: str, backend_markets: tuple[str, ...], backend: str) -> None:
    if policy not in policies.POLICIES:
        raise InputError("--policy", "policy", f"unknown {policy!r}; allowed: {', '.join(sorted(policies.POLICIES))}")
    needed = policies.POLICY_MARKETS[policy]
    priced = set(plan.resources.price_per_node_h or {})
    missing = [m for m in needed if m not in priced]
    if missing:
        raise InputError(path, "resources.price_per_node_h", f"policy {policy} needs {', '.join(needed)}; offering "
                         f"{plan.resources.offering} sells {', '.join(sorted(priced)) or 'nothing'}")
    unsupported = [m for m in needed if m not in backend_markets]
    if unsupported:
        raise InputError("--backend", "backend", f"{backend} has no {', '.join(unsupported)} market "
                         f"(it has {', '.join(backend_markets)}); policy {policy} needs it")


def open_session(req: Request, say) -> tuple[Controller, Journal, Lock, dict]:
    """Check everything, take the run folder's lock, and build the controller; nothing is started
    before every check has passed. A folder with a journal is picked up where it was."""
    run_dir = Path(req.run_dir or Path("runs") / f"control-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    existing = Journal.load(run_dir) if (run_dir / "control.json").exists() else None
    if existing is not None and existing.status == "running" and (disagree := disagreements(req, existing)):
        raise InputError(str(run_dir / "control.json"), "journal", f"this run was started with other settings: "
                         f"{'; '.join(disagree)}; leave them out to pick it up as it was, or give another --run-dir")
    plan_path = existing.plan_file if existing else str(Path(req.plan).resolve())
    plan = Plan.read(plan_path)
    backend_name = existing.backend if existing else (req.backend or DEFAULT_BACKEND)
    if backend_name not in BACKENDS:
        raise InputError("--backend", "backend", f"unknown {backend_name!r}; allowed: {', '.join(BACKENDS)}")
    policy = existing.policy if existing else (req.policy or plan.policy.name)
    trace_path = existing.trace if existing else (req.trace if backend_name == "local" else req.reclaim_trace)
    capacity = TraceCapacity(*load_gang_trace(trace_path, plan.resources.nodes)) if trace_path else None
    grace_s = None
    partitions = (existing.partitions if existing and existing.partitions else req.partitions) or None
    if backend_name == "slurm":
        from costsim.control.slurm import PARTITIONS, SlurmBackend, check_slurm
        partitions = {**PARTITIONS, **(partitions or {})}
        grace_s = check_slurm(reclaim=capacity is not None, partitions=partitions)
    uses_spot = SPOT in policies.POLICY_MARKETS.get(policy, ())
    if backend_name == "local" and uses_spot and capacity is None:
        raise InputError("--trace", "trace", f"policy {policy} uses spot: the local backend needs a capacity trace "
                         "(the simulator's format) for spot to come and go")
    markets = (LocalBackend.markets_for(capacity) if backend_name == "local" else SlurmBackend.markets)
    check_policy(plan_path, plan, policy, markets, backend_name)
    prices = plan_prices(plan_path, plan)
    time_scale = req.time_scale or DEFAULT_TIME_SCALE
    run_id = existing.run_id if existing else f"control-{os.getpid()}-{int(time.time())}"
    if backend_name == "local":   # the runner runs on this host: what it would refuse, refused before any bill
        check_runner(Path(plan_path), run_dir, run_id, plan.resources.market,
                     existing.runner_args if existing else list(req.runner_args))
    lock = Lock(run_dir)
    lock.acquire()
    if existing is None:
        if grace_s is not None:   # Slurm gives the notice: its GraceTime, in wall seconds
            notice = grace_s * time_scale
        else:
            notice = req.notice_s if req.notice_s is not None else (plan.resources.spot_notice_s or 0.0)
        deadline = req.deadline_s
        if deadline is None:   # the plan's deadline is wall time for its job, like its step times: scaled alike
            deadline = plan.policy.deadline_s * time_scale
            if time_scale != 1.0:
                say(f"costsim control: deadline {deadline / 3600:.2f} h of trace time: the plan's "
                    f"{format_duration(plan.policy.deadline_s)} x --time-scale {time_scale:g} (--deadline sets another)")
        journal = Journal(plan_file=plan_path, policy=policy, backend=backend_name, offering=plan.resources.offering,
                          deadline_s=deadline, time_scale=time_scale,
                          notice_s=notice, t0=time.time(), trace=str(Path(trace_path).resolve()) if trace_path else None,
                          run_id=run_id, runner_args=list(req.runner_args),
                          steps=req.steps, poll_s=req.poll_s or DEFAULT_POLL_S, partitions=partitions or {})
        journal.save(run_dir)
    else:
        journal = existing
        say(f"costsim control: picking up {run_dir} (policy {journal.policy}, {journal.backend}, "
            f"{len(journal.instances)} instance(s) so far)")
    clock = Clock(journal.t0, journal.time_scale)
    backend: Backend
    if backend_name == "local":
        jobs = Processes(plan=Path(plan_path), run_dir=run_dir, run_id=journal.run_id, runner_args=journal.runner_args)
        backend = LocalBackend(capacity, jobs, notice_s=journal.notice_s)
    else:
        r = plan.resources
        backend = SlurmBackend(capacity, plan=Path(plan_path), run_dir=run_dir, run_id=journal.run_id,
                               runner_args=journal.runner_args, partitions=journal.partitions or None,
                               size=(r.gpu, r.gpus_per_node, r.nodes))
    folder = RunFolder(run_dir)
    figures = plan_figures(plan, journal.steps)
    controller = Controller(journal, backend, folder, clock, policies.get(policy), figures, run_dir=run_dir,
                            poll_s=journal.poll_s * journal.time_scale,
                            horizon_s=4.0 * max(journal.deadline_s, figures.total_steps * figures.step_s
                                                * journal.time_scale), say=say)
    if existing is not None:
        adopt(controller, clock.now(), say)
    return controller, journal, lock, {"prices": prices, "run_dir": run_dir, "nodes": plan.resources.nodes}


def adopt(controller: Controller, t: float, say) -> None:
    """After a restart: an instance the journal left open is either still held (its job running, or
    a spot instance waiting for its reclaim: kept, never a second copy) or gone (closed once: at the
    reclaim, else when its job's runner exited, else the last time the journal vouched for it)."""
    j = controller.j
    current = j.current
    if current is None or j.status != "running":
        return
    status = controller.backend.poll(current.handle, t)
    if not status.ended:
        say(f"costsim control: the {current.market} instance started at t={current.start_s / 3600:.2f} h is still "
            "held: keeping it")
        return
    progress = controller.folder.observe()
    exits = [x for x in map(controller.clock.trace, progress.exits) if x >= current.start_s]
    end = status.end_s if status.end_s is not None else (min(exits) if exits else j.updated_s)
    current.end_s = round(max(current.start_s, end), 3)
    ended = ended_as(status, done=progress.done, stopping=current.handle.get("stopping") is not None)
    current.ended = "lost" if ended == "failed" and status.exit_code is None else ended   # unwatched: not known
    say(f"costsim control: the {current.market} instance started at t={current.start_s / 3600:.2f} h ended while "
        f"no controller watched it: billed to t={current.end_s / 3600:.2f} h")
    j.save(controller.run_dir)


def finish(controller: Controller, journal: Journal, context: dict) -> dict:
    """The bill, the simulator's prediction for the same capacity and measured figures, the errors."""
    prices, run_dir = context["prices"], context["run_dir"]
    progress = controller.folder.observe()
    m = controller.measured(progress)
    timeline: TraceTimeline | ObservedTimeline
    if journal.trace:
        timeline = TraceTimeline(*load_gang_trace(journal.trace, context["nodes"]))
    else:
        timeline = ObservedTimeline(journal.outages, journal.end_s or journal.updated_s)
    # On Slurm the notice (SIGTERM) comes when the outage begins, not GraceTime before it: the job
    # has just its emergency save before capacity is gone.
    notice_s = m.checkpoint_s if journal.backend == "slurm" else journal.notice_s
    steps = controller.plan.total_steps
    stints = stint_dynamics(journal, progress, controller.clock, m)
    hindsight = predict(journal, controller.policy, timeline, m, total_steps=steps, prices=prices, notice_s=notice_s,
                        stints=stints)
    known = predict_as_known(journal, controller.policy, timeline, m, total_steps=steps, prices=prices,
                             notice_s=notice_s, stints=stints)
    band = plan_band(Plan.read(journal.plan_file), journal.policy, journal, total_steps=steps,
                     time_scale=journal.time_scale, prices=prices)
    journal.report = {**summary(journal, prices, known, hindsight, band),
                      "measured": {"step_s": m.step_s, "start_s": m.start_s, "resume_s": m.resume_s,
                                   "checkpoint_s": m.checkpoint_s,
                                   "checkpoint_stall_s": m.checkpoint_stall_s, "interval_s": m.interval_s,
                                   "release_s": m.release_s,
                                   "decisions": controller.decisions}}
    journal.save(run_dir)
    return journal.report
