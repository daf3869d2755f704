"""Small handmade scenarios with exact expected event logs, finish times and costs (worked by hand)."""

import math

import pytest

from costsim import policies
from costsim.sim.job import JobParams
from costsim.sim.market import AlwaysAvailable, Timeline, TraceTimeline
from costsim.sim.trial import MarketPrice, run_trial

PRICES = {"spot": MarketPrice(per_hour=1.0), "on-demand": MarketPrice(per_hour=3.0)}
# Spot available [0, 1800) and [3000, 7200): 600 s ticks.
TRACE = [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]


def params(**overrides):
    base = dict(work_s=3000, deadline_s=7200, checkpoint_interval_s=900, checkpoint_s=60, restart_s=120,
                changeover_s=60)
    return JobParams(**{**base, **overrides})


def test_greedy_preempted_without_notice_loses_work_since_last_checkpoint():
    out = run_trial(params(), policies.get("greedy"), TraceTimeline(TRACE, 600), PRICES, record_log=True)
    # 60 s changeover; 900 work + 60 ckpt -> 1020; reclaimed at 1800 losing 780 s; slack left, so
    # wait for spot at 3000; changeover + restart 180; three more intervals (900, 900, 300) + ckpts.
    assert out.record.log == [
        (0, "start", "spot"), (60, "progress", "spot"), (1020, "checkpoint", ""), (1800, "notice", ""),
        (1800, "preempted", "spot"), (1800, "release", "spot"), (1800, "wait", ""), (3000, "start", "spot"),
        (3180, "progress", "spot"), (4140, "checkpoint", ""), (5100, "checkpoint", ""), (5460, "checkpoint", ""),
        (5460, "release", "spot"), (5460, "done", "")]
    assert out.makespan_s == pytest.approx(5460)
    assert out.lost_work_s == pytest.approx(780)
    assert out.preemptions == 1
    assert out.cost == pytest.approx((1800 + 2460) / 3600 * 1.0)
    assert out.met_deadline


def test_notice_window_fits_an_emergency_checkpoint_and_nothing_is_lost():
    out = run_trial(params(notice_s=120), policies.get("greedy"), TraceTimeline(TRACE, 600), PRICES,
                    record_log=True)
    # Notice at 1680 with 1560 s done; the 60 s emergency save lands at 1740; reclaim at 1800.
    # Resume at 3180 from 1560: next checkpoint at 2460 (4140), then 540 s and the final save (4740).
    assert out.record.log == [
        (0, "start", "spot"), (60, "progress", "spot"), (1020, "checkpoint", ""), (1680, "notice", ""),
        (1740, "checkpoint", ""), (1800, "preempted", "spot"), (1800, "release", "spot"), (1800, "wait", ""),
        (3000, "start", "spot"), (3180, "progress", "spot"), (4140, "checkpoint", ""), (4740, "checkpoint", ""),
        (4740, "release", "spot"), (4740, "done", "")]
    assert out.lost_work_s == 0
    assert out.cost == pytest.approx((1800 + 1740) / 3600)


def test_notice_shorter_than_the_save_loses_the_work():
    out = run_trial(params(notice_s=30), policies.get("greedy"), TraceTimeline(TRACE, 600), PRICES)
    assert out.lost_work_s == pytest.approx(1770 - 1020)   # work done at the notice, less the checkpoint


def test_greedy_falls_back_to_on_demand_when_the_slack_runs_out():
    # Spot only in the first 1200 s, then never: 3000 s of work, deadline 5000 s, no notice (a reclaim
    # may lose an interval of 900 s). Committing to on-demand from idle costs 180 (changeover and
    # restart) + the work + ceil(work/900) periodic saves of 60 + the final save; on spot, the 900 s a
    # reclaim could lose as well. At 0: 5000 - 180 - (900 + 180 + 3000 + 240) = 500 s to spare: spot.
    trace = [0, 0] + [1] * 20
    out = run_trial(params(deadline_s=5000, notice_s=0), policies.get("greedy"), TraceTimeline(trace, 600),
                    PRICES, record_log=True)
    # Reclaimed at 1200 with 2100 s left (180 lost since the checkpoint at 1020): a spot start would
    # still fit until 5000 - 180 - (900 + 180 + 2100 + 180 + 60) = 1400, then no longer: on-demand.
    on_demand_start = 1400
    assert out.record.log == [
        (0, "start", "spot"), (60, "progress", "spot"), (1020, "checkpoint", ""), (1200, "notice", ""),
        (1200, "preempted", "spot"), (1200, "release", "spot"), (1200, "wait", ""),
        (on_demand_start, "start", "on-demand"), (1580, "progress", "on-demand"), (2540, "checkpoint", ""),
        (3500, "checkpoint", ""), (3860, "checkpoint", ""), (3860, "release", "on-demand"), (3860, "done", "")]
    finish = on_demand_start + 180 + 2100 + 3 * 60   # checkpoints at 1800, 2700 and 3000 of work
    assert out.makespan_s == pytest.approx(finish) and out.met_deadline
    assert out.cost == pytest.approx(1200 / 3600 * 1.0 + (finish - on_demand_start) / 3600 * 3.0)


def test_greedy_does_not_start_spot_when_a_reclaim_could_cost_more_than_the_slack():
    # Deadline 4000 s: 520 s to spare on-demand, but a reclaim without notice could lose 900 s.
    out = run_trial(params(deadline_s=4000, notice_s=0), policies.get("greedy"), TraceTimeline([0] * 20, 600),
                    PRICES, record_log=True)
    assert out.record.log[0] == (0, "start", "on-demand") and out.met_deadline
    # With a notice that fits the emergency save nothing is lost to a reclaim: spot is safe again.
    noticed = run_trial(params(deadline_s=4000, notice_s=60), policies.get("greedy"), TraceTimeline([0] * 20, 600),
                        PRICES, record_log=True)
    assert noticed.record.log[0] == (0, "start", "spot")


