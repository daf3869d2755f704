"""Can't Be Late's Greedy and Uniform Progress as the authors state them (data/SOURCES.md, NSDI'24), before
costsim made them safe under every overhead: the reference the safe policies are compared with.

Greedy: spot while time left > work left + its checkpoints + one changeover; then on-demand for good.
Uniform Progress: keep work done at or above C*t/D; on-demand when idle and behind it until ahead of it
two changeovers later; spot whenever available; a safety net when time left < work left + two
changeovers. Both count the work left and the checkpoints on the way (the fraction of an interval as
a fraction of a save), as costsim's policies did before they were made safe.
"""

from __future__ import annotations

from costsim.policies import ON_DEMAND, SPOT, Decision, View

_EPS = 1e-6


def _overhead(v: View) -> float:
    f = v.figures
    return v.work_left_s / f.interval_s * f.paid_checkpoint_s + f.checkpoint_s


def greedy(v: View) -> Decision:
    resume = v.figures.resume_s
    slack = v.deadline_s - v.t - v.work_left_s - _overhead(v) - resume
    if v.running == ON_DEMAND:
        return Decision(ON_DEMAND)
    if slack <= _EPS:
        return Decision(ON_DEMAND)
    if v.running == SPOT:
        return Decision(SPOT)
    if slack - resume <= _EPS:
        return Decision(ON_DEMAND)
    if v.spot_available_at <= v.t + _EPS:
        return Decision(SPOT)
    return Decision(None, min(v.spot_available_at, v.t + slack - resume))


def uniform_progress(v: View) -> Decision:
    total, deadline, t, d = v.work_total_s, v.deadline_s, v.t, v.figures.resume_s
    done = total - v.work_left_s
    safety_at = deadline - v.work_left_s - _overhead(v) - 2.0 * d
    if t >= safety_at - _EPS:
        return Decision(ON_DEMAND)
    spot_now = v.spot_available_at <= t + _EPS
    if v.running == SPOT:
        return Decision(SPOT, safety_at)
    if v.running == ON_DEMAND:
        if spot_now and done >= total * (t + 2.0 * d) / deadline - _EPS:
            return Decision(SPOT)
        if total >= deadline:
            return Decision(ON_DEMAND)
        ahead_at = (t - done + 2.0 * d * total / deadline) / (1.0 - total / deadline)
        return Decision(ON_DEMAND, max(ahead_at, v.spot_available_at))
    if spot_now:
        return Decision(SPOT, safety_at)
    if done <= total * t / deadline + _EPS:
        return Decision(ON_DEMAND)
    return Decision(None, min(v.spot_available_at, done * deadline / total, safety_at))


REFERENCE = {"greedy": greedy, "uniform-progress": uniform_progress}
