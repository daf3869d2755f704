"""Recovery policies: pure functions from what the job knows now to which market to run on.

A policy is called whenever something changes (start, preemption, capacity back, a checkpoint, or
the time it asked to be woken at). It returns the market to be on (None = stay idle) and when to
ask again if nothing else happens first. Policies never touch SimPy, so the same function drives a
real job: the simulator and `costsim control` build the policy's `View` with the one function here,
`build_view`, from one record of figures (`Figures`), so that every field means the same in both.

The deadline-aware policies are safe: they never miss a deadline that on-demand could still meet at
the moment they decide, given every overhead in the figures. What committing to on-demand costs
from here (`need_*` below) counts the start-up and restart of a new instance, the work left and
the checkpoints on the way, the final save, the job's exit, and on spot the worse of a voluntary
move now (its save, an async write it waits for, the exit) and a preemption at any moment before
the next decision (the notice window, and the work since the last checkpoint unless an emergency
save fits in the notice); plus the margin the figures carry for what is not known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from costsim.spec import ON_DEMAND, OWNED, SPOT  # noqa: F401 (the market names, defined once)

_EPS = 1e-6


@dataclass(frozen=True, kw_only=True, slots=True)
class Figures:
    """One record of what the job costs in time, in seconds of wall time: the simulator's parameters,
    or what `costsim control` has measured so far (with a margin for what it has not)."""

    work_total_s: float                    # compute of the whole job (steps x step time)
    changeover_s: float = 0.0              # a new instance: from starting it until the job starts up on it
    restart_s: float = 0.0                 # the job's restart on a new instance (not on the first start)
    release_s: float = 0.0                 # the job's exit: from leaving (its save done) to the release
    checkpoint_s: float = 0.0              # a synchronous save (a move's, the final one, an emergency one)
    checkpoint_stall_s: float | None = None   # async periodic saves: the stall (the write runs behind it)
    interval_s: float = math.inf           # compute between periodic saves
    notice_s: float = 0.0                  # warning before a spot reclaim
    margin_s: float = 0.0                  # held back for what is not known yet (the controller's spread)

    @property
    def resume_s(self) -> float:
        """From starting an instance to progress again after a restart."""
        return self.changeover_s + self.restart_s

    @property
    def paid_checkpoint_s(self) -> float:
        """What a periodic save costs training: the async stall, else the synchronous write."""
        return self.checkpoint_s if self.checkpoint_stall_s is None else self.checkpoint_stall_s


@dataclass(frozen=True, slots=True)
class View:
    """What a policy may know at time t (seconds from submission)."""

    t: float
    deadline_s: float
    work_left_s: float         # compute left, counting progress not yet checkpointed as done
    at_risk_s: float           # progress that a preemption without an emergency save would lose now
    running: str | None        # market now running on, None when idle
    spot_available_at: float   # t when spot can be had now; inf when never again
    figures: Figures

    @property
    def work_total_s(self) -> float:
        return self.figures.work_total_s

    @property
    def finish_overhead_s(self) -> float:
        """The periodic saves still to pay on the way (at most one per interval of work left) and the final save."""
        f = self.figures
        periodic = math.ceil(self.work_left_s / f.interval_s - _EPS) if math.isfinite(f.interval_s) else 0
        return max(periodic, 0) * f.paid_checkpoint_s + f.checkpoint_s


def build_view(figures: Figures, *, t: float, deadline_s: float, live_work_s: float, durable_work_s: float,
               running: str | None, spot_available_at: float) -> View:
    """The one way to build a View: from the job's figures and its state (work done so far, in the
    figures' seconds; `durable` is what the newest complete checkpoint holds)."""
    return View(t=t, deadline_s=deadline_s, work_left_s=max(0.0, figures.work_total_s - live_work_s),
                at_risk_s=max(0.0, live_work_s - durable_work_s), running=running,
                spot_available_at=spot_available_at, figures=figures)


# -- what committing to on-demand costs from here ------------------------------------------------
def need_from_idle(v: View) -> float:
    """Start on-demand now (no instance held): start-up, restart, the work, its saves, the exit."""
    f = v.figures
    return f.resume_s + v.work_left_s + v.finish_overhead_s + f.release_s + f.margin_s


def move_cost_s(v: View) -> float:
    """Leaving a running instance on purpose: its save (after an async write it must wait for) and exit."""
    f = v.figures
    return (2.0 if f.checkpoint_stall_s is not None else 1.0) * f.checkpoint_s + f.release_s


def need_on_spot(v: View) -> float:
    """Staying on spot is safe while this fits: the worse of moving to on-demand now and a reclaim at
    any moment before the next decision (the notice window lost, and the work since the last save
    unless an emergency save fits in the notice)."""
    f = v.figures
    lost = 0.0
    if f.checkpoint_s > f.notice_s + _EPS:   # no emergency save: up to an interval, and an async write under way
        pending = f.checkpoint_s if f.checkpoint_stall_s is not None else 0.0
        lost = min(max(v.at_risk_s, min(f.interval_s, v.work_total_s) + pending), v.at_risk_s + v.work_left_s)
    return max(move_cost_s(v), f.notice_s + lost) + need_from_idle(v)


def spot_start_slack(v: View) -> float:
    """Time to spare if a spot instance were started now: its start-up makes no progress, and once the
    job runs on it, staying must be safe."""
    return v.deadline_s - v.t - v.figures.resume_s - need_on_spot(v)


# -- the policies -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Decision:
    market: str | None
    reconsider_at: float = math.inf
    reason: str = field(default="", compare=False)   # for people (the controller's timeline), not the model


Policy = Callable[[View], Decision]
POLICIES: dict[str, Policy] = {}
# Which markets a policy needs from an offering; the planner pairs policies and offerings by it.
POLICY_MARKETS: dict[str, tuple[str, ...]] = {}


