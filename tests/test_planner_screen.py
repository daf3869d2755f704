"""The analytic screen against full simulation, on the shipped workloads: the screen keeps the choice,
every plan that full simulation finds cheaper than the cheapest certain plan (on-demand or owned, meeting
the target: the safe baseline), and the safe alternatives (the certain plans no other certain plan beats on
both cost and finish). Below the safe baseline the rows may differ: the screen ranks by an analytic
estimate that is far off for some policies (uniform-progress on the flagship: 87 USD estimated, 194
simulated)."""

from pathlib import Path

import numpy as np
import pytest

from costsim import io
from costsim.catalog import offerings_for
from costsim.io.catalog import load_catalog
from costsim.montecarlo import run_trials, summarise
from costsim.planner import PlanOptions, group_key, plan

WORKLOADS = sorted((Path(__file__).resolve().parents[1] / "data" / "workloads").glob("*.yaml"))
TRIALS = 100


def _plan(path: Path, screen: bool):
    spec = io.load_workload(str(path))
    profile = io.load_profile_for(spec.model, spec.profile)
    return plan(spec, profile, offerings_for(spec, None, load_catalog(None)),
                PlanOptions(trials=TRIALS, seed=0, screen=screen, jobs=1))


@pytest.mark.parametrize("path", WORKLOADS, ids=[p.stem for p in WORKLOADS])
def test_the_screen_keeps_the_choice_what_beats_the_safe_baseline_and_the_safe_alternatives(path):
    screened, full = _plan(path, True), _plan(path, False)
    assert len(full.ranked) >= len(screened.ranked)
    key = lambda r: (group_key(r.configured), r.configured.candidate.checkpoint_interval_s)  # noqa: E731
    assert key(screened.chosen) == key(full.chosen)   # the same draws: the same choice
    shown = {group_key(r.configured) for r in screened.ranked}
    certain = sorted((r for r in full.ranked if r.configured.candidate.policy in ("on-demand", "owned")
                      and r.meets_target), key=lambda r: (r.stats.cost_mean, r.stats.makespan_p50_s))
    baseline = certain[0].stats.cost_mean if certain else float("inf")
    cheaper = [group_key(r.configured) for r in full.ranked if r.meets_target and r.stats.cost_mean < baseline]
    assert [g for g in cheaper if g not in shown] == []
    # the safe alternatives: every certain plan meeting the target that no other certain plan beats on both
    # cost and finish, in full simulation, is in the screened table
    frontier, fastest = [], float("inf")
    for r in certain:
        if r.stats.makespan_p50_s < fastest:
            frontier.append(group_key(r.configured))
            fastest = r.stats.makespan_p50_s
    assert [g for g in frontier if g not in shown] == []
    # and the team's own servers, wherever they rank
    owned = [group_key(r.configured) for r in full.ranked if r.configured.candidate.policy == "owned"]
    assert [g for g in owned if g not in shown] == []


def test_each_ranked_plan_keeps_the_trials_its_figures_summarise():
    """`validate` judges a plan's bands on the plan's own trials (Ranked.samples) instead of drawing them again:
    they are the draws run_trials makes for that configuration, and the row's figures are theirs."""
    result = _plan(WORKLOADS[0], True)
    assert len(result.ranked) > 1
    for r in result.ranked[:3]:
        assert r.samples is not None and summarise(r.samples) == r.stats
    chosen = result.chosen or result.ranked[0]
    again = run_trials(chosen.configured.config, TRIALS, 0)
    assert np.array_equal(again.cost, chosen.samples.cost)
    assert np.array_equal(again.makespan_s, chosen.samples.makespan_s)