def test_release_counts_against_the_deadline_and_a_reclaim_during_it_preempts_nothing():
    # The case: work 1000 s, deadline 2000 s, release 200 s: on-demand ends at 2100 would miss,
    # so a policy told of the release starts at once and the job ends at 1000 + 10 + 200.
    p = JobParams(work_s=1000, deadline_s=2000, checkpoint_interval_s=2000, checkpoint_s=10, release_s=200)
    out = run_trial(p, policies.get("greedy"), Timeline(), PRICES, record_log=True)
    assert out.makespan_s == pytest.approx(1210) and out.met_deadline
    # spot reclaimed at 1200 (notice at 1140) while the job exits (its final save done at 1110): the
    # job is done, nothing preempted or lost; the reclaim ends its exit early
    q = JobParams(work_s=1100, deadline_s=4000, checkpoint_interval_s=2000, checkpoint_s=10, release_s=300,
                  notice_s=60)
    spot = run_trial(q, policies.get("spot-only"), TraceTimeline([0, 0, 1, 1, 1, 1, 1], 600), PRICES,
                     record_log=True)
    assert spot.preemptions == 0 and spot.lost_work_s == 0 and spot.makespan_s == pytest.approx(1200)


def test_spot_only_is_stranded_when_capacity_never_returns():
    out = run_trial(params(), policies.get("spot-only"), TraceTimeline([0, 0, 1, 1], 600), PRICES, record_log=True)
    assert not out.finished and math.isinf(out.makespan_s) and not out.met_deadline
    assert out.record.log[-1] == (1200, "stranded", "")
    assert out.cost == pytest.approx(1200 / 3600)


def test_on_demand_pays_changeover_work_and_every_checkpoint():
    out = run_trial(params(checkpoint_interval_s=1000, checkpoint_s=10, changeover_s=100),
                    policies.get("on-demand"), Timeline(), PRICES)
    assert out.makespan_s == pytest.approx(100 + 3000 + 3 * 10)
    assert out.cost == pytest.approx(3130 / 3600 * 3.0)


def test_async_checkpoint_stalls_briefly_and_becomes_durable_after_the_write():
    out = run_trial(params(checkpoint_interval_s=1000, checkpoint_s=50, checkpoint_stall_s=2, changeover_s=100),
                    policies.get("on-demand"), AlwaysAvailable(), PRICES, record_log=True)
    checkpoints = [t for t, event, _ in out.record.log if event == "checkpoint"]
    # stalls of 2 s at 1100 and 2102; writes done 50 s after each stall; the final save is synchronous.
    assert checkpoints == [1152, 2154, 3154]
    assert out.makespan_s == pytest.approx(3154)


def test_billing_increment_and_minimum_apply_per_stint():
    prices = {"on-demand": MarketPrice(per_hour=3.6, count=2, increment_s=60, minimum_s=600)}
    out = run_trial(JobParams(work_s=100, deadline_s=1000, checkpoint_interval_s=100, checkpoint_s=1),
                    policies.get("on-demand"), Timeline(), prices)
    assert out.makespan_s == pytest.approx(101)
    assert out.cost == pytest.approx(2 * 3.6 * 600 / 3600)


def test_the_emergency_save_waits_for_the_async_write_in_flight_as_the_runner_does():
    """A notice during an async write: the runner finishes that write, then saves (runner/checkpoint.py: a
    save waits for the previous one). Spot [0, 1800), notice 580 s: the stall ends at 962, its 450 s write at
    1412; the notice comes at 1220 with 1158 s done. The emergency save could start only at 1412 and would
    end at 1862, past the reclaim: only the write in flight counts (900 s), 258 s are lost. (The simulator
    used to start the emergency save at the notice, beside the write, and keep all 1158 s.)"""
    out = run_trial(params(checkpoint_s=450, checkpoint_stall_s=2, notice_s=580), policies.get("greedy"),
                    TraceTimeline(TRACE, 600), PRICES, record_log=True)
    assert out.record.log[:6] == [(0, "start", "spot"), (60, "progress", "spot"), (1220, "notice", ""),
                                  (1412, "checkpoint", ""), (1800, "preempted", "spot"), (1800, "release", "spot")]
    assert out.lost_work_s == pytest.approx(258)


def test_a_move_right_after_an_async_save_does_not_write_the_same_checkpoint_again():
    """The policy leaves spot when the stall of the save of 900 s ends (962): that save's write (300 s) is
    the move's checkpoint; the job leaves when it lands (1262), not after a second, synchronous save of the
    same 900 s (1562)."""
    def leave_spot_at_962(view):
        if view.t < 962 - 1e-6:
            return policies.Decision("spot" if view.running == "spot" or view.spot_available_at <= view.t else None,
                                     962)
        return policies.Decision("on-demand")
    out = run_trial(params(checkpoint_s=300, checkpoint_stall_s=2), leave_spot_at_962, AlwaysAvailable(), PRICES,
                    record_log=True)
    assert out.record.log[:5] == [(0, "start", "spot"), (60, "progress", "spot"), (1262, "checkpoint", ""),
                                  (1262, "release", "spot"), (1262, "start", "on-demand")]
    assert out.record.stints[0].end_s == 1262
