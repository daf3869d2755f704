"""One training job in SimPy: provision, restore, work segments, checkpoints, preemptions.

The job asks its policy which market to be on, runs an instance there in segments of work that end
at a checkpoint, a decision or the end of the work, and loses whatever was not checkpointed when a
preemption strikes. A spot reclaim arrives as `simpy.Interrupt` at the notice time; within the notice
window an emergency checkpoint is written by the runner's rule (costsim.contract.notice).
Costs are read off the instance log afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import simpy

from costsim import checkpoint as ckpt
from costsim.contract import notice as notice_rule
from costsim.policies import SPOT, Decision, Figures, Policy, View, build_view
from costsim.sim.market import Timeline

_EPS = 1e-6


@dataclass(frozen=True, kw_only=True, slots=True)
class JobParams:
    """Everything one simulated job needs, in seconds of wall time."""

    work_s: float                  # compute time of the whole job on this configuration
    deadline_s: float
    checkpoint_interval_s: float   # compute between periodic checkpoints
    checkpoint_s: float            # time to write one checkpoint (the training stall when sync)
    checkpoint_stall_s: float | None = None   # async: the stall; the write runs behind it
    restart_s: float = 0.0         # process start, rendezvous, checkpoint load (not on first start)
    changeover_s: float = 0.0      # from starting an instance until the job can start up on it
    notice_s: float = 0.0          # warning before a spot reclaim
    release_s: float = 0.0         # from leaving an instance (a move, or the end) to its release: the job's exit
    horizon_s: float = math.inf    # give up (unfinished) after this
    notice_save: str = notice_rule.AUTO   # the runner's rule at a notice (plan.json checkpoint.notice_save)
    # A replay of a real run (costsim control's as-known prediction): per stint in order, its start-up and
    # its step time over the mean's (the stints after these use the figures above)
    stints: tuple[tuple[float, float], ...] = ()
    # relative sd of the job's mean step time from run to run: each Monte Carlo trial draws its own speed
    # (costsim.montecarlo), so that the plan's band carries it; 0 = the figures exactly
    speed_spread: float = 0.0

    @property
    def paid_checkpoint_s(self) -> float:
        """What a periodic checkpoint costs training: the async stall, else the synchronous write."""
        return ckpt.paid_checkpoint_s(self.checkpoint_s, self.checkpoint_stall_s)

    @property
    def figures(self) -> Figures:
        """What a policy knows of this job: its figures, exactly (the simulator has no spread to allow for)."""
        return Figures(work_total_s=self.work_s, changeover_s=self.changeover_s, restart_s=self.restart_s,
                       release_s=self.release_s, checkpoint_s=self.checkpoint_s,
                       checkpoint_stall_s=self.checkpoint_stall_s, interval_s=self.checkpoint_interval_s,
                       notice_s=self.notice_s)


@dataclass(slots=True)
class Stint:
    """One instance (or gang) held on one market, from acquisition to release."""

    market: str
    start_s: float
    end_s: float = math.nan


@dataclass(slots=True)
class JobRecord:
    """What happened in one trial."""

    stints: list[Stint] = field(default_factory=list)
    log: list[tuple[float, str, str]] = field(default_factory=list)
    finished_s: float = math.inf
    preemptions: int = 0
    lost_work_s: float = 0.0


class Notice(Exception):
    """Cause of the interrupt: the instance will be reclaimed at `reclaim_at`."""

    def __init__(self, reclaim_at: float):
        super().__init__(reclaim_at)
        self.reclaim_at = reclaim_at


class Job:
    """The job process and its state; `record` holds the outcome."""

    def __init__(self, env: simpy.Environment, params: JobParams, policy: Policy,
                 spot: Timeline, record_log: bool = False, fast_forward: bool = True):
        self.env, self.p, self.policy, self.spot = env, params, policy, spot
        self.figures = params.figures
        self.record = JobRecord()
        self.record_log = record_log
        # Runs of whole async checkpoint cycles (work an interval, stall) in one timeout each (_cycles); not
        # with a log, which records every checkpoint at its time
        self.fast_forward = fast_forward and not record_log
        self.durable_s = 0.0      # work saved in a complete checkpoint
        self.live_s = 0.0         # work done in the running process
        self.last_checkpoint_s = 0.0
        self.started_once = False
        self._phase: tuple[str, Any] = ("idle", None)   # work: its start time; checkpoint: (start, work)
        self._slowness = 1.0      # wall seconds per second of work on the current stint (JobParams.stints)
        self._pending: tuple[float, float] | None = None   # async write: (done at, work it saves)
        self.process = env.process(self.run())

    # -- helpers ---------------------------------------------------------------------------
    def _log(self, event: str, market: str = "") -> None:
        if self.record_log:
            self.record.log.append((round(self.env.now, 6), event, market))

    def _view(self, running: str | None) -> View:
        now = self.env.now
        self._settle(now)
        return build_view(self.figures, t=now, deadline_s=self.p.deadline_s, live_work_s=self.live_s,
                          durable_work_s=self.durable_s, running=running, spot_available_at=self.spot.next_available(now))

    def _decide(self, running: str | None) -> Decision:
        decision = self.policy(self._view(running))
        if decision.market == SPOT and not self.spot.available(self.env.now) and running != SPOT:
            raise RuntimeError(f"policy chose spot at t={self.env.now} with no spot capacity")
        return decision

    # -- the process -----------------------------------------------------------------------
    def run(self):
        """Top level: decide, then run on a market or wait, until all work is checkpointed."""
        while self.durable_s < self.p.work_s - _EPS:
            decision = self._decide(None)
            if decision.market is None:
                if decision.reconsider_at <= self.env.now + _EPS:
                    raise RuntimeError(f"policy waits until t={decision.reconsider_at}, not after "
                                       f"now={self.env.now}")
                wake_at = min(decision.reconsider_at, self.p.horizon_s)
                if not math.isfinite(wake_at) or wake_at <= self.env.now + _EPS:
                    self._log("stranded")   # no capacity ever again, or past the horizon
                    return
                self._log("wait")
                yield self.env.timeout(wake_at - self.env.now)
                continue
            yield from self._stint(decision.market)
        self.record.finished_s = self.env.now
        self._log("done")

    def _stint(self, market: str):
        stint = Stint(market=market, start_s=self.env.now)
        self.record.stints.append(stint)
        self._log("start", market)
        if market == SPOT:
            reclaim_at = self.spot.reclaim_time(self.env.now)
            if math.isfinite(reclaim_at):
                self.env.process(self._reclaim(stint, reclaim_at))
        try:
            yield from self._work_on(market)
            stint.end_s = self.env.now
        except simpy.Interrupt as interrupt:
            notice = interrupt.cause
            if not isinstance(notice, Notice):   # _reclaim's is the only interrupt
                raise
            yield from self._on_notice(notice.reclaim_at)
            stint.end_s = self.env.now
        self._log("release", market)

    def _reclaim(self, stint: Stint, reclaim_at: float):
        yield self.env.timeout(max(0.0, reclaim_at - self.p.notice_s - self.env.now))
        if math.isnan(stint.end_s) and self.process.is_alive:
            self.process.interrupt(Notice(reclaim_at))

    def _work_on(self, market: str):
        """Start up, then work in segments until done or the policy moves the job elsewhere.

        The policy is asked again only at the time it named or after a change it cannot foresee
        (a start, a preemption): its answers stay valid in between, which keeps events cheap.
        """
        env, p = self.env, self.p
        startup_s = p.changeover_s + (p.restart_s if self.started_once else 0.0)
        index = len(self.record.stints) - 1
        if index < len(p.stints):
            startup_s, self._slowness = p.stints[index]
        else:
            self._slowness = 1.0
        slowness = self._slowness   # wall seconds per second of work on this stint
        self._phase = ("startup", None)
        if startup_s > 0:
            yield env.timeout(startup_s)
        self.started_once = True
        self.live_s = self.durable_s
        self._log("progress", market)
        decision = self._decide(market)
        work_s, interval_s, stall_s = p.work_s, p.checkpoint_interval_s, p.checkpoint_stall_s
        timeout = env.timeout
        # a checkpoint cycle, fast-forwarded: work an interval, then save while training waits (blocking
        # saves), or stall while the write goes on beside the next interval (async: each write must be
        # done before the next stall)
        cycle_s = 0.0
        if self.fast_forward and interval_s > _EPS:
            if stall_s is None:
                cycle_s = interval_s * slowness + p.checkpoint_s
            elif p.checkpoint_s <= interval_s * slowness:
                cycle_s = interval_s * slowness + stall_s
        while self.durable_s < work_s - _EPS:
            now = env.now
            if now >= decision.reconsider_at - _EPS:
                decision = self._decide(market)
            if decision.market != market:
                yield from self._checkpoint(final=True)
                yield from self._release()
                return
            live = self.live_s
            to_checkpoint = self.last_checkpoint_s + interval_s - live
            to_end = work_s - live
            if cycle_s and to_checkpoint >= interval_s - _EPS:
                pending = self._pending
                # whole cycles that end before the policy's next look and leave work after them
                k = math.ceil((to_end - _EPS) / interval_s) - 1
                ahead = decision.reconsider_at - now - interval_s * slowness
                if ahead < math.inf:
                    k = min(k, int(ahead // cycle_s) + 1)
                if k >= 2 and (pending is None or pending[0] <= now + interval_s * slowness + _EPS):
                    yield from self._cycles(now, live, k, interval_s, slowness, cycle_s)
                    continue
            run_s = min(to_checkpoint, to_end, max(decision.reconsider_at - now, 0.0) / slowness)
            if run_s <= _EPS and to_checkpoint > _EPS and to_end > _EPS:
                run_s = min(to_checkpoint, to_end, 1.0)  # a wake-up time already due: make progress
            if run_s > _EPS:
                self._phase = ("work", now)
                yield timeout(run_s * slowness)
                self.live_s = live = live + run_s
            final = to_end - run_s <= _EPS
            if not final and to_checkpoint - run_s > _EPS:
                continue
            pending = self._pending
            if stall_s is None or final or (pending is not None and pending[0] > env.now + _EPS):
                yield from self._checkpoint(final=final)
                continue
            # The common case inline: an async save behind a short stall, the last write done.
            self._settle(env.now)
            self.last_checkpoint_s = live
            self._phase = ("stall", None)
            yield timeout(stall_s)
            self._pending = (env.now + p.checkpoint_s, live)
        yield from self._release()   # the work is done; the instance goes when the job has exited

    def _cycles(self, start: float, live: float, k: int, interval_s: float, slowness: float, cycle_s: float):
        """k cycles of (work an interval, checkpoint) in one timeout: what the loop in _work_on would do one
        event at a time when nothing can happen in between (the policy is not due, an async write ends
        before the next stall, a notice interrupts and `_unfold` says where in the cycles it fell)."""
        self._phase = ("cycles", (start, live, k, interval_s, slowness, cycle_s, self._pending))
        yield self.env.timeout(k * cycle_s)
        self._unfold(self.env.now, completed=True)

    def _unfold(self, t: float, completed: bool = False) -> None:
        if self.p.checkpoint_stall_s is None:
            self._unfold_blocking(t, completed)
        else:
            self._unfold_async(t)

    def _unfold_blocking(self, t: float, completed: bool) -> None:
        """The state the one-event-at-a-time loop would have at t within blocking-save cycles begun in
        `_cycles`: cycle i works from start + (i-1)C for the interval's wall time W, then saves until start
        + iC and banks its work there. A notice at a boundary sees the state before it (SimPy serves the
        interrupt first): at a work segment's end still working, at a save's end that save not yet banked."""
        start, live, k, interval_s, slowness, cycle_s, _ = self._phase[1]
        work_wall = interval_s * slowness
        if completed:
            self._bank(live + k * interval_s)
            self.live_s = self.last_checkpoint_s = live + k * interval_s
            self._phase = ("work", t)
            return
        j = max(0, math.ceil((t - start) / cycle_s - 1e-9) - 1)   # whole cycles before t
        if j >= 1:
            self._bank(live + j * interval_s)
        if t - start - j * cycle_s > work_wall + 1e-9:   # cycle j + 1's save
            self.live_s = self.last_checkpoint_s = live + (j + 1) * interval_s
            self._phase = ("checkpoint", (start + j * cycle_s + work_wall, self.live_s))
        else:                                            # cycle j + 1's work
            self.live_s = self.last_checkpoint_s = live + j * interval_s
            self._phase = ("work", start + j * cycle_s)

    def _unfold_async(self, t: float) -> None:
        """The state the one-event-at-a-time loop would have at t within the cycles begun in `_cycles`.
        Cycle i works from start + (i-1)C to b_i = that + the interval's wall time and stalls until
        start + iC. At a stall's start the loop banks the write before it (the one pending before the
        cycles at the first stall; cycle i's write, done by then, at stall i + 1); at its end the new write
        is pending. A notice at a boundary sees the state before it (SimPy serves the interrupt first)."""
        start, live, k, interval_s, slowness, cycle_s, before = self._phase[1]
        finished = t >= start + k * cycle_s - _EPS   # all k cycles done: after stall k
        j = k if finished else max(0, math.ceil((t - start) / cycle_s - 1e-9) - 1)   # whole cycles before t
        stalling = not finished and t - start - j * cycle_s > interval_s * slowness + 1e-9
        done = j + 1 if stalling else j        # intervals of work completed
        if done >= 1 and before is not None:
            self._bank(before[1])
        if done >= 2:
            self._bank(live + (done - 1) * interval_s)
        self.live_s = self.last_checkpoint_s = live + done * interval_s
        if finished:
            self._pending = (start + k * cycle_s + self.p.checkpoint_s, self.live_s)
            self._phase = ("stall", None)
        elif stalling:   # cycle j + 1's stall: its write not yet under way, the one before it banked
            self._pending = None
            self._phase = ("stall", None)
        else:            # cycle j + 1's work: cycle j's write pending (or, in the first, the one from before)
            self._pending = (start + j * cycle_s + self.p.checkpoint_s, self.live_s) if j >= 1 else before
            self._phase = ("work", start + j * cycle_s)

    def _release(self):
        """The job's exit after its last save: the instance is released when it ends."""
        if self.p.release_s > 0:
            self._phase = ("release", self.env.now + self.p.release_s)
            yield self.env.timeout(self.p.release_s)

    def _checkpoint(self, final: bool):
        """A periodic (or final) checkpoint of the live work; sync, or async behind a stall."""
        target = self.live_s
        self.last_checkpoint_s = target
        if target <= self.durable_s + _EPS:
            return
        pending = self._pending
        if pending is not None:   # the next save waits for the previous async write
            if pending[0] > self.env.now + _EPS:
                yield self.env.timeout(pending[0] - self.env.now)
            self._settle(self.env.now)
            if target <= self.durable_s + _EPS:   # that write was this checkpoint: nothing left to save
                return
        if self.p.checkpoint_stall_s is None or final:
            self._phase = ("checkpoint", (self.env.now, target))
            yield self.env.timeout(self.p.checkpoint_s)
            self._bank(target)
            return
        self._phase = ("stall", None)
        yield self.env.timeout(self.p.checkpoint_stall_s)
        self._pending = (self.env.now + self.p.checkpoint_s, target)

    def _settle(self, until_s: float) -> None:
        """Bank the async write if it has completed by `until_s` (it needs no process of its own)."""
        if self._pending is not None and self._pending[0] <= until_s + _EPS:
            self._bank(self._pending[1], at_s=self._pending[0])
            self._pending = None

    def _bank(self, work_s: float, at_s: float | None = None) -> None:
        if work_s > self.durable_s:
            self.durable_s = work_s
            if self.record_log:
                self.record.log.append((round(self.env.now if at_s is None else at_s, 6), "checkpoint", ""))

    def _on_notice(self, reclaim_at: float):
        """Preemption notice: write an emergency checkpoint if the runner's rule would (it lands before the
        reclaim and keeps more training than it takes), then lose the rest."""
        now, p = self.env.now, self.p
        self._log("notice")
        if self._phase[0] == "cycles":
            self._unfold(now)
        phase, detail = self._phase
        if phase == "release":   # the job has saved and is exiting: the reclaim only ends the exit early
            yield self.env.timeout(max(0.0, min(detail, reclaim_at) - now))
            return
        if phase == "work":
            self.live_s += (now - detail) / self._slowness
        # An async write in flight is finished first (the runner's save waits for the previous one): it
        # counts if it lands by the reclaim, and the emergency save can only start after it.
        free_at = max(now, self._pending[0]) if self._pending is not None else now
        self._settle(reclaim_at)
        if phase == "checkpoint" and detail[0] + self.p.checkpoint_s <= reclaim_at + _EPS:
            # a save's end that a fast-forward put a rounding error before now: it ends now
            yield self.env.timeout(max(0.0, detail[0] + self.p.checkpoint_s - now))
            self._bank(detail[1])
        elif free_at + p.checkpoint_s <= reclaim_at + _EPS and notice_rule.decide(
                redo_s=(self.live_s - self.durable_s) * self._slowness, save_s=p.checkpoint_s, wait_s=free_at - now,
                left_s=reclaim_at - now, mode=p.notice_save).save:
            yield self.env.timeout(free_at + self.p.checkpoint_s - now)
            self._bank(self.live_s)
        if reclaim_at > self.env.now:
            yield self.env.timeout(reclaim_at - self.env.now)
        self.record.preemptions += 1
        self.record.lost_work_s += max(0.0, self.live_s - self.durable_s)
        self.live_s = self.durable_s
        self.last_checkpoint_s = self.durable_s
        self._pending = None
        self._log("preempted", SPOT)
