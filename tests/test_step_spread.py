"""Step time is uncertain too: calibrate measures its spread, and a plan's band carries it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from costsim.calibrate import Run, step_time_spread
from costsim.errors import InputError
from costsim.fit import Point
from costsim.io import load_profile
from costsim.montecarlo import SimConfig, quantile, run_trials
from costsim.sim.job import JobParams
from costsim.sim.trial import MarketPrice


def _run(name: str, step_s: float, steady: list[float]) -> Run:
    return Run(path=Path(name), plan=None, summary={}, point=Point(2, 1, 8, 1, step_s), steps=len(steady),  # type: ignore[arg-type]
               steady_s=steady)


def test_the_spread_is_the_larger_of_across_runs_and_within_a_run():
    # the case: the same run measured 2.93 ms and 3.97 ms a step an hour apart
    a, b = _run("a", 2.93e-3, [2.93e-3] * 100), _run("b", 3.97e-3, [3.97e-3] * 100)
    notes: list[str] = []
    across = step_time_spread([a, b], 0.0, notes)
    means = [2.93e-3, 3.97e-3]
    assert across == pytest.approx(np.std(means, ddof=1) / np.mean(means))
    assert "across 2 runs" in notes[0]
    drifting = [3e-3] * 40 + [4e-3] * 60   # one run whose speed changes half way
    within = step_time_spread([_run("c", float(np.mean(drifting)), drifting)], 0.0, [])
    chunks = [np.mean(drifting[i * 20:(i + 1) * 20]) for i in range(5)]
    assert within == pytest.approx(np.std(chunks, ddof=1) / np.mean(chunks))
    assert step_time_spread([_run("d", 3e-3, [3e-3] * 20)], 0.07, []) == 0.07   # too few steps: the prior stays


def test_a_plan_trial_draws_its_own_speed_and_the_band_carries_it():
    """On-demand, no preemptions: the finish is start-up plus work at the trial's speed, lognormal with the
    profile's relative sd; P90/P50 follows it within the quantiles' sampling error."""
    spread, trials = 0.1, 4000
    params = JobParams(work_s=10 * 3600, deadline_s=40 * 3600, checkpoint_interval_s=3600, checkpoint_s=0,
                       changeover_s=0, speed_spread=spread)
    config = SimConfig(params=params, policy="on-demand", prices={"on-demand": MarketPrice(per_hour=2.0)})
    samples = run_trials(config, trials, seed=11)
    sigma = math.sqrt(math.log1p(spread ** 2))
    work = samples.makespan_s / params.work_s   # checkpoints cost nothing here: finish = work x speed
    assert np.mean(work) == pytest.approx(1.0, abs=4 * spread / math.sqrt(trials))   # the mean is the figure
    assert np.std(np.log(work)) == pytest.approx(sigma, rel=4 / math.sqrt(2 * trials))
    ratio = quantile(samples.makespan_s, 0.9) / quantile(samples.makespan_s, 0.5)
    assert ratio == pytest.approx(math.exp(1.2816 * sigma), rel=0.02)
    assert np.allclose(samples.cost, 2.0 * samples.makespan_s / 3600, atol=2.0 / 3600)   # billed by the second
    still = run_trials(SimConfig(params=JobParams(work_s=10 * 3600, deadline_s=40 * 3600, checkpoint_interval_s=3600,
                                                  checkpoint_s=0), policy="on-demand",
                                 prices={"on-demand": MarketPrice(per_hour=2.0)}), 50, seed=11)
    assert np.ptp(still.makespan_s) == 0.0   # no spread: every trial the same


def test_a_spread_of_one_or_more_is_refused(tmp_path):
    profile = tmp_path / "p.yaml"
    text = (Path(__file__).parent.parent / "data" / "profiles" / "tiny.yaml").read_text()
    profile.write_text(text + "\nstep_time_spread: 1.5\n")
    with pytest.raises(InputError, match="step_time_spread: got 1.5; expected a relative standard deviation"):
        load_profile(str(profile))
