"""Recovery policies: pure decisions on literal views, and behaviour on the shipped real traces."""

import math
from pathlib import Path

import numpy as np
import pytest

from costsim import io, policies
from costsim.montecarlo import SimConfig, run_trials
from costsim.policies import ON_DEMAND, SPOT, Decision
from costsim.sim.job import JobParams
from costsim.sim.trial import MarketPrice

H = 3600.0


def view(*, t=0.0, work_left_s=48 * H, at_risk_s=0.0, running=None, spot_available_at=0.0, deadline_s=52 * H,
         **figures):
    """Can't Be Late's setting (48 h job, 52 h deadline, 0.1 h changeover) unless told otherwise."""
    f = policies.Figures(**{"work_total_s": 48 * H, "changeover_s": 0.1 * H, **figures})
    done = f.work_total_s - work_left_s
    return policies.build_view(f, t=t, deadline_s=deadline_s, live_work_s=done, durable_work_s=done - at_risk_s,
                               running=running, spot_available_at=spot_available_at)


def test_registry_offers_the_five_policies_with_their_markets():
    assert set(policies.POLICIES) == {"on-demand", "spot-only", "greedy", "uniform-progress", "owned"}
    assert policies.POLICY_MARKETS["greedy"] == (SPOT, ON_DEMAND)
    with pytest.raises(KeyError, match="choose from"):
        policies.get("cheapest")


def test_spot_only_waits_for_capacity():
    assert policies.spot_only(view(spot_available_at=5 * H)) == Decision(None, 5 * H)
    assert policies.spot_only(view(spot_available_at=0.0)) == Decision(SPOT)


def test_the_view_counts_every_periodic_save_left_and_the_final_one():
    v = view(work_left_s=2.5 * H, interval_s=H, checkpoint_s=60.0, checkpoint_stall_s=2.0)
    assert v.finish_overhead_s == pytest.approx(3 * 2.0 + 60.0)   # at most one per interval of work left
    assert policies.need_from_idle(v) == pytest.approx(0.1 * H + 2.5 * H + 66.0)


def test_greedy_takes_spot_with_slack_and_waits_until_the_slack_only_covers_a_start():
    assert policies.greedy(view()).market == SPOT
    # slack = 52 - 48 - 0.1 = 3.9 h; a new start needs another 0.1 h: wait at most 3.8 h.
    assert policies.greedy(view(spot_available_at=10 * H)) == Decision(None, pytest.approx(3.8 * H))


def test_greedy_switches_for_good_when_slack_is_gone():
    assert policies.greedy(view(t=3.8 * H, spot_available_at=10 * H)).market == ON_DEMAND
    assert policies.greedy(view(t=30 * H, work_left_s=10 * H, running=ON_DEMAND)).market == ON_DEMAND


def test_greedy_on_spot_asks_to_be_woken_when_its_slack_would_run_out():
    # 10 h left at 40 h: committing to on-demand needs 0.1 + 10 h; spare 1.9 h, so ask again at 41.9 h.
    decision = policies.greedy(view(t=40 * H, work_left_s=10 * H, running=SPOT))
    assert decision == Decision(SPOT, pytest.approx(41.9 * H))


@pytest.mark.parametrize("overhead, spare_h", [
    ({}, 1.9),                                                       # work and a changeover only
    ({"release_s": 0.5 * H}, 1.9 - 0.5 - 0.5),                       # the exits: off spot, and at the end
    ({"checkpoint_s": 0.2 * H, "notice_s": 0.2 * H}, 1.9 - 0.2 - 0.2),  # the final save, and a move's save
    ({"checkpoint_s": 60.0, "interval_s": H}, 1.9 - 1.0 - 11 * 60 / H),  # no notice: a reclaim loses an interval
    ({"margin_s": 0.3 * H}, 1.6),                                    # the controller's margin
])
def test_greedy_counts_every_overhead_of_a_fallback_from_spot(overhead, spare_h):
    decision = policies.greedy(view(t=40 * H, work_left_s=10 * H, running=SPOT, **overhead))
    assert decision.market == SPOT and decision.reconsider_at == pytest.approx((40 + spare_h) * H)
    late = policies.greedy(view(t=(40 + spare_h) * H + 1, work_left_s=10 * H, running=SPOT, **overhead))
    assert late.market == ON_DEMAND


def test_uniform_progress_goes_on_demand_when_idle_behind_the_line():
    # At 13 h the line is 48/52 * 13 = 12 h; 11 h done is behind it.
    decision = policies.uniform_progress(view(t=13 * H, work_left_s=37 * H, spot_available_at=20 * H))
    assert decision.market == ON_DEMAND


def test_uniform_progress_waits_when_ahead_until_it_would_fall_behind():
    # 13 h done at t = 13 h: the line reaches 13 h at 13 * 52/48 = 14.083 h.
    decision = policies.uniform_progress(view(t=13 * H, work_left_s=35 * H, spot_available_at=20 * H))
    assert decision.market is None
    assert decision.reconsider_at == pytest.approx(13 * 52 / 48 * H)


