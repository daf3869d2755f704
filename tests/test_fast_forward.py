"""The job model's fast-forward (runs of whole checkpoint cycles in one SimPy event, Job._cycles; async saves
behind a stall and blocking ones) gives the outcomes of the stepwise model, trial by trial: on the planner's
own configurations, on notices that fall exactly on a cycle's boundaries and on real capacity windows."""

import math
from dataclasses import replace

import pytest

from costsim import io, policies
from costsim.catalog import offerings_for
from costsim.montecarlo import timeline_for, trial_params
from costsim.planner import configure
from costsim.sim.job import JobParams
from costsim.sim.market import ArrayTimeline, TraceTimeline
from costsim.sim.trial import MarketPrice, run_trial


def same(a, b) -> bool:
    close = lambda x, y: math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-6)  # noqa: E731  (times are summed differently)
    return (a.finished == b.finished and (not a.finished or close(a.makespan_s, b.makespan_s))
            and close(a.cost, b.cost) and a.preemptions == b.preemptions and close(a.lost_work_s, b.lost_work_s))


@pytest.mark.parametrize("workload", ["sdxl", "tiny"])   # sdxl's saves are async, tiny's blocking
def test_fast_forward_gives_the_stepwise_outcomes_on_the_planners_configurations(workload):
    w = io.load_workload(workload)
    configured, _ = configure(w, io.load_profile(w.profile), offerings_for(w), w.deadline_s)
    compared = fewer = 0
    for c in configured[::max(1, len(configured) // 12)]:
        for interval in (None, 155.0, 600.0):   # the plan's own, and short intervals: many cycles a stint
            params = c.config.params if interval is None else replace(c.config.params, checkpoint_interval_s=interval)
            for i in range(8):
                draws = [timeline_for(c.config, 11, i)[0] for _ in range(2)]
                tp = trial_params(params, 11, i)
                stepwise, fast = (run_trial(tp, policies.get(c.config.policy), timeline, c.config.prices,
                                            fast_forward=ff) for timeline, ff in zip(draws, (False, True)))
                assert same(stepwise, fast), (c.candidate.label, interval, i, stepwise, fast)
                if params.work_s > 2 * params.checkpoint_interval_s:   # whole cycles to skip
                    compared += 1
                    fewer += fast.events < stepwise.events
    assert compared and fewer > compared / 2   # the fast-forward engages


# Work 100 s an interval at 1x, a 5 s stall, writes of 50 s: cycles of 105 s from the start-up's end at 60.
CYCLE_PARAMS = JobParams(work_s=3000, deadline_s=20_000, checkpoint_interval_s=100, checkpoint_s=50,
                         checkpoint_stall_s=5, changeover_s=60, restart_s=30, notice_s=20)
PRICES = {"spot": MarketPrice(per_hour=1.0), "on-demand": MarketPrice(per_hour=3.0)}


# Blocking saves: work 100 s an interval, then a 50 s save training waits for: cycles of 150 s from 60.
BLOCKING_PARAMS = replace(CYCLE_PARAMS, checkpoint_stall_s=None)
NOTICES = [  # async: a stall's end, a work segment's end, inside work, inside a stall, the first cycle's
    # boundaries, late; blocking: a save's end, a work segment's end, inside work, inside a save, the first
    # cycle's boundaries, late, and inside the last save before the end (its save still lands before the reclaim)
    *[("async", CYCLE_PARAMS, t) for t in (60 + 7 * 105, 60 + 7 * 105 + 100, 60 + 7 * 105 + 50, 60 + 7 * 105 + 102.5,
                                          60 + 105, 60 + 100, 60 + 27 * 105 + 30)],
    *[("blocking", BLOCKING_PARAMS, t) for t in (60 + 7 * 150, 60 + 7 * 150 + 100, 60 + 7 * 150 + 50,
                                                 60 + 7 * 150 + 120, 60 + 150, 60 + 100, 60 + 17 * 150 + 30,
                                                 60 + 19 * 150 - 5)]]


@pytest.mark.parametrize("saves, params, notice_at", NOTICES)
@pytest.mark.parametrize("policy", ["spot-only", "greedy"])
def test_a_notice_on_a_cycle_boundary_sees_what_the_stepwise_model_sees(saves, params, notice_at, policy):
    reclaim_at = notice_at + params.notice_s
    outcomes = [run_trial(params, policies.get(policy), ArrayTimeline([0, reclaim_at + 200], [reclaim_at, 1e9]),
                          PRICES, fast_forward=ff) for ff in (False, True)]
    assert outcomes[0].preemptions == 1
    assert same(*outcomes), outcomes
    assert outcomes[1].events < outcomes[0].events


@pytest.mark.parametrize("policy", ["greedy", "uniform-progress"])
def test_fast_forward_gives_the_stepwise_outcomes_on_real_windows_of_the_safety_grid(policy):
    """Blocking saves every minute on Can't Be Late's real windows (tests/policy_grid.py), at the corners
    with a notice, a slow exit or both (half of them, every tenth window): the grid's test relies on these
    being the stepwise model's outcomes."""
    from tests.policy_grid import PRICES as GRID_PRICES
    from tests.policy_grid import corners, windows
    chosen = [c for c in corners() if c.checkpoint_interval_s == 60 and (c.notice_s, c.release_s) != (0, 0)]
    traces = windows()[::10]
    engaged = 0
    for corner in chosen[::2]:
        params = corner.params()
        for ticks, gap in traces:
            stepwise, fast = (run_trial(params, policies.get(policy), TraceTimeline(ticks, gap), GRID_PRICES,
                                        fast_forward=ff) for ff in (False, True))
            assert same(stepwise, fast), (corner.label(), stepwise, fast)
            engaged += fast.events < stepwise.events
    assert engaged > len(traces) * len(chosen[::2]) / 2


def test_a_reclaim_at_a_fast_forwarded_saves_end_banks_that_save():
    """The safety grid's corner 3 (saves every minute, no notice, exits of 30 min) on window 207: the reclaim
    came at the end of a save inside a fast-forward, whose end the cycles' arithmetic put 7e-12 s before it,
    and the model asked SimPy for a negative delay. It now ends that save at the reclaim, as the stepwise
    model does (all 64,000 trials of the grid compared: the same outcomes)."""
    from tests.policy_grid import PRICES as GRID_PRICES
    from tests.policy_grid import corners, windows
    corner, (ticks, gap) = corners()[3], windows()[207]
    assert (corner.checkpoint_interval_s, corner.notice_s, corner.release_s) == (60, 0, 1800)
    stepwise, fast = (run_trial(corner.params(), policies.get("uniform-progress"), TraceTimeline(ticks, gap),
                                GRID_PRICES, fast_forward=ff) for ff in (False, True))
    assert stepwise.preemptions >= 1 and same(stepwise, fast), (stepwise, fast)
