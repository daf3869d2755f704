"""Recovery policies: pure functions from what the job knows now to which market to run on.

A policy is called whenever something changes (start, preemption, capacity back, a checkpoint, or
the time it asked to be woken at). It returns the market to be on (None = stay idle) and when to
ask again if nothing else happens first. Policies never touch SimPy, so the same function can drive
a real job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from costsim.spec import ON_DEMAND, OWNED, SPOT  # noqa: F401 (the market names, defined once)

_EPS = 1e-6


@dataclass(frozen=True, slots=True)
class View:
    """What a policy may know at time t (seconds from submission)."""

    t: float
    deadline_s: float
    work_total_s: float
    work_left_s: float         # compute left, counting progress not yet checkpointed as done
    at_risk_s: float           # progress that a preemption without notice would lose
    finish_overhead_s: float   # checkpoint stalls and the final save still to pay on the way
    resume_s: float            # a new instance's changeover and restart, until the job makes progress again
    running: str | None        # market now running on, None when idle
    spot_available_at: float   # t when spot can be had now; inf when never again


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


@register("greedy", (SPOT, ON_DEMAND))
def greedy(view: View) -> Decision:
    """Can't Be Late's Greedy: spot while there is slack, then on-demand for good.

    Slack is the time left minus the work left (with its checkpoint overhead) and one changeover.
    A new spot instance is started only while the slack also covers its own start-up, so that the
    on-demand fallback still fits once it is running. On on-demand slack no longer shrinks, so
    once the switch is made it stays made.
    """
    slack_s = (view.deadline_s - view.t - view.work_left_s - view.finish_overhead_s
               - view.resume_s)
    if view.running == ON_DEMAND:
        return Decision(ON_DEMAND, reason="on-demand for good")
    if slack_s <= _EPS:
        return Decision(ON_DEMAND, reason="slack ran out")
    if view.running == SPOT:
        return Decision(SPOT, reason="spot while there is slack")
    start_slack_s = slack_s - view.resume_s
    if start_slack_s <= _EPS:
        return Decision(ON_DEMAND, reason="no slack for another spot start")
    if view.spot_available_at <= view.t + _EPS:
        return Decision(SPOT, reason="spot available, slack left")
    return Decision(None, min(view.spot_available_at, view.t + start_slack_s), reason="waiting for spot while slack lasts")


@register("uniform-progress", (SPOT, ON_DEMAND))
def uniform_progress(view: View) -> Decision:
    """Can't Be Late's Uniform Progress: keep done work at or above the line C*t/D.

    Spot whenever available; on-demand when idle and behind the line, staying there until ahead of
    the line two changeovers later; a safety net goes on-demand when the time left is under the work
    left (plus what a preemption would lose) and two changeovers.
    """
    total, deadline, t, d = view.work_total_s, view.deadline_s, view.t, view.resume_s
    done = total - view.work_left_s
    safety_at = deadline - view.work_left_s - view.finish_overhead_s - view.at_risk_s - 2.0 * d
    if t >= safety_at - _EPS:
        return Decision(ON_DEMAND, reason="safety net: time left is the work left")
    spot_now = view.spot_available_at <= t + _EPS
    if view.running == SPOT:
        return Decision(SPOT, safety_at, reason="spot")
    if view.running == ON_DEMAND:
        if spot_now and done >= total * (t + 2.0 * d) / deadline - _EPS:
            return Decision(SPOT, reason="ahead of the line: back to spot")
        if total >= deadline:
            return Decision(ON_DEMAND, reason="no room for spot")
        ahead_at = (t - done + 2.0 * d * total / deadline) / (1.0 - total / deadline)
        return Decision(ON_DEMAND, max(ahead_at, view.spot_available_at), reason="catching up with the line")
    if spot_now:
        return Decision(SPOT, safety_at, reason="spot available")
    if done <= total * t / deadline + _EPS:   # on or behind the line: falling behind from now
        return Decision(ON_DEMAND, reason="behind the progress line")
    behind_at = done * deadline / total
    return Decision(None, min(view.spot_available_at, behind_at, safety_at), reason="ahead of the line: waiting for spot")