def test_uniform_progress_leaves_on_demand_only_when_ahead_two_changeovers_later():
    ahead = view(t=10 * H, work_left_s=37 * H, running=ON_DEMAND)   # 11 h done; line(10.2 h) = 9.42 h
    assert policies.uniform_progress(ahead).market == SPOT
    behind = view(t=10 * H, work_left_s=38.7 * H, running=ON_DEMAND)  # 9.3 h done < 9.42 h
    assert policies.uniform_progress(behind).market == ON_DEMAND


def test_uniform_progress_does_not_leave_on_demand_for_a_move_it_would_undo():
    # Ahead of the line, but after the move's save and exit and a spot start there would be less than a
    # changeover to spare on spot: it stays (no flapping), for good.
    # Deadline 47.4 h, 11 h done at 10 h: spare on spot once there 47.4 - 10 - 0.1 - (0.05 + 0.1 + 37 + 0.05)
    # = 0.1 h, less the 0.05 h move: under a changeover.
    tight = dict(t=10 * H, work_left_s=37 * H, running=ON_DEMAND, checkpoint_s=0.05 * H, notice_s=0.05 * H)
    assert policies.uniform_progress(view(deadline_s=47.4 * H, **tight)) == Decision(ON_DEMAND)
    assert policies.uniform_progress(view(deadline_s=47.6 * H, **tight)).market == SPOT


def test_uniform_progress_safety_net_counts_work_at_risk():
    # 4 h left, 3.5 h of work and 0.1 h to start fit; a reclaim without notice could lose the 0.5 h since
    # the last checkpoint (interval 0.5 h, saves of 60 s), which does not.
    v = view(t=48 * H, work_left_s=3.5 * H, running=SPOT, spot_available_at=48 * H)
    assert policies.uniform_progress(v).market == SPOT
    risky = view(t=48 * H, work_left_s=3.5 * H, at_risk_s=0.3 * H, running=SPOT, spot_available_at=48 * H,
                 interval_s=0.5 * H, checkpoint_s=60.0)
    assert policies.uniform_progress(risky).market == ON_DEMAND


def test_uniform_progress_does_not_start_spot_that_cannot_progress_before_its_safety_net():
    # idle, spot available, 0.15 h to spare: the 0.1 h start-up and a reclaim's 0.1 h would not fit
    v = view(t=3.85 * H, spot_available_at=3.85 * H, notice_s=0.1 * H)
    assert policies.uniform_progress(v).market == ON_DEMAND


# -- on the shipped real traces: Can't Be Late's setting (48 h job, 52 h deadline, 0.1 h changeover)
TRACE_DIR = Path(io.data_dir()) / "traces" / "cbl-us-west-2a-v100"
ON_DEMAND_PRICE, SPOT_PRICE = 3.06, 0.3941   # p3.2xlarge us-east-1, data/catalog/offerings.csv


def trace_results(policy: str, checkpoint_s: float, interval_s: float):
    traces = tuple((tuple(t), g) for t, g in (io.load_trace(p) for p in sorted(TRACE_DIR.glob("*.json"))))
    config = SimConfig(
        params=JobParams(work_s=48 * H, deadline_s=52 * H, checkpoint_interval_s=interval_s,
                         checkpoint_s=checkpoint_s, changeover_s=0.1 * H, horizon_s=400 * H),
        policy=policy, prices={SPOT: MarketPrice(per_hour=SPOT_PRICE), ON_DEMAND: MarketPrice(per_hour=ON_DEMAND_PRICE)},
        traces=traces)
    return run_trials(config, len(traces), seed=0)


@pytest.mark.parametrize("checkpoint_s, interval_s", [(0.0, H), (60.0, 0.5 * H)],
                         ids=["progress-kept-as-in-the-paper", "real-checkpoints-work-lost"])
def test_uniform_progress_never_misses_and_spot_policies_beat_on_demand(checkpoint_s, interval_s):
    on_demand = trace_results("on-demand", checkpoint_s, interval_s)
    assert on_demand.met.all()   # the deadline is feasible
    uniform = trace_results("uniform-progress", checkpoint_s, interval_s)
    greedy = trace_results("greedy", checkpoint_s, interval_s)
    assert uniform.met.all()
    assert len(uniform.cost) == 100
    for samples in (uniform, greedy):
        stderr = samples.cost.std(ddof=1) / math.sqrt(len(samples.cost))
        assert samples.cost.mean() + 4 * stderr < on_demand.cost.mean()


def test_spot_only_on_the_same_traces_misses_some_deadlines():
    spot_only = trace_results("spot-only", 0.0, H)
    assert 0 < spot_only.met.mean() < 1
    assert np.isfinite(spot_only.cost).all()
