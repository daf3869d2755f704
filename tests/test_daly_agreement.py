"""The simulator against Daly's expected wall time, under Daly's semantics.

Exponential preemptions that also strike during checkpoints and restarts, capacity back at once,
no notice, no changeover, the work a whole number of intervals each ending in a checkpoint. The
tolerance is four standard errors of the seeded Monte Carlo mean.
"""

import math

import pytest

from costsim.checkpoint import daly_expected_wall_s, daly_interval_s
from costsim.montecarlo import SimConfig, run_trials
from costsim.sim.job import JobParams
from costsim.sim.market import HazardModel
from costsim.sim.trial import MarketPrice

CASES = [
    # (work_s, interval_s, checkpoint_s, mtbf_s, restart_s)
    pytest.param(36000, 3600, 300, 6 * 3600, 600, id="hourly-ckpt-mtbf-6h"),
    pytest.param(18000, 600, 300, 1800, 120, id="frequent-preemptions-vs-ckpt-cost"),
    pytest.param(28800, 1200, 60, 7200, 0, id="no-restart-cost"),
    pytest.param(14400, 900, 30, 900, 60, id="mtbf-equals-interval"),
]


@pytest.mark.parametrize("work_s, interval_s, checkpoint_s, mtbf_s, restart_s", CASES)
def test_simulated_mean_makespan_matches_daly(work_s, interval_s, checkpoint_s, mtbf_s, restart_s):
    assert work_s % interval_s == 0
    config = SimConfig(
        params=JobParams(work_s=work_s, deadline_s=math.inf, checkpoint_interval_s=interval_s,
                         checkpoint_s=checkpoint_s, restart_s=restart_s),
        policy="spot-only", prices={"spot": MarketPrice(per_hour=1.0)},
        hazard=HazardModel(mtbf_s=mtbf_s))
    samples = run_trials(config, trials=2000, seed=7)
    mean = samples.makespan_s.mean()
    stderr = samples.makespan_s.std(ddof=1) / math.sqrt(len(samples.makespan_s))
    expected = daly_expected_wall_s(work_s, interval_s, checkpoint_s, mtbf_s, restart_s)
    assert abs(mean - expected) <= 4 * stderr, (mean, expected, stderr)
    # The agreement is informative: the failure-free time is far outside the error bars.
    assert abs(mean - (work_s + work_s / interval_s * checkpoint_s)) > 8 * stderr


def test_daly_interval_beats_much_shorter_and_longer_ones_in_simulation():
    mtbf_s, checkpoint_s = 3600.0, 60.0
    best = daly_interval_s(checkpoint_s, mtbf_s)
    means = {}
    for factor in (0.25, 1.0, 4.0):
        interval = best * factor
        config = SimConfig(params=JobParams(work_s=interval * round(20 * 3600 / interval), deadline_s=math.inf,
                                            checkpoint_interval_s=interval, checkpoint_s=checkpoint_s),
                           policy="spot-only", prices={"spot": MarketPrice(per_hour=1.0)},
                           hazard=HazardModel(mtbf_s=mtbf_s))
        s = run_trials(config, trials=400, seed=3)
        means[factor] = (s.makespan_s / config.params.work_s).mean()
    assert means[1.0] < means[0.25] and means[1.0] < means[4.0]