def register(name: str, markets: tuple[str, ...]):
    """Register a policy under `name`, needing the given markets."""
    def wrap(policy: Policy) -> Policy:
        POLICIES[name] = policy
        POLICY_MARKETS[name] = markets
        return policy
    return wrap


def get(name: str) -> Policy:
    """The policy registered as `name` (KeyError names the choices)."""
    if name not in POLICIES:
        raise KeyError(f"unknown policy {name!r}; choose from {', '.join(sorted(POLICIES))}")
    return POLICIES[name]


@register("on-demand", (ON_DEMAND,))
def on_demand(view: View) -> Decision:
    """Always on-demand."""
    return Decision(ON_DEMAND, reason="on-demand only")


@register("owned", (OWNED,))
def owned(view: View) -> Decision:
    """Always the team's own hardware."""
    return Decision(OWNED, reason="owned only")


@register("spot-only", (SPOT,))
def spot_only(view: View) -> Decision:
    """Spot whenever it can be had, otherwise wait for it, whatever the deadline."""
    if view.running == SPOT or view.spot_available_at <= view.t + _EPS:
        return Decision(SPOT, reason="spot")
    return Decision(None, view.spot_available_at, reason="waiting for spot")


def _safety_net(view: View, extra_s: float = 0.0) -> Decision | None:
    """The deadline guard both deadline-aware policies share: on-demand when waiting or staying on
    spot any longer could miss what on-demand still meets (less `extra_s`, a policy's own cushion);
    else None, with the caller to choose."""
    t, deadline = view.t, view.deadline_s - extra_s
    if view.running == SPOT:
        if deadline - t - need_on_spot(view) <= _EPS:
            return Decision(ON_DEMAND, reason="slack ran out: on-demand while it still meets the deadline")
        return None
    if view.running is None and deadline - t - need_from_idle(view) <= _EPS:
        return Decision(ON_DEMAND, reason="slack ran out: on-demand while it still meets the deadline")
    return None


@register("greedy", (SPOT, ON_DEMAND))
def greedy(view: View) -> Decision:
    """Can't Be Late's Greedy, made safe: spot while there is slack, then on-demand for good.

    Slack is the time left less what committing to on-demand costs from here (module docstring). A new
    spot instance starts only while the slack also covers its start-up; idle, it waits for spot at most
    until the slack runs out; on spot, it asks to be woken when the slack would run out.
    """
    if view.running == ON_DEMAND:
        return Decision(ON_DEMAND, reason="on-demand for good")
    guard = _safety_net(view)
    if guard is not None:
        return guard
    t = view.t
    if view.running == SPOT:
        return Decision(SPOT, view.deadline_s - need_on_spot(view), reason="spot while there is slack")
    if spot_start_slack(view) <= _EPS:
        return Decision(ON_DEMAND, reason="no slack for another spot start")
    if view.spot_available_at <= t + _EPS:
        return Decision(SPOT, reason="spot available, slack left")
    wake = min(view.spot_available_at, view.deadline_s - need_from_idle(view), view.deadline_s
               - view.figures.resume_s - need_on_spot(view))
    return Decision(None, max(wake, t + _EPS * 10), reason="waiting for spot while slack lasts")


@register("uniform-progress", (SPOT, ON_DEMAND))
def uniform_progress(view: View) -> Decision:
    """Can't Be Late's Uniform Progress, made safe: keep done work at or above the line C*t/D.

    Spot whenever it can be had and started safely; on-demand when idle and behind the line, staying
    there until ahead of the line two changeovers later and a move to spot is safe; the shared safety
    net goes on-demand when waiting or staying on spot could miss what on-demand still meets, with a
    second changeover in hand as the authors' net has.
    """
    total, deadline, t, resume = view.work_total_s, view.deadline_s, view.t, view.figures.resume_s
    done = total - view.work_left_s
    guard = _safety_net(view, extra_s=resume)   # the authors' net keeps a second changeover in hand
    if guard is not None:
        return guard
    spot_now = view.spot_available_at <= t + _EPS
    if view.running == SPOT:
        return Decision(SPOT, deadline - resume - need_on_spot(view), reason="spot")
    if view.running == ON_DEMAND:
        # Leaving costs a save and an exit before the spot start: only when the job would stay there
        # (ahead of the line, and safe on spot once it runs: no move back within a changeover).
        ahead = done >= total * (t + 2.0 * resume) / deadline - _EPS
        if spot_now and ahead:
            if spot_start_slack(view) - move_cost_s(view) > resume:
                return Decision(SPOT, reason="ahead of the line: back to spot")
            # on on-demand the slack stays as it is: a move to spot will not become safe by waiting
            return Decision(ON_DEMAND, reason="no slack to leave on-demand safely: on-demand to the end")
        if total >= deadline:
            return Decision(ON_DEMAND, reason="no room for spot")
        ahead_at = (t - done + 2.0 * resume * total / deadline) / (1.0 - total / deadline)
        return Decision(ON_DEMAND, max(ahead_at, view.spot_available_at, t + _EPS * 10),
                        reason="catching up with the line")
    if spot_now:
        if spot_start_slack(view) <= resume + _EPS:   # its net would leave at once: the start is wasted
            return Decision(ON_DEMAND, reason="no slack for a spot start")
        return Decision(SPOT, reason="spot available")
    if done <= total * t / deadline + _EPS:   # on or behind the line: falling behind from now
        return Decision(ON_DEMAND, reason="behind the progress line")
    behind_at = done * deadline / total
    wake = min(view.spot_available_at, behind_at, deadline - resume - need_from_idle(view))
    return Decision(None, max(wake, t + _EPS * 10), reason="ahead of the line: waiting for spot")
