"""The controller: carry out a plan's market policy while the job runs.

It asks the policy the simulator asks (costsim.policies, a pure function of a `View`) at the same
moments the simulated job does: when idle, once a newly started instance makes progress, and at the
time the policy asked to be woken; and, where the backend cannot say in advance when spot capacity
comes back (a real scheduler), whenever capacity comes or goes. The `View` is built from
the run folder (steps done, the last complete checkpoint) and the figures this run measured (step
time, what a start and a restart cost, checkpoint saves), in trace time. The backend starts and stops
instances and says what capacity there is; the runner alone trains.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from costsim import checkpoint as ckpt
from costsim.contract.telemetry import announce_move
from costsim.contract.timing import WARMUP_STEPS, exit_s, start_cost_s
from costsim.control.backend import Backend
from costsim.control.journal import Instance, Journal
from costsim.control.progress import Progress, RunFolder
from costsim.policies import SPOT, Decision, Figures, Policy, View, build_view, need_from_idle, need_on_spot

_EPS = 1e-6
PROGRESS_EVERY_S = 30.0  # wall seconds between progress lines on stderr
UNSEEN_RESTART = 2.0     # a restart not yet measured is taken as this many times its estimate (the margin)
# A step time not yet measured is taken at this many times the plan's, by where the plan's figure came from
# (its profile entry's source): a measurement of this configuration, a figure scaled from another GPU, or an
# estimate made before any measurement (the tiny drill's ran 2.4x slower here than its estimate said).
UNSEEN_STEP = {"measured": 1.25, "derived": 1.5, "estimated": 3.0}
STEP_QUANTILE = 0.9      # the margin's step time: this quantile of the recent steady steps' block means
REFIGURE = 0.01          # ask the policy again when its need moved by this share of the time left
STOP_TIMEOUT_S = 600.0   # wall seconds a job asked to leave has to checkpoint and exit (SDXL: about 40)


class Clock:
    """Trace time: seconds since `t0` (epoch) times `scale`."""

    def __init__(self, t0: float, scale: float):
        self.t0, self.scale = t0, scale

    def now(self) -> float:
        return (time.time() - self.t0) * self.scale

    def wall(self, t: float) -> float:
        """The epoch time of trace time t."""
        return self.t0 + t / self.scale

    def trace(self, epoch: float) -> float:
        """The trace time of an epoch time."""
        return (epoch - self.t0) * self.scale

    def sleep_until(self, t: float) -> None:
        delay = (t - self.now()) / self.scale
        if delay > 0:
            time.sleep(delay)


@dataclass(frozen=True, kw_only=True)
class PlanFigures:
    """The job's figures before this run measured its own (the plan's), in wall seconds."""

    total_steps: int
    step_s: float
    start_s: float            # a first start: to the first step
    checkpoint_s: float
    checkpoint_stall_s: float | None   # async checkpoints: the stall
    interval_s: float         # between periodic checkpoints (the runner's clock)
    restart_s: float = 0.0    # a restart from a checkpoint (the plan's): the floor until one is measured
    release_s: float = 0.0    # the job's exit after its last save, until one is measured
    unseen_step: float = UNSEEN_STEP["estimated"]   # the step time's margin until one is measured


def unseen_step_factor(source: str | None) -> float:
    """UNSEEN_STEP for a profile entry's source ("measured (2026-11-30, ...)", "derived (...)",
    "estimated"); a source that says none of these counts as an estimate."""
    match = re.match(r"\W*([a-z]+)", (source or "").lower())
    return UNSEEN_STEP.get(match.group(1) if match else "", UNSEEN_STEP["estimated"])


@dataclass(frozen=True)
class Measured:
    """The figures in force now (measured where the run has them: means), in trace seconds."""

    step_s: float
    resume_s: float          # what a restart costs: to the end of its warm-up, its checkpoint load included
    checkpoint_s: float
    checkpoint_stall_s: float | None
    interval_s: float
    release_s: float = 0.0   # the job's exit: from its last save to the instance's release
    start_s: float | None = None   # what the first start cost (no checkpoint to load); None: as a restart
    step_high_s: float | None = None   # a high quantile of recent step times (the margin's)
    restart_seen: bool = False         # whether a restart has been measured (else the figure is a guess)
    step_seen: bool = True             # whether a steady step has been measured (else step_s is the plan's)
    unseen_step: float = 1.0           # the margin's factor on step_s while it is not measured

    @property
    def paid_checkpoint_s(self) -> float:
        return ckpt.paid_checkpoint_s(self.checkpoint_s, self.checkpoint_stall_s)

    def figures(self, total_steps: int, steps_left: float, notice_s: float, with_margin: bool = True) -> Figures:
        """The policies' record of figures (costsim.policies.Figures), with a margin for what is not
        known: the steps left at a high quantile of the step times so far (at `unseen_step` times the
        plan's while none is measured), and an unseen restart at UNSEEN_RESTART times its estimate."""
        first = self.resume_s if self.start_s is None else min(self.start_s, self.resume_s)
        restart = max(0.0, self.resume_s - first)
        margin = 0.0
        if with_margin:
            margin = steps_left * max(0.0, (self.step_high_s or self.step_s) - self.step_s)
            if not self.step_seen:
                margin += steps_left * self.step_s * max(0.0, self.unseen_step - 1.0)
            if not self.restart_seen:
                margin += (UNSEEN_RESTART - 1.0) * self.resume_s
        return Figures(work_total_s=total_steps * self.step_s, changeover_s=first, restart_s=restart,
                       release_s=self.release_s, checkpoint_s=self.checkpoint_s,
                       checkpoint_stall_s=self.checkpoint_stall_s, interval_s=self.interval_s, notice_s=notice_s,
                       margin_s=margin)


def measured(progress: Progress, plan: PlanFigures, scale: float, *, resumes: Sequence[float] = (),
             releases: Sequence[float] = ()) -> Measured:
    """Wall-clock figures from the run folder (else the plan's) in trace seconds; `resumes` (what
    each start cost, the first start first) and `releases` are already in trace seconds."""
    step = progress.recent_step_s() or plan.step_s
    high = progress.step_quantile_s(STEP_QUANTILE)
    save = progress.mean_save_s() or plan.checkpoint_s
    stall = None if plan.checkpoint_stall_s is None else (progress.mean_stall_s() or plan.checkpoint_stall_s)
    first = resumes[0] if resumes else (progress.mean_first_step_s() or plan.start_s) * scale
    if len(resumes) > 1:
        resume = sum(resumes[1:]) / len(resumes[1:])
    else:   # a restart loads a checkpoint that a first start does not: the plan's figure until one is seen
        resume = max(first, plan.restart_s * scale)
    return Measured(step_s=step * scale, resume_s=resume, start_s=first, checkpoint_s=save * scale,
                    checkpoint_stall_s=None if stall is None else stall * scale, interval_s=plan.interval_s * scale,
                    release_s=sum(releases) / len(releases) if releases else plan.release_s * scale,
                    step_high_s=None if high is None else max(high, step) * scale, restart_seen=len(resumes) > 1,
                    step_seen=bool(progress.step_times), unseen_step=plan.unseen_step)


def ran(journal: Journal) -> list[Instance]:
    """The instances on which the job ran: every one but the requests withdrawn before they ran (Slurm)."""
    return [i for i in journal.instances if i.ended != "withdrawn"]


def resume_times(journal: Journal, progress: Progress, clock, step_s: float) -> list[float]:
    """What each start cost, trace seconds: from the instance's start (the runner's own start-up, on
    Slurm the scheduling, included) to the end of its warm-up steps, less as many steady steps
    (`step_s`, trace), as calibrate prices a restart; to the first step where the warm-up did not end."""
    firsts = sorted(clock.trace(t) for t in progress.first_step_at)
    warms = sorted(clock.trace(t) for t in progress.warm_at)
    out = []
    for instance in journal.instances:
        end = instance.end_s if instance.end_s is not None else math.inf
        warm = next((w for w in warms if instance.start_s <= w <= end), None)
        first = next((f for f in firsts if instance.start_s <= f <= end), None)
        if warm is not None:
            out.append(start_cost_s(instance.start_s, warm, WARMUP_STEPS, step_s))
        elif first is not None:
            out.append(first - instance.start_s)
    return out


def unfinished_start_s(journal: Journal, t: float | None) -> float:
    """The longest start that never got to a step (an instance reclaimed during its start-up, or the one
    starting now at trace time t): a start costs at least that, whatever the estimate says."""
    spans = []
    for i in journal.instances:
        if i.handle.get("progressing") or i.ended not in (None, "preempted", "lost"):
            continue   # it got going, or left on the controller's word (a move), or never ran (withdrawn)
        end = i.end_s if i.end_s is not None else t
        if end is not None:
            spans.append(end - i.start_s)
    return max(spans, default=0.0)


def stint_dynamics(journal: Journal, progress: Progress, clock, m: Measured) -> tuple[tuple[float, float], ...]:
    """What each instance really cost, in order, for a replay (costsim.sim.job.JobParams.stints): its
    start (resume_times; the mean where it never got going) and its steady step time over the mean."""
    step_s = m.step_s / journal.time_scale
    starts = iter(resume_times(journal, progress, clock, m.step_s))
    out = []
    for instance in ran(journal):   # a withdrawn request (nothing ran) is no stint of the simulated job
        end = instance.end_s if instance.end_s is not None else math.inf
        times = [d for d, t in zip(progress.step_times, progress.step_ends)
                 if instance.start_s <= clock.trace(t) <= end]
        progressed = any(instance.start_s <= clock.trace(t) <= end for t in progress.first_step_at)
        start = next(starts) if progressed else None
        out.append((m.resume_s if start is None else start, statistics.fmean(times) / step_s if times else 1.0))
    return tuple(out)


def release_times(journal: Journal, progress: Progress, clock) -> list[float]:
    """The job's exit on each instance it left (costsim.contract.timing.exit_s), trace seconds: from its
    last save (the final one before `end`, or the save the controller's move asked for) to the release."""
    out = []
    saves = sorted(clock.trace(t) for t in progress.notice_saved_at)
    for instance in journal.instances:
        if instance.end_s is None:
            continue
        if instance.ended == "stopped" and instance.handle.get("stopping") is not None:
            stopping = instance.handle["stopping"]
            saved = [t for t in saves if stopping <= t <= instance.end_s]
            out.append(exit_s(saved[-1] if saved else stopping, instance.end_s))
        elif instance.ended == "finished" and progress.end_t is not None:
            out.append(exit_s(clock.trace(progress.end_t), instance.end_s))
    return out


# How an instance ended, from the backend's status, the job's telemetry and the controller's own asking,
# in this order: the first rule that holds. The runner's exit statuses are the contract's (README):
# 0 done, 75 left on a notice after its checkpoint.
EXIT_DONE, EXIT_NOTICE = 0, 75


def ended_as(status, *, done: bool, stopping: bool) -> str:
    """finished | withdrawn | preempted | stopped | failed (costsim.control.journal.Instance.ended)."""
    if done or status.exit_code == EXIT_DONE:
        return "finished"
    if status.withdrawn:
        return "withdrawn"
    if status.preempted:
        return "preempted"
    if stopping:
        return "stopped"
    if status.exit_code == EXIT_NOTICE:   # a notice we did not give (the scheduler's, an admin's): its market's
        return "preempted"
    return "failed"


class Controller:
    def __init__(self, journal: Journal, backend: Backend, folder: RunFolder, clock: Clock, policy: Policy,
                 plan: PlanFigures, *, run_dir: Path, poll_s: float, horizon_s: float,
                 say: Callable[[str], None] | None = None, margin: bool = True):
        self.j, self.backend, self.folder, self.clock = journal, backend, folder, clock
        self.policy, self.plan, self.run_dir = policy, plan, run_dir
        self.margin = margin          # off only where the figures are exact (the decisions test's virtual job)
        self.poll_s, self.horizon_s = poll_s, horizon_s
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.decision: Decision | None = None
        self._decided_need: float | None = None   # the policies' need at the last decision (_figures_moved)
        self.decisions = 0            # policy calls (the benchmark's count)
        self._spot: bool | None = None
        self._last_save = -math.inf
        self._last_said = 0.0

    def measured(self, progress: Progress, t: float | None = None) -> Measured:
        """The figures in force: this run's so far, else the plan's; a start is taken to cost at least
        as long as any start that has not got going yet (one preempted first, or the one under way at t)."""
        step_s = (progress.mean_step_s() or self.plan.step_s) * self.j.time_scale
        resumes = resume_times(self.j, progress, self.clock, step_s)
        m = measured(progress, self.plan, self.j.time_scale, resumes=resumes,
                     releases=release_times(self.j, progress, self.clock))
        floor = unfinished_start_s(self.j, t)
        if floor > m.resume_s:
            m = replace(m, resume_s=floor, start_s=max(floor, m.start_s or 0.0))
        return m

    # -- the View ---------------------------------------------------------------------------
    def live_step(self, t: float, progress: Progress, instance: Instance | None) -> float:
        """Steps done: the last reported, plus what the running job has done since at its step time
        (the runner reports steps about once a second)."""
        step = float(progress.step)
        if instance is not None and instance.handle.get("progressing") and progress.step_t is not None:
            since_s = max(0.0, t - self.clock.trace(progress.step_t)) / self.j.time_scale
            step += since_s / (progress.mean_step_s() or self.plan.step_s)
        return min(step, float(self.plan.total_steps))

    def view(self, t: float, progress: Progress, running: str | None) -> View:
        """The policy's View, built as the simulator builds it (costsim.policies.build_view), from the
        figures measured so far and a margin for their spread."""
        m = self.measured(progress, t)
        live = self.live_step(t, progress, self.j.current)
        figures = m.figures(self.plan.total_steps, self.plan.total_steps - live, self.j.notice_s, self.margin)
        return build_view(figures, t=t, deadline_s=self.j.deadline_s, live_work_s=live * m.step_s,
                          durable_work_s=min(float(progress.checkpoint_step), live) * m.step_s, running=running,
                          spot_available_at=self.backend.spot_available_at(t))

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> Journal:
        """Until the job is done, fails, or can no longer go on; returns the journal (saved)."""
        j = self.j
        ask = True
        while j.status == "running":
            t = self.clock.now()
            current = j.current
            self.backend.duties(t, current.handle if current else None)
            # The job first, then its telemetry: a job seen to have ended has written all it will write
            # (read the other way round, a job that finished in between looked like one that failed).
            status = self.backend.poll(current.handle, t) if current is not None else None
            progress = self.folder.observe()
            changed = self._capacity(t)
            ask = ask or (changed and not self.backend.foresight)   # else the View already said when
            if current is not None and status is not None:
                if status.ended:
                    self._release(current, t, status, progress)
                    ask = changed = True
                elif not current.handle.get("progressing") and self._progressing(current, progress):
                    current.handle["progressing"] = True
                    ask = changed = True
                elif t - current.handle.get("stopping", math.inf) > STOP_TIMEOUT_S * j.time_scale \
                        and "killed" not in current.handle:
                    self.say(f"costsim control: the job did not leave {current.market} within {STOP_TIMEOUT_S:.0f} s "
                             "of being asked: killing it (it resumes from its last complete checkpoint)")
                    current.handle["killed"] = round(t, 3)
                    self.backend.kill(current.handle)
            current = j.current
            if j.status != "running":
                break
            if progress.done and current is None:
                j.status, j.end_s = "done", t
                break
            if t > self.horizon_s:
                self.say(f"costsim control: giving up at t={t / 3600:.2f} h (past 4x the deadline) without finishing")
                self._give_up(t)
                break
            # As in the simulator, no decisions during a start-up, a move, or a notice (the job is leaving).
            can_ask = current is None or bool(current.handle.get("progressing") and "stopping" not in current.handle
                                               and "noticed" not in current.handle)
            due = self.decision is None or t >= self.decision.reconsider_at - _EPS
            # The policy's wake-up time was set on the figures of its last decision; figures measured
            # since (a slower machine, a dearer restart) can bring it forward: ask again when they moved.
            due = due or (can_ask and self._figures_moved(t, progress))
            acted = False
            if can_ask and (ask or due):
                acted = self._decide(t, progress)
                ask, changed = False, True
                if self._stranded(t):
                    self.say("costsim control: the policy waits for spot capacity that will not come back "
                             "(the trace has ended)")
                    self._give_up(t)
                    break
            if changed or t - self._last_save >= 30.0 * j.time_scale:
                j.updated_s = round(t, 3)
                j.save(self.run_dir)
                self._last_save = t
            if t - self._last_said >= PROGRESS_EVERY_S * j.time_scale:
                self._last_said = t
                self.say(f"costsim control: t={t / 3600:.2f} h of {j.deadline_s / 3600:.2f} h: "
                         f"{current.market if current else 'idle'}, step {progress.step}/{self.plan.total_steps} "
                         f"(checkpoint {progress.checkpoint_step}), {len(j.instances)} instance(s) so far")
            if acted:   # look again at once: a job asked to leave may already have left
                continue
            wake = min(t + self.poll_s, self.backend.next_due(t, current.handle if current else None))
            if self.decision is not None and can_ask and self.decision.reconsider_at > t + _EPS:
                wake = min(wake, self.decision.reconsider_at)
            self.clock.sleep_until(wake)
        j.updated_s = round(self.clock.now(), 3)
        j.save(self.run_dir)
        return j

    def _stranded(self, t: float) -> bool:
        d = self.decision
        return (self.j.current is None and d is not None and d.market is None and not math.isfinite(d.reconsider_at)
                and not self.backend.spot_available(t) and not math.isfinite(self.backend.next_due(t, None)))

    def _capacity(self, t: float) -> bool:
        spot = self.backend.spot_available(t)
        if spot == self._spot:
            return False
        if self._spot is not None or not spot:
            (self.j.close_outage if spot else self.j.open_outage)(t)
        self._spot = spot
        return True

    def _progressing(self, instance: Instance, progress: Progress) -> bool:
        """The instance's job has trained a step since it started (what ends the simulator's start-up): its
        `start` event, before the first (compiling) step, is not progress yet."""
        return progress.stepped_t is not None and progress.stepped_t >= self.clock.wall(instance.start_s) - 1e-3

    def _figures_moved(self, t: float, progress: Progress) -> bool:
        """Whether what committing to on-demand would cost (the policies' need) moved by more than
        REFIGURE of the time left since the last decision's figures."""
        if self._decided_need is None:
            return False
        running = self.j.current.market if self.j.current is not None else None
        need = self._need(self.view(t, progress, running))
        return abs(need - self._decided_need) > REFIGURE * max(self.j.deadline_s - t, 1.0)

    @staticmethod
    def _need(view: View) -> float:
        return need_on_spot(view) if view.running == SPOT else need_from_idle(view)

    def _decide(self, t: float, progress: Progress) -> bool:
        """Ask the policy and carry out its answer; True when an instance was asked to leave."""
        current = self.j.current
        running = current.market if current is not None else None
        spot_now = self.backend.spot_available(t)
        view = self.view(t, progress, running)
        self.j.know(t, asdict(view.figures))
        self._decided_need = self._need(view)
        decision = self.policy(view)
        self.decisions += 1
        self.decision = decision
        reason = decision.reason or ("waiting" if decision.market is None else f"on {decision.market}")
        margin = view.figures.margin_s
        if decision.market == running:
            self.j.decide(t, running, reason, margin)
            return False
        if current is not None:       # move: the job checkpoints and leaves; the next start comes when it has
            current.handle["stopping"] = round(t, 3)
            # said first: the SIGTERM the runner gets is a move, which its exit records as one, not a reclaim
            announce_move(self.run_dir, from_market=current.market, to_market=decision.market, reason=reason)
            self.backend.stop(current.handle)
            self.j.decide(t, decision.market, reason, margin)
            self.say(f"costsim control: t={t / 3600:.2f} h: leaving {running} for {decision.market or 'idle'} ({reason})")
            return True
        if decision.market == SPOT and not spot_now:
            raise RuntimeError(f"policy chose spot at t={t} with no spot capacity")
        if decision.market not in self.backend.markets:
            raise RuntimeError(f"the {self.backend.name} backend has no {decision.market} market")
        handle = self.backend.start(decision.market, t)
        self.j.instances.append(Instance(offering=self.j.offering, market=decision.market, start_s=round(t, 3),
                                         handle=handle))
        self.j.decide(t, decision.market, reason, margin)
        self.say(f"costsim control: t={t / 3600:.2f} h: started on {decision.market} ({reason}); "
                 f"step {progress.step}/{self.plan.total_steps}")
        return False

    def _release(self, instance: Instance, t: float, status, progress: Progress) -> None:
        end = status.end_s if status.end_s is not None else t
        instance.end_s = round(max(end, instance.start_s), 3)
        instance.handle.setdefault("exit_code", status.exit_code)
        ended = ended_as(status, done=progress.done, stopping=instance.handle.get("stopping") is not None)
        instance.ended = ended
        if ended == "failed":
            self.j.status, self.j.end_s = "failed", t
            self.say(f"costsim control: the job failed on {instance.market} (runner exit {status.exit_code}); "
                     f"see {self.backend.log_of(instance.handle)}")
        if instance.ended == "preempted":
            self.say(f"costsim control: t={t / 3600:.2f} h: {instance.market} instance preempted at step "
                     f"{progress.step} (checkpoint {progress.checkpoint_step})")
        self.decision = None

    def _give_up(self, t: float) -> None:
        """Stop where things are: the job checkpoints and leaves, its instance is released now."""
        current = self.j.current
        if current is not None:
            self.backend.stop(current.handle)
            current.end_s, current.ended = round(t, 3), "stopped"
        self.j.status, self.j.end_s = "stranded", round(t, 3)
