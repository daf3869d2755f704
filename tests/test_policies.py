"""Recovery policies: pure decisions on literal views, and behaviour on the shipped real traces."""

import math
from pathlib import Path

import numpy as np
import pytest

from costsim import io, policies
from costsim.montecarlo import SimConfig, run_trials
from costsim.policies import ON_DEMAND, SPOT, Decision, View
from costsim.sim.job import JobParams
from costsim.sim.trial import MarketPrice

H = 3600.0


def view(**kw):
    base = dict(t=0.0, deadline_s=52 * H, work_total_s=48 * H, work_left_s=48 * H, at_risk_s=0.0,
                finish_overhead_s=0.0, resume_s=0.1 * H, running=None, spot_available_at=0.0)
    return View(**{**base, **kw})


def test_registry_offers_the_five_policies_with_their_markets():
    assert set(policies.POLICIES) == {"on-demand", "spot-only", "greedy", "uniform-progress", "owned"}
    assert policies.POLICY_MARKETS["greedy"] == (SPOT, ON_DEMAND)
    with pytest.raises(KeyError, match="choose from"):
        policies.get("cheapest")


def test_spot_only_waits_for_capacity():
    assert policies.spot_only(view(spot_available_at=5 * H)) == Decision(None, 5 * H)
    assert policies.spot_only(view(spot_available_at=0.0)) == Decision(SPOT)


def test_greedy_takes_spot_with_slack_and_waits_until_the_slack_only_covers_a_start():
    assert policies.greedy(view()).market == SPOT
    # slack = 52 - 48 - 0.1 = 3.9 h; a new start needs another 0.1 h: wait at most 3.8 h.
    assert policies.greedy(view(spot_available_at=10 * H)) == Decision(None, pytest.approx(3.8 * H))


def test_greedy_switches_for_good_when_slack_is_gone():
    assert policies.greedy(view(t=3.8 * H, spot_available_at=10 * H)).market == ON_DEMAND
    assert policies.greedy(view(t=30 * H, work_left_s=10 * H, running=ON_DEMAND)).market == ON_DEMAND


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


def test_uniform_progress_safety_net_counts_work_at_risk():
    # 4 h left, 3.5 h work + 0.2 h (two changeovers) fits, but not with 0.5 h at risk on spot.
    v = view(t=48 * H, work_left_s=3.5 * H, running=SPOT, spot_available_at=48 * H)
    assert policies.uniform_progress(v).market == SPOT
    assert policies.uniform_progress(view(t=48 * H, work_left_s=3.5 * H, at_risk_s=0.5 * H, running=SPOT,
                                          spot_available_at=48 * H)).market == ON_DEMAND


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
