"""The spot market as an ensemble of real capacity groups, and `costsim validate` on it."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from costsim import ensemble, montecarlo, policies
from costsim.ensemble import GroupSpec, MarketSpec
from costsim.market_fit import Span, fit_outage_families
from costsim.montecarlo import SimConfig, run_trials, summarise
from costsim.sim.job import JobParams
from costsim.sim.market import ArrayTimeline, HazardModel, TraceTimeline, intersect
from costsim.sim.trial import MarketPrice, run_trial
from costsim.validate import crps, replay_timelines

GAP = 600.0


def _trace(path, ticks):
    path.write_text(json.dumps({"metadata": {"gap_seconds": GAP}, "data": ticks}))
    return str(path)


def _pattern(up: int, down: int, length: int, seed: int = 0) -> list[int]:
    """Unavailable stretches of about `down` ticks and available ones of about `up` (geometric, seeded),
    alternating from an unavailable one (so the first life is not left-truncated)."""
    rng = np.random.default_rng(seed)
    ticks: list[int] = []
    while len(ticks) < length:
        ticks += [1] * int(rng.geometric(1 / down)) + [0] * int(rng.geometric(1 / up))
    return ticks[:length]


@pytest.fixture
def groups(tmp_path):
    folder = tmp_path / "zones"
    folder.mkdir()
    _trace(folder / "good_v100_1.json", _pattern(up=100, down=1, length=3000))
    _trace(folder / "bad_v100_1.json", _pattern(up=1, down=100, length=3000))
    _trace(folder / "mid_v100_1.json", _pattern(up=12, down=12, length=3000))
    return folder


def test_a_replayed_window_is_the_trace_from_its_start(groups):
    """Replay keeps capacity as it happened: a window that starts mid-trace is the trace's ticks from there."""
    spec = MarketSpec(name="t", groups=ensemble.groups_from_paths([str(groups)]), replay_share=1.0)
    market = ensemble.build(spec)
    mid = market.groups[[g.name for g in market.groups].index("zones/mid")]
    ticks = json.loads((groups / "mid_v100_1.json").read_text())["data"]
    horizon = 500 * GAP
    for offset_ticks in (0, 7, 30):
        replayed = replay_timelines(mid, horizon, GAP, 1)
        timeline = replayed[offset_ticks]   # one window a tick apart
        truth = TraceTimeline(ticks[offset_ticks:offset_ticks + 500], GAP)
        for t in np.arange(0, horizon, GAP / 3):
            assert timeline.available(t) == truth.available(t), (offset_ticks, t)
    assert len(replay_timelines(mid, horizon, 6 * 3600, 1)) == math.floor((3000 - 500) * GAP / (6 * 3600)) + 1


def test_a_gang_runs_only_while_every_node_can():
    a = (np.array([0.0, 100.0]), np.array([50.0, 200.0]))
    b = (np.array([20.0, 150.0]), np.array([120.0, 400.0]))
    starts, ends = intersect(a, b)
    assert starts.tolist() == [20.0, 100.0, 150.0] and ends.tolist() == [50.0, 120.0, 200.0]
    timeline = ArrayTimeline(starts, ends)
    assert not timeline.available(10.0) and timeline.available(30.0) and not timeline.available(130.0)
    assert timeline.reclaim_time(160.0) == 200.0 and math.isinf(timeline.next_available(200.0))


def test_each_trial_faces_one_group_in_turn_and_the_stats_say_which_does_worst(groups):
    """Trial i draws group i mod G (common capacity across candidates); P(deadline) per group shows the bad
    zone, where spot-only never finishes a 3-hour job whose capacity lasts 10 minutes at a time."""
    market = ensemble.build(MarketSpec(name="t", groups=ensemble.groups_from_paths([str(groups)]), replay_share=0.5))
    params = JobParams(work_s=3 * 3600, deadline_s=12 * 3600, checkpoint_interval_s=1800, checkpoint_s=30,
                       changeover_s=300, horizon_s=48 * 3600)
    config = SimConfig(params=params, policy="spot-only", prices={"spot": MarketPrice(per_hour=1.0)}, market=market)
    samples = run_trials(config, 60, seed=3)
    assert samples.group.tolist() == [i % 3 for i in range(60)]
    stats = summarise(samples)
    assert stats.worst_group == "zones/bad" and stats.group_p_deadline["zones/bad"] == 0.0
    assert stats.group_p_deadline["zones/good"] == 1.0
    assert stats.p_deadline == pytest.approx(np.mean(list(stats.group_p_deadline.values())))
    again = run_trials(config, 60, seed=3)   # seeded: the same draws
    assert np.array_equal(samples.cost, again.cost)


@pytest.mark.parametrize("jobs", [1, 2])
def test_configurations_drawing_the_same_capacity_build_it_once_and_get_what_each_would_alone(groups, jobs,
                                                                                              monkeypatch):
    """run_many batches the configurations of one ensemble, gang and horizon (share_key) and builds each trial's
    capacity once for them: every configuration's trials are those it draws alone, whatever the batches and
    processes; a drawn hazard's lazily extended timeline is never shared."""
    market = ensemble.build(MarketSpec(name="t", groups=ensemble.groups_from_paths([str(groups)]), replay_share=0.5))
    params = JobParams(work_s=3 * 3600, deadline_s=12 * 3600, checkpoint_interval_s=1800, checkpoint_s=30,
                       changeover_s=300, horizon_s=48 * 3600)
    prices = {"spot": MarketPrice(per_hour=1.0), "on-demand": MarketPrice(per_hour=3.0)}
    configs = [SimConfig(params=params, policy=policy, prices=prices, market=market, nodes=nodes)
               for nodes in (1, 2) for policy in ("spot-only", "greedy")]
    configs.append(replace(configs[0], params=replace(params, checkpoint_interval_s=900)))
    configs.append(SimConfig(params=params, policy="spot-only", prices=prices,
                             hazard=HazardModel(mtbf_s=4 * 3600, wait_mean_s=1800)))
    assert [sorted(b) for b in montecarlo.batches(configs, 1)] == [[5], [0, 1, 4], [2, 3]]
    assert len(montecarlo.batches(configs, 4)) == 4 and len(montecarlo.batches(configs[:1], 4)) == 1
    built = []
    timeline = ensemble.MarketEnsemble.timeline
    monkeypatch.setattr(ensemble.MarketEnsemble, "timeline", lambda self, *a: built.append(a[1:]) or timeline(self, *a))
    together = montecarlo.run_many(configs, 40, seed=5, jobs=jobs)
    if jobs == 1:   # in this process: once a trial for each gang size
        assert sorted(built) == sorted((trial, nodes, params.horizon_s) for trial in range(40) for nodes in (1, 2))
    for config, samples in zip(configs, together):
        alone = run_trials(config, 40, seed=5)
        assert np.array_equal(samples.cost, alone.cost) and np.array_equal(samples.makespan_s, alone.makespan_s)
        assert np.array_equal(samples.group, alone.group)
    assert not np.array_equal(together[0].cost, together[4].cost)   # the interval matters on the same capacity


def test_outage_lengths_from_a_lognormal_choose_the_lognormal_and_recover_its_parameters():
    rng = np.random.default_rng(7)
    mu, sigma, n = math.log(3600.0), 1.3, 3000
    drawn = rng.lognormal(mu, sigma, n)
    cut = 6 * 3600.0   # right-censored at 6 h, as a trace's end cuts an outage
    spans = [Span(min(d, cut), event=bool(d < cut)) for d in drawn]
    fits = fit_outage_families(spans)
    assert [f.family for f in fits][0] == "lognormal"
    best = fits[0]
    se_mu, se_log_sigma = math.sqrt(best.cov[0][0]), math.sqrt(best.cov[1][1])
    assert abs(best.params[0] - mu) < 4 * se_mu
    assert abs(best.params[1] - math.log(sigma)) < 4 * se_log_sigma
    assert fits[0].aic < fits[-1].aic


def test_crps_of_a_point_forecast_is_the_absolute_error_and_a_spread_forecast_scores_its_spread():
    assert crps(np.full(50, 10.0), np.array([13.0, 7.0])) == pytest.approx(3.0)
    samples = np.random.default_rng(0).normal(0.0, 1.0, 20000)
    # a standard normal forecast against its own mean: CRPS = 2 phi(0) - 1/sqrt(pi) (Gneiting & Raftery)
    expected = 2 * (1 / math.sqrt(2 * math.pi)) - 1 / math.sqrt(math.pi)
    se = 1.0 / math.sqrt(len(samples))
    assert crps(samples, np.array([0.0])) == pytest.approx(expected, abs=4 * se)


def test_plan_draws_from_the_ensemble_and_says_so(run_cli, tmp_path, groups):
    out = tmp_path / "plan.json"
    result = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--risk", "0.1",
                     "--trials", "60", "--market", "traces", "--market-trace", str(groups), "--out", str(out),
                     "--format", "json")
    assert result.exit_code == 1   # no spot-only plan meets 0.9 when one zone in three never has capacity
    doc = result.json()
    spot = [c for c in doc["candidates"] if c["policy"] == "spot-only"]
    assert spot and all(c["worst_group"]["name"] == "zones/bad" and c["worst_group"]["p_deadline"] == 0.0 for c in spot)
    assert all(c["p_deadline"] <= 2 / 3 + 1e-9 for c in spot)
    # on-demand never buys spot: no capacity group is its worst (its trials differ by the step time's spread alone)
    on_demand = [c for c in run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--policy", "on-demand", "--trials",
                                    "60", "--market-trace", str(groups), "--out", str(out), "--format",
                                    "json").json()["candidates"]]
    assert on_demand and all(c["policy"] == "on-demand" and c["worst_group"] is None for c in on_demand), on_demand
    joined = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "40", "--market-trace", str(groups),
                     "--out", str(out))
    assert joined.exit_code == 0, joined.stderr
    plan = json.loads(out.read_text())
    names = [g["name"] for g in plan["prediction"]["market"]["groups"]]
    assert "zones/bad" in names and "2023/us-east-1a" in names   # yours join the shipped groups
    for args, says in ((("--market", "traces"), "give --market-trace"),
                       (("--market", "fit", "--market-trace", str(groups)), "--market fit draws from one fitted"),
                       (("--market-trace", str(tmp_path / "nowhere")), "not found"),
                       (("--gpu", "H200", "--nodes", "3"), "--nodes: no candidate has 3 nodes; allowed pairs:"),
                       (("--gpu", "H200", "--policy", "owned"), "--policy: no candidate has policy owned")):
        refused = run_cli("plan", "--workload", "sdxl", "--trials", "40", "--out", str(out), *args)
        assert refused.exit_code == 2 and says in refused.stderr and "Traceback" not in refused.stderr


def test_the_old_single_fit_is_one_flag_away_and_replays_exactly(run_cli, tmp_path):
    out = tmp_path / "plan.json"
    made = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--market", "fit", "--trials", "100",
                   "--out", str(out))
    assert made.exit_code == 0, made.stderr
    plan = json.loads(out.read_text())
    assert plan["prediction"]["market"] is None and plan["policy"]["name"] == "spot-only"
    replayed = run_cli("simulate", "--plan", str(out), "--format", "json").json()
    assert replayed["deadline_met"] == plan["prediction"]["p_deadline"]
    assert replayed["cost"]["mean"] == pytest.approx(plan["prediction"]["cost"]["mean"], rel=1e-12)


def test_validate_leaves_each_group_out_and_finds_the_promise_a_bad_zone_breaks(run_cli, tmp_path, groups):
    """Planned without the bad zone, spot-only promises what the good and middling zones give; on the bad
    zone's real windows it never finishes: the error is the whole promise, and the goal is not met."""
    plot = tmp_path / "v.png"
    result = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--trials", "40",
                     "--market", "traces", "--market-trace", str(groups), "--format", "json", "--plot", str(plot))
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    by = {g["group"]: g for g in doc["groups"]}
    assert set(by) == {"zones/good", "zones/bad", "zones/mid"}
    bad = by["zones/bad"]
    assert bad["realised_p_deadline"] == 0.0 and bad["stated_p_deadline"] >= 0.5 and bad["honest"] is False
    horizon_s = 4 * 36 * 3600   # four deadlines: the planner's horizon for the shipped workload
    assert bad["windows"] == math.floor((3000 * GAP - horizon_s) / (6 * 3600)) + 1
    # its windows overlap: standard errors over blocks of horizon / 6 h = 24 windows, not over windows
    assert bad["blocks"] == math.ceil(bad["windows"] / 24) == 3
    assert bad["realised_se"] == 0.0 and bad["within_noise"] is False   # never met: no noise about it
    assert doc["within_noise_groups"] == sum(bool(g["within_noise"]) for g in doc["groups"])
    good = by["zones/good"]
    assert good["realised_p_deadline"] == 1.0 and good["p_error"] < 0
    # judged on their own parts of the ensemble the groups miss as they do on their windows: the market
    # describes each group; they differ from one another by more than a band of the others can cover
    assert bad["if_right"]["p_deadline"] == 0.0 and bad["if_right"]["honest"] is False
    assert good["if_right"]["p_deadline"] == 1.0 and good["if_right"]["trials"] == 1000
    assert doc["honest_if_right_groups"] == sum(bool(g["if_right"]["honest"]) for g in doc["groups"])
    assert doc["pooled"]["groups"] == 3 and doc["reliability"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a process a group (--jobs 2) or every group in this one, each plan on one process: the same figures
    for jobs in ("1", "2"):
        again = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--trials", "40",
                        "--market", "traces", "--market-trace", str(groups), "--format", "json", "--jobs", jobs)
        assert again.exit_code == 0 and again.json()["groups"] == doc["groups"]
    # a plan's bad input, met in a group's process, still gives one line and exit 2
    refused = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--trials", "40", "--market", "traces",
                      "--market-trace", str(groups), "--deadline", "10m", "--jobs", "2")
    assert refused.exit_code == 2 and "--deadline: 10.0m is shorter" in refused.stderr
    assert "Traceback" not in refused.stderr
    table = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--trials", "40",
                    "--market", "traces", "--market-trace", str(groups), "--group", "zones/bad")
    assert table.exit_code == 0 and "zones/bad" in table.stdout and "\npooled " in table.stdout
    assert "zones/good " not in table.stdout   # only the group asked for is left out
    assert "A gang of n nodes runs while each of n windows" in " ".join(table.stdout.split())   # nodes 1, 2, 4 ...
    for args, says in ((("--market", "fit"), "no capacity groups"), (("--group", "nowhere"), "unknown 'nowhere'")):
        refused = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--trials", "40", "--market-trace",
                          str(groups), *args)
        assert refused.exit_code == 2 and says in refused.stderr and "Traceback" not in refused.stderr


def test_groups_alike_meet_the_goal_if_the_market_is_right(run_cli, tmp_path):
    """Two zones drawn from one capacity process (two seeds, 3,300 h each): left out in turn, each zone's own
    part of the ensemble lands inside the other's band about 80% of the time and meets its P(deadline), so
    `if right` says the goal is reachable; the bound is four standard errors of a coverage estimated from
    1,000 draws against a band from 400 (each end's quantile off by sqrt(0.1 x 0.9 / 400))."""
    folder = tmp_path / "twins"
    folder.mkdir()
    for seed in (1, 2):
        _trace(folder / f"z{seed}_v100_1.json", _pattern(up=30, down=30, length=20000, seed=seed))
    result = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--trials", "400",
                     "--market", "traces", "--market-trace", str(folder), "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    for group in doc["groups"]:
        right = group["if_right"]
        n = right["trials"]
        se = math.sqrt(0.8 * 0.2 / n + 2 * 0.1 * 0.9 / 400)
        assert all(abs(right[k] - 0.8) <= 4 * se for k in ("cost_coverage", "finish_coverage")), right
        p = group["stated_p_deadline"]
        assert abs(p - right["p_deadline"]) <= 4 * math.sqrt(p * (1 - p) * (1 / 400 + 1 / n)) + 1e-9, (p, right)
        assert right["honest"] is True
    assert doc["honest_if_right_groups"] == 2


def test_a_spot_trial_on_a_group_never_available_never_finishes(tmp_path):
    never = _trace(tmp_path / "never.json", [1] * 100 + [0] + [1] * 50 + [0] + [1] * 100)
    group = ensemble.build_group(GroupSpec(name="never", period="p", paths=(never,)))
    params = JobParams(work_s=3600, deadline_s=7200, checkpoint_interval_s=600, checkpoint_s=10, changeover_s=300,
                       horizon_s=10 * 3600)
    for timeline in replay_timelines(group, params.horizon_s, 3600, 1) or [ArrayTimeline([], [])]:
        outcome = run_trial(params, policies.get("spot-only"), timeline, {"spot": MarketPrice(per_hour=1.0)})
        assert not outcome.finished


def test_coverage_of_the_central_band_is_eighty_percent_for_a_calibrated_forecast_even_with_atoms():
    from costsim.validate import coverage
    rng = np.random.default_rng(5)
    samples, observed = rng.lognormal(0, 1, 4000), rng.lognormal(0, 1, 4000)
    se = math.sqrt(0.8 * 0.2 / len(observed))
    assert coverage(samples, observed) == pytest.approx(0.8, abs=4 * se)
    # a forecast with an atom (half the trials finish exactly at the fall-back time), observations from it
    atom = np.where(rng.random(4000) < 0.5, 10.0, rng.uniform(0, 10, 4000))
    truth = np.where(rng.random(4000) < 0.5, 10.0, rng.uniform(0, 10, 4000))
    assert coverage(atom, truth) == pytest.approx(0.8, abs=4 * se)
    assert np.mean((truth >= np.quantile(atom, 0.1)) & (truth <= np.quantile(atom, 0.9))) > 0.88   # counted naively
    assert coverage(samples, samples * 0 + 1e9) == 0.0 and coverage(np.full(10, 3.0), np.array([3.0])) == \
        pytest.approx(0.8)   # far outside; a point forecast met exactly: the central 80% of its atom


def test_overlapping_windows_are_counted_in_blocks_for_their_standard_errors(groups):
    """72 h windows 6 h apart share 11/12 of their span: the realised shares' standard errors must count
    blocks of overlapping windows, not windows."""
    from costsim.validate import cluster_se, window_blocks
    spec = MarketSpec(name="t", groups=ensemble.groups_from_paths([str(groups)]), replay_share=1.0)
    mid = next(g for g in ensemble.build(spec).groups if g.name == "zones/mid")
    horizon, stride = 500 * GAP, 36 * GAP
    blocks = window_blocks(mid, horizon, stride)
    assert len(blocks) == len(replay_timelines(mid, horizon, stride, 1)) == 70
    assert np.bincount(blocks).tolist() == [14] * 5                        # ceil(500 / 36) windows a block
    # The formula: blocks of equal values are as many draws as blocks; blocks of one are windows
    rng = np.random.default_rng(1)
    means = rng.normal(size=8)
    assert cluster_se(np.repeat(means, 5), np.repeat(np.arange(8), 5)) == pytest.approx(
        np.std(means, ddof=1) / math.sqrt(8))
    values = rng.normal(size=40)
    assert cluster_se(values, np.arange(40)) == pytest.approx(np.std(values, ddof=1) / math.sqrt(40))
    assert math.isnan(cluster_se(values, np.zeros(40, dtype=np.int64)))   # one block: no spread to measure


def test_the_block_standard_error_is_near_the_true_spread_of_a_mean_over_overlapping_windows():
    """300 traces of alternating stretches (about 60 ticks each), 109 windows of 300 ticks 25 apart on each:
    the spread of the windows' mean availability from trace to trace against the standard errors one trace
    gives. Counting windows as independent says 0.26 of the truth; blocks, 0.79 (fewer than ten blocks a
    trace, each correlated a little with the next: the estimate is still low, and the tolerance allows it).
    The truth's own standard error from 300 traces is about 4%."""
    from costsim.validate import cluster_se
    horizon, stride = 300, 25
    per_block = math.ceil(horizon / stride)
    means, blocked, independent = [], [], []
    for seed in range(300):
        ticks = np.array(_pattern(up=60, down=60, length=3000, seed=seed))
        offsets = np.arange(0, 3000 - horizon + 1, stride)
        available = np.array([1.0 - ticks[o:o + horizon].mean() for o in offsets])
        means.append(available.mean())
        blocked.append(cluster_se(available, np.arange(len(offsets)) // per_block))
        independent.append(available.std(ddof=1) / math.sqrt(len(offsets)))
    truth = float(np.std(means, ddof=1))
    assert 0.65 <= np.mean(blocked) / truth <= 1.2
    assert np.mean(independent) / truth < 0.4


def test_a_windows_past_share_counts_the_capacity_before_its_start():
    """scripts/recent_capacity_forecast.py weighs windows by the share of the day before them with capacity:
    capacity [0, 10 h) and [30 h, 100 h), windows 36 h long every 6 h, 24 h looked back."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "recent_capacity_forecast.py"
    loaded = importlib.util.spec_from_file_location("recent_capacity_forecast", path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    h = 3600.0
    window = ensemble.Window(starts=np.array([0.0, 30 * h]), ends=np.array([10 * h, 100 * h]), length_s=100 * h,
                             slide=True)
    group = ensemble.Group(name="g", period="p", windows=(window,), fit=None)   # windows only: no fit needed
    shares = module.past_shares(group, 36 * h, 6 * h, 24 * h)
    assert len(shares) == len(replay_timelines(group, 36 * h, 6 * h, 1)) == 11   # offsets 0, 6 h ... 60 h
    assert np.isnan(shares[:4]).all()   # offsets 0-18 h: less than a day before them
    assert shares[4:7].tolist() == pytest.approx([10 / 24, 4 / 24, 6 / 24])   # 24 h, 30 h, 36 h
    assert shares[-1] == pytest.approx(1.0)   # 60 h: [36 h, 60 h) all up
    bundle = ensemble.Group(name="b", period="p", windows=(ensemble.Window(
        starts=np.array([0.0]), ends=np.array([h]), length_s=40 * h),), fit=None)
    assert np.isnan(module.past_shares(bundle, 36 * h, 6 * h, 24 * h)).all()   # a bundle's window has no past


def test_a_recent_capacity_weighs_each_groups_windows_by_how_like_their_past_was(tmp_path):
    """costsim.ensemble.Recent: a group whose pasts were like the recent capacity gets the trials, and within a
    group, the starts whose past was like it; a bundle (no past) gets none."""
    folder = tmp_path / "zones"
    folder.mkdir()
    _trace(folder / "good_v100_1.json", _pattern(up=400, down=2, length=3000, seed=1))
    _trace(folder / "bad_v100_1.json", _pattern(up=2, down=400, length=3000, seed=2))
    groups = ensemble.groups_from_paths([str(folder)])
    past = 24 * 3600.0
    for share, likely in ((1.0, "zones/good"), (0.0, "zones/bad")):
        recent = ensemble.Recent(share=share, past_s=past, bandwidth=0.1, source="test")
        market = ensemble.build(MarketSpec(name="t", groups=groups, recent=recent))
        picked = [market.names[market.group_of(trial)] for trial in range(400)]
        assert picked.count(likely) > 0.9 * len(picked), (share, picked.count(likely))
        group = market.groups[market.names.index(likely)]
        starts = market.conditioning(1).starts[market.names.index(likely)]
        assert starts is not None and starts.p.sum() == pytest.approx(1.0)
        pasts = np.array([ensemble.past_share(group.windows[w], o, past) for w, o in zip(starts.windows, starts.offsets)])
        assert abs(float(np.sum(starts.p * pasts)) - share) < abs(float(np.mean(pasts)) - share) + 1e-9
        assert np.all(starts.offsets >= past)   # every start has its whole past in the trace
    # trials follow the weights the same way for every configuration (common capacity)
    market = ensemble.build(MarketSpec(name="t", groups=groups, recent=ensemble.Recent(share=0.5, past_s=past)))
    assert [market.group_of(t) for t in range(50)] == [market.group_of(t) for t in range(50)]
    bundle = ensemble.Group(name="b", period="p", windows=(ensemble.Window(
        starts=np.array([0.0]), ends=np.array([3600.0]), length_s=40 * 3600.0),), fit=None)
    assert ensemble.conditioned_starts(bundle, ensemble.Recent(share=0.5, past_s=past)) is None


def test_the_state_now_read_from_a_recent_trace_is_the_one_a_replayed_start_had(tmp_path):
    """A recent trace's last tick and how long it had held (capped at the recent past) are what
    ensemble.state_before says of a window of the same ticks at the same point: the plan's side and the
    replays' side of the kernel read one past the same way, at every cut, up and down, short and capped."""
    ticks = _pattern(up=30, down=20, length=1500, seed=3) + [1] * 200 + [0] * 300   # the tail: a long outage, a long life
    folder = tmp_path / "z"
    folder.mkdir()
    (window,), _, _ = ensemble.windows_of(_trace(folder / "z_v100_1.json", ticks))
    past = 24 * 3600.0
    needed = int(past / GAP)
    seen = set()
    for cut in list(range(needed, 1500, 37)) + [1700, 1800, 1900, 1950, 2000]:
        recent = ensemble.recent_from_trace(_trace(tmp_path / "cut.json", ticks[:cut]), past)
        state = ensemble.state_before(window, cut * GAP, past)
        assert recent.state == state, cut
        assert recent.share == pytest.approx(ensemble.past_share(window, cut * GAP, past)), cut
        run = next((i for i in range(1, cut + 1) if ticks[cut - i] != ticks[cut - 1]), cut + 1) - 1
        assert state.up == (ticks[cut - 1] == 0) and state.age_s == min(run * GAP, past), cut
        seen.add((state.up, state.age_s == past))
    assert seen == {(True, False), (False, False), (True, True), (False, True)}   # every kind of state was tried
    counted = ensemble.recent_from_trace(_trace(tmp_path / "count.json", [2] * 150 + [1] * 10), past)
    assert counted.gang_states == (ensemble.State(up=True, age_s=past), ensemble.State(up=False, age_s=10 * GAP))
    assert counted.at(2).state == ensemble.State(up=False, age_s=10 * GAP) and counted.at(9).state == counted.at(2).state


def test_a_recent_state_weighs_only_starts_in_that_state_and_most_those_of_like_age(tmp_path):
    """Told the market is down now (since some hours), every replayed start with weight came just after an outage
    of about that length: none just after capacity, and the starts of outages far younger or older weigh less;
    a plan made from a market state says so in plan.json and replays from it."""
    folder = tmp_path / "zones"
    folder.mkdir()
    _trace(folder / "z_v100_1.json", _pattern(up=40, down=40, length=6000, seed=5))
    groups = ensemble.groups_from_paths([str(folder)])
    past = 24 * 3600.0
    for up, age in ((False, 6 * 3600.0), (True, 3600.0), (True, past)):
        recent = ensemble.Recent(share=0.5, past_s=past, state=ensemble.State(up=up, age_s=age))
        market = ensemble.build(MarketSpec(name="t", groups=groups, recent=recent))
        starts = market.conditioning(1).starts[0]
        assert starts is not None
        states = [ensemble.state_before(market.groups[0].windows[w], o, past)
                  for w, o in zip(starts.windows, starts.offsets)]
        weighed = starts.p > 0
        assert all(s.up == up for s, w in zip(states, weighed) if w) and weighed.any()
        assert any(s.up != up for s in states)   # the other state's starts were there, and got nothing
        ages = np.log1p(np.array([s.age_s for s in states]) / 3600)
        near = np.abs(ages - math.log1p(age / 3600)) < ensemble.AGE_BANDWIDTH
        same = np.array([s.up == up for s in states])
        assert starts.p[near & same].mean() > 2 * starts.p[~near & same].mean(), (up, age)
        blind = ensemble.conditioned_starts(market.groups[0], ensemble.Recent(share=0.5, past_s=past))
        assert blind is not None and np.all(blind.p[~same] > 0)   # told only the share: both states weigh
        # the state without its age: the starts in that state weigh as told the share alone, the others nothing
        unaged = ensemble.conditioned_starts(market.groups[0], ensemble.Recent(
            share=0.5, past_s=past, state=ensemble.State(up=up, age_s=None)))
        assert unaged is not None and np.all(unaged.p[~same] == 0)
        assert unaged.p[same] == pytest.approx(blind.p[same] / blind.p[same].sum())


def test_plan_with_the_recent_capacity_states_what_such_a_past_was_followed_by(run_cli, tmp_path, groups):
    """--recent-share / --recent-trace: the spot-only plan's P(deadline) after a poor recent past is below the one
    after a good past, by more than four standard errors; the plan says so and plan.json carries it; bad uses
    are one line."""
    stated = {}
    for share in (0.05, 0.95):
        result = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--nodes", "1",
                         "--risk", "0.9", "--trials", "200", "--recent-share", str(share), "--recent-past", "24h",
                         "--out", str(tmp_path / f"plan-{share}.json"), "--format", "json")
        assert result.exit_code in (0, 1), result.stderr
        best = min((c for c in result.json()["candidates"] if c["policy"] == "spot-only"),
                   key=lambda c: c["cost"]["mean"])
        stated[share] = best["p_deadline"]
    se = math.sqrt(sum(p * (1 - p) / 200 for p in stated.values())) or 1 / 200
    assert stated[0.95] - stated[0.05] > 4 * se, stated
    always_up = _trace(tmp_path / "mine_v100_1.json", [0] * 200)   # 33 h of 10-minute ticks, all with capacity
    out = tmp_path / "plan.json"
    told = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "40", "--recent-trace", always_up,
                   "--recent-past", "24h", "--out", str(out))
    assert told.exit_code == 0, told.stderr
    assert "recent capacity: 100% of the last 24 h had spot" in " ".join(told.stdout.split())
    assert "not told" not in told.stdout
    blind = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "40", "--out", str(tmp_path / "b.json"))
    assert blind.exit_code == 0 and "recent capacity: not told" in " ".join(blind.stdout.split())   # and how to tell it
    fitted = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "40", "--market", "fit",
                     "--out", str(tmp_path / "f.json"))   # one fitted model: nothing to weigh by a past
    assert fitted.exit_code == 0 and "recent capacity" not in fitted.stdout
    on_demand = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "40", "--policy", "on-demand",
                        "--out", str(tmp_path / "o.json"))   # no trial meets the spot market
    assert on_demand.exit_code == 0 and "recent capacity" not in on_demand.stdout
    recent = json.loads(out.read_text())["prediction"]["market"]["recent"]
    assert recent == {"share": 1.0, "past_s": 86400.0, "bandwidth": 0.1, "source": always_up,
                      "state": {"up": True, "age_s": 86400.0}}   # up since before the past it looks at
    replayed = run_cli("simulate", "--plan", str(out), "--format", "json")   # the plan replays on its own market
    assert replayed.exit_code == 0, replayed.stderr
    none = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "40", "--recent-share", "0",
                   "--recent-state", "down", "--out", str(out))   # no capacity at all lately: a share, and it reads back
    assert none.exit_code == 0 and json.loads(out.read_text())["prediction"]["market"]["recent"]["share"] == 0.0
    assert run_cli("simulate", "--plan", str(out)).exit_code == 0
    short = _trace(tmp_path / "short_v100_1.json", [0] * 10)
    for args, says in ((("--recent-trace", short), "short_v100_1.json: data: 10 ticks"),
                       (("--recent-trace", always_up, "--recent-share", "0.5"), "give one"),
                       (("--recent-share", "1.5"), "--recent-share"),
                       (("--market", "fit", "--recent-share", "0.5"), "no spot offering here draws from an ensemble"),
                       (("--recent-share", "0.5", "--recent-past", "9000h"), "give a shorter --recent-past"),
                       (("--recent-past", "24h"), "go with --recent-trace or --recent-share"),
                       (("--recent-state", "up"), "--recent-state goes with --recent-share"),
                       (("--recent-trace", always_up, "--recent-state", "up"), "says its state itself"),
                       (("--recent-share", "0.5", "--recent-state-age", "3h"), "give --recent-state too"),
                       (("--recent-share", "1", "--recent-state", "down"), "--recent-state down with --recent-share 1"),
                       (("--recent-share", "0.5", "--recent-state", "sideways"), "--recent-state"),
                       (("--recent-share", "0.5", "--recent-state", "up", "--recent-state-age", "soon"),
                        "--recent-state-age")):
        refused = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "20", "--out", str(out), *args)
        assert refused.exit_code == 2 and says in refused.stderr and "Traceback" not in refused.stderr, refused.stderr


def test_plan_told_the_state_now_states_what_followed_that_state_and_plan_json_keeps_it(run_cli, tmp_path):
    """The same recent share, down for a day against up for a day, on the shipped market: the spot-only plan's
    P(deadline) after the outage is below the one after the life by more than four standard errors; plan.json
    carries the state, simulate --plan replays it, and a plan.json whose state is not {up, age_s} is one line."""
    stated = {}
    for state in ("down", "up"):
        out = tmp_path / f"plan-{state}.json"
        result = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--nodes", "1",
                         "--trials", "200", "--recent-share", "0.5", "--recent-state", state, "--recent-state-age",
                         "24h", "--out", str(out), "--format", "json")
        assert result.exit_code in (0, 1), result.stderr
        best = min(result.json()["candidates"], key=lambda c: c["cost"]["mean"])
        stated[state] = best["p_deadline"]
    se = math.sqrt(sum(p * (1 - p) / 200 for p in stated.values())) or 1 / 200
    assert stated["up"] - stated["down"] > 4 * se, stated
    unaged = tmp_path / "plan-unaged.json"
    result = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--nodes", "1", "--trials", "20",
                     "--recent-share", "0.5", "--recent-state", "down", "--out", str(unaged))   # greedy meets it
    assert result.exit_code == 0, result.stderr
    assert "50% of the last 72 h had spot, down now" in " ".join(result.stdout.split())
    assert json.loads(unaged.read_text())["prediction"]["market"]["recent"]["state"] == {"up": False, "age_s": None}
    out = tmp_path / "plan-up.json"
    doc = json.loads(out.read_text())
    assert doc["prediction"]["market"]["recent"]["state"] == {"up": True, "age_s": 86400.0}
    replayed = run_cli("simulate", "--plan", str(out), "--trials", "40", "--format", "json")
    assert replayed.exit_code == 0, replayed.stderr
    doc["prediction"]["market"]["recent"]["state"] = {"up": "yes", "age_s": 3600}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    refused = run_cli("simulate", "--plan", str(bad))
    assert refused.exit_code == 2 and "recent.state.up" in refused.stderr and "true or false" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_validate_told_each_windows_recent_capacity_states_closer_to_what_happened(run_cli, tmp_path):
    """costsim validate --recent-past: a zone that had capacity for 12 days, lost it for 4 and had it again, left
    out of a market of a zone nearly always up and one nearly always down: told nothing, the plan states the
    others' average for every window; told each window's last day, it states what followed such a day in the
    others, and its error on the held-out zone is smaller."""
    folder = tmp_path / "zones"
    folder.mkdir()
    _trace(folder / "up_v100_1.json", _pattern(up=400, down=2, length=3000, seed=1))
    _trace(folder / "down_v100_1.json", _pattern(up=2, down=400, length=3000, seed=2))
    _trace(folder / "regimes_v100_1.json", [1] * 6 + [0] * 1728 + [1] * 576 + [0] * 690)   # 10-minute ticks
    args = ("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--nodes", "1", "--trials",
            "60", "--market", "traces", "--market-trace", str(folder), "--group", "zones/regimes", "--format", "json")
    blind = run_cli(*args)
    told = run_cli(*args, "--recent-past", "24h")
    assert blind.exit_code == 0 and told.exit_code == 0, blind.stderr + told.stderr
    (b,), (t,) = blind.json()["groups"], told.json()["groups"]
    # the windows that start within the trace's first day cannot be told a day's past: left out (offsets 0-18 h)
    assert t["no_past"] == 4 and t["windows"] == b["windows"] - 4 and b["no_past"] == 0
    assert abs(t["p_error"]) < abs(b["p_error"]) - 0.1, (b["p_error"], t["p_error"])
    assert t["if_right"]["p_deadline"] is None   # not judged when told the recent capacity
    assert t["stated_cost_mean"] > 0 and b["stated_cost_mean"] > 0   # the windows' plans' mean, told
    alone = run_cli(*args, "--recent-bandwidth", "0.2")
    assert alone.exit_code == 2 and "--recent-bandwidth goes with --recent-past" in alone.stderr
    alone = run_cli(*args, "--no-recent-state")
    assert alone.exit_code == 2 and "--no-recent-state goes with --recent-past" in alone.stderr
    shares_only = run_cli(*args, "--recent-past", "24h", "--no-recent-state")   # as --recent-share alone tells
    assert shares_only.exit_code == 0, shares_only.stderr
    (o,) = shares_only.json()["groups"]
    assert abs(o["p_error"]) < abs(b["p_error"]) - 0.1, (b["p_error"], o["p_error"])


def _bundle(path, windows, start_times=None):
    import gzip
    doc = {"gap_seconds": GAP, "windows": windows}
    if start_times is not None:
        doc["start_times"] = start_times
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return str(path)


def _cut(trace: list[int], count: int, seed: int) -> tuple[list[str], list[str]]:
    """`count` windows cut from `trace` at random ticks, each to its end, as the Can't Be Late bundle was, with
    start times a fifth of a tick off the grid at most (each window's ticks begin at its own time)."""
    import datetime
    rng = np.random.default_rng(seed)
    t0 = datetime.datetime(2022, 10, 26, tzinfo=datetime.timezone.utc)
    windows, times = [], []
    for first in sorted(rng.integers(0, len(trace) - 200, count).tolist()):
        windows.append("".join(map(str, trace[first:])))
        when = t0 + datetime.timedelta(seconds=first * GAP + float(rng.uniform(-0.2, 0.2)) * GAP)
        times.append(when.strftime("%Y-%m-%dT%H:%M:%S.000Z"))
    return windows, times


def test_a_bundle_cut_from_one_trace_is_stitched_back_and_its_windows_keep_their_past(tmp_path):
    """io.specs.bundle_timeline: windows cut from one trace (with their start times) give that trace back, each
    window where it started; its lives are counted once (as the trace's own), not once a window; a window's past
    on the stitched trace is the trace's; without start times, or cut from different traces, nothing is stitched."""
    from costsim.errors import InputError
    from costsim.io.market import read_market
    from costsim.io.specs import bundle_timeline
    trace = _pattern(up=60, down=20, length=3000, seed=3)
    windows, times = _cut(trace, 40, seed=4)
    path = _bundle(tmp_path / "b.json.gz", windows, times)
    ticks, gap_s, origins = bundle_timeline(path)
    first = len(trace) - max(len(w) for w in windows)
    assert gap_s == GAP and ticks.tolist() == trace[first:]
    assert [o + first for o in origins] == [len(trace) - len(w) for w in windows]
    stitched, lives, _ = ensemble.windows_of(path)
    _, own_lives, _ = ensemble.windows_of(_trace(tmp_path / "t.json", trace[first:]))
    assert len(lives) == len(own_lives)   # once, not once for every window that overlaps a life
    _, each_lives, _ = ensemble.windows_of(_bundle(tmp_path / "plain.json.gz", windows))
    assert len(each_lives) > 5 * len(own_lives)   # the same lives, counted again and again
    # `costsim calibrate --market BUNDLE` counts them once too
    assert [len(v[0]) for v in read_market([path]).values()] == [len(own_lives)]
    past = 24 * 3600.0
    for window, origin in zip(stitched, origins):
        assert window.origin == origin * GAP and not window.slide
        if window.origin >= past:
            lo = int(window.origin / GAP) - int(past / GAP)
            expected = 1 - sum(trace[first + lo:first + int(window.origin / GAP)]) / (past / GAP)
            assert ensemble.past_share(window, window.origin, past) == pytest.approx(expected)
    assert bundle_timeline(tmp_path / "plain.json.gz") is None   # no start times
    other, _ = _cut(_pattern(up=60, down=20, length=3000, seed=5), 40, seed=4)
    mixed = _bundle(tmp_path / "mixed.json.gz", windows[:20] + other[20:], times)
    assert bundle_timeline(mixed) is None   # not one trace
    with pytest.raises(InputError, match=r"start_times\[1\].*ISO 8601"):
        bundle_timeline(_bundle(tmp_path / "bad.json.gz", windows[:2], [times[0], "yesterday"]))
    import gzip
    (tmp_path / "still.json.gz").write_bytes(gzip.compress(json.dumps(
        {"gap_seconds": 0, "windows": windows[:2], "start_times": times[:2]}).encode()))
    with pytest.raises(InputError, match="gap_seconds: got 0; a positive number"):   # any use of a bundle
        bundle_timeline(tmp_path / "still.json.gz")


def test_validate_tells_a_stitched_bundles_windows_their_past(run_cli, tmp_path):
    """A held-out bundle whose windows were cut from one trace: `validate --recent-past` tells its windows their
    own past (they get plans of their own, not the one told nothing), and their standard errors count blocks of
    windows a horizon apart on the trace, not each window alone."""
    folder = tmp_path / "market"
    folder.mkdir()
    _trace(folder / "good_v100_1.json", _pattern(up=300, down=3, length=4000, seed=1))
    _trace(folder / "bad_v100_1.json", _pattern(up=3, down=300, length=4000, seed=2))
    trace = _pattern(up=300, down=3, length=3000, seed=6) + _pattern(up=3, down=300, length=1000, seed=7)
    windows, times = _cut(trace, 60, seed=8)
    bundle = _bundle(tmp_path / "cut.json.gz", windows, times)
    args = ["validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--nodes", "1", "--trials",
            "60", "--market", "traces", "--market-trace", str(folder), "--market-trace", bundle, "--group", "cut",
            "--format", "json"]
    told = run_cli(*args, "--recent-past", "24h")
    blind = run_cli(*args)
    assert told.exit_code in (0, 1) and blind.exit_code in (0, 1), told.stderr + blind.stderr
    t, b = told.json()["groups"][0], blind.json()["groups"][0]
    firsts = [len(trace) - len(w) for w in windows]   # where each window starts on the trace, in ticks
    early = sum((f - firsts[0]) * GAP < 24 * 3600 for f in firsts)   # less than a day of the stitched trace before
    assert b["windows"] == 60 and t["no_past"] == early > 0 and t["windows"] == 60 - early
    assert 1 < t["blocks"] < t["windows"]   # windows that overlap on the trace share a block
    # without start times the bundle cannot be stitched: no window has a past to be told, none is judged told
    loose = _bundle(tmp_path / "loose.json.gz", windows)
    args[args.index(bundle)] = loose
    args[args.index("cut")] = "loose"
    nothing = run_cli(*args, "--recent-past", "24h")
    assert nothing.exit_code in (0, 1), nothing.stderr
    (n,) = [g for g in nothing.json()["groups"] if g["group"] == "loose"]
    assert n["windows"] == 0 and n["no_past"] == 60 and n["honest"] is None and n["p_error"] is None
    table = run_cli(*[a for a in args if a not in ("--format", "json")], "--recent-past", "24h")
    assert table.exit_code in (0, 1) and "left out (60" in " ".join(table.stdout.split()), table.stdout
    # -0.02 told, -0.28 not (stated 0.76 and 0.50); a 60-trial statement is within 0.07 of its own mean
    assert abs(t["p_error"]) < abs(b["p_error"]) - 0.1, (b["p_error"], t["p_error"])


def test_simulate_a_workload_told_the_recent_capacity(run_cli):
    """`costsim simulate --workload --offering --recent-share`: the same conditioning as the plan's (a poor past,
    fewer deadlines met, by more than four standard errors); with --plan, bare flags or --trace it is one line."""
    met = {}
    for share in (0.1, 0.95):
        result = run_cli("simulate", "--workload", "sdxl", "--offering", "aws/us-east-1/p5en.48xlarge", "--policy",
                         "spot-only", "--trials", "300", "--recent-share", str(share), "--format", "json")
        assert result.exit_code == 0, result.stderr
        met[share] = result.json()["deadline_met"]   # a share of the trials
    se = math.sqrt(sum(p * (1 - p) / 300 for p in met.values()))
    assert met[0.95] - met[0.1] > 4 * se, met
    for args, says in ((("--work-hours", "4", "--deadline", "10h", "--checkpoint-interval", "1h"), "bare flags"),
                       (("--workload", "sdxl", "--offering", "aws/us-east-1/p5en.48xlarge", "--trace",
                         "data/traces/aws-us-east-1a-v100-2023-02-15.json"), "--trace replays")):
        result = run_cli("simulate", *args, "--recent-share", "0.3")
        assert result.exit_code == 2 and says in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _counts(length: int, seed: int, top: int = 4) -> list[int]:
    """A multi-node count trace: how many of `top` instances could be had, tick by tick (a random walk that
    dwells: stretches of each count), from 0 at the start."""
    rng = np.random.default_rng(seed)
    out, count = [], 0
    while len(out) < length:
        out += [count] * int(rng.geometric(1 / 20))
        count = int(np.clip(count + rng.choice([-2, -1, 1, 2]), 0, top))
    return out[:length]


def test_a_count_trace_is_read_as_the_gang_meets_it(tmp_path):
    """A multi-node count trace (instances that could be had, 0 to N): a gang of n has capacity where n could
    be had; a 0/1 file stays a 1-node trace (0 = available); values that are not whole counts are refused."""
    from costsim.errors import InputError
    from costsim.io.specs import load_trace
    counts = _counts(3000, seed=3)
    path = _trace(tmp_path / "z_v100_4.json", counts)
    for gang in (1, 2, 3, 4):
        ticks, gap = load_trace(path, gang)
        assert gap == GAP and ticks == [0 if c >= gang else 1 for c in counts]
    assert ensemble.build_group(GroupSpec(name="z", period="p", paths=(path,))).counts_up_to == 4
    one = _trace(tmp_path / "z_v100_1.json", [0, 1, 1, 0])
    assert load_trace(one, 3) == ([0, 1, 1, 0], GAP)
    assert ensemble.build_group(GroupSpec(name="one", period="p", paths=(one,))).counts_up_to is None
    with pytest.raises(InputError, match="count trace"):
        load_trace(_trace(tmp_path / "bad.json", [0, 2.5, 1]))
    # a count trace that says how many instances were asked for is one whatever its values: a pool of 4 of which
    # never more than one could be had (its 1 is an instance, not an outage)
    declared = tmp_path / "pool_v100_4.json"
    declared.write_text(json.dumps({"metadata": {"gap_seconds": GAP, "instances": 4}, "data": [0, 1, 1, 0]}))
    assert load_trace(declared, 1) == ([1, 0, 0, 1], GAP) and load_trace(declared, 2) == ([1, 1, 1, 1], GAP)
    assert ensemble.build_group(GroupSpec(name="pool", period="p", paths=(str(declared),))).counts_up_to == 4
    declared.write_text(json.dumps({"metadata": {"gap_seconds": GAP, "instances": 2}, "data": [0, 3, 1]}))
    with pytest.raises(InputError, match="metadata.instances says 2"):
        load_trace(declared)


def test_a_trace_in_an_n_node_folder_counts_the_n_instances_it_asked_for(tmp_path):
    """spot-traces' layout names how many instances a trace asked for in its folder (`availability/16-node/...`;
    the file's `_1` is the GPUs an instance has). There a file whose counts stayed at 0 and 1 is a count trace of 16
    (1: one instance could be had), not a 1-node trace (1: none could), and a gang of 16 meets the 16 asked for,
    whatever the most that could be had; a 1-node folder, or counts above N, change nothing."""
    from costsim.io.specs import load_trace, trace_values

    def _nested(path, ticks):
        path.parent.mkdir(parents=True, exist_ok=True)
        return _trace(path, ticks)
    low = _nested(tmp_path / "availability" / "16-node" / "aws-p" / "z_v100_1.json", [0, 1, 1, 0])
    assert trace_values(low).counts == 16 and load_trace(low, 1) == ([1, 0, 0, 1], GAP)
    counts = _counts(2000, seed=5, top=12)
    some = _nested(tmp_path / "availability" / "16-node" / "aws-p" / "y_v100_1.json", counts)
    assert trace_values(some).counts == 16 and max(counts) <= 12
    assert load_trace(some, 16) == ([1] * len(counts), GAP)   # never 16: the gang of the trace never ran
    assert ensemble.build_group(GroupSpec(name="y", period="p", paths=(some,))).counts_up_to == 16
    one = _nested(tmp_path / "availability" / "1-node" / "aws-p" / "x_v100_8.json", [0, 1, 1, 0])
    assert trace_values(one).counts is None and load_trace(one, 1) == ([0, 1, 1, 0], GAP)
    over = _nested(tmp_path / "4-node" / "w.json", [0, 6, 2])   # more than the folder says: its own largest
    assert trace_values(over).counts == 6


def test_a_gang_on_count_traces_meets_one_window_read_at_its_size(tmp_path):
    """Per node, a 1-node trace's windows are independent nodes; a count trace already counts the gang: one
    window, available where the gang's n could be had, with its own fit. A gang larger than the traces count is
    met as the fewest parts of at most that many, each its own window."""
    counts = _counts(6000, seed=5)
    path = _trace(tmp_path / "z_v100_4.json", counts)
    spec = GroupSpec(name="z", period="p", paths=(path,))
    one, draws = ensemble.for_gang(spec, 1)
    assert one.counts_up_to == 4 and draws == 1
    for nodes, (size, parts) in {2: (2, 1), 4: (4, 1), 6: (3, 2), 8: (4, 2), 9: (3, 3)}.items():
        group, draws = ensemble.for_gang(spec, nodes)
        assert draws == parts and group is ensemble.build_group(spec, size), nodes
    group, _ = ensemble.for_gang(spec, 3)
    truth = TraceTimeline([0 if c >= 3 else 1 for c in counts], GAP)
    (timeline,) = replay_timelines(group, 6000 * GAP, 6000 * GAP, 1)
    for t in np.arange(0, 6000 * GAP, GAP / 2):
        assert timeline.available(t) == truth.available(t), t
    # the ensemble's trials: a gang of 3 meets one window read at 3; the same trace's gang of 3 as independent
    # 1-node readings would have capacity where any 1 could be had, on each of three windows
    market = ensemble.build(MarketSpec(name="t", groups=(spec,), replay_share=1.0))
    share = np.mean([[tl.available(t) for t in np.arange(0, 200 * 3600, 1800)]
                     for tl in (market.timeline(np.random.default_rng([0, i]), i, 3, 200 * 3600)[0]
                                for i in range(40))])
    assert abs(share - np.mean([c >= 3 for c in counts])) < 0.1, share
    flat = GroupSpec(name="f", period="p", paths=(_trace(tmp_path / "f_v100_1.json", _pattern(20, 20, 3000)),))
    assert ensemble.for_gang(flat, 3) == (ensemble.build_group(flat), 3)


def test_simulate_replays_a_count_trace_as_the_plans_gang(run_cli, tmp_path):
    """`costsim simulate --trace` with a count trace where two instances could be had from the start and four
    only for one tick: a 2-node gang finishes, a 4-node one never gets far under spot-only; a gang larger than the
    trace counts is one line, exit 2."""
    path = _trace(tmp_path / "z_v100_4.json", [1] * 20 + [4] + [2] * 3000)
    base = ["simulate", "--workload", "sdxl", "--offering", "aws/us-east-1/p5en.48xlarge", "--policy", "spot-only",
            "--format", "json", "--trace", path]
    two = run_cli(*base, "--nodes", "2")
    assert two.exit_code == 0, two.stderr
    assert two.json()["deadline_met"] == 1.0 and two.json()["unfinished"] == 0
    four = run_cli(*base, "--nodes", "4")
    assert four.exit_code == 0, four.stderr
    assert four.json()["deadline_met"] == 0.0 and four.json()["unfinished"] == 1
    refused = run_cli(*base, "--nodes", "8")
    assert refused.exit_code == 2 and "at most 4 instances" in refused.stderr and "Traceback" not in refused.stderr


def test_validate_replays_held_out_count_traces_as_the_chosen_gang_meets_them(run_cli, tmp_path):
    """A 2-node spot-only plan judged on count traces: where one instance could nearly always be had and two only
    in short bursts, the held-out windows read at 2 rarely finish (read as independent nodes, each of which could
    nearly always be had, they would all finish); where two or more could nearly always be had, they do."""
    folder = tmp_path / "gangs"
    folder.mkdir()
    rng = np.random.default_rng(11)
    for name, low, high in (("scarce", 1, 2), ("plenty", 2, 4), ("middling", 2, 3)):
        ticks: list[int] = []
        while len(ticks) < 20000:   # mostly `low`, bursts of `high` a few hours long
            ticks += [low] * int(rng.geometric(1 / 60)) + [high] * int(rng.geometric(1 / 6))
        # a few outages of every count, so that each reading has some of its own to fit
        ticks = [0 if i % 700 < 3 else t for i, t in enumerate(ticks)]
        _trace(folder / f"{name}_v100_4.json", ticks[:20000])
    result = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--nodes", "2",
                     "--trials", "40", "--market", "traces", "--market-trace", str(folder), "--format", "json")
    assert result.exit_code == 0, result.stderr
    by = {g["group"]: g for g in result.json()["groups"]}
    assert by["gangs/scarce"]["realised_p_deadline"] < 0.5 and by["gangs/plenty"]["realised_p_deadline"] == 1.0
    # told each held-out window's recent past, read at the gang's size: the same windows, the same realised figures
    told = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--nodes", "2",
                   "--trials", "40", "--market", "traces", "--market-trace", str(folder), "--format", "json",
                   "--group", "gangs/scarce", "--recent-past", "24h")
    assert told.exit_code == 0, told.stderr
    (scarce,) = told.json()["groups"]
    assert scarce["windows"] + scarce["no_past"] == by["gangs/scarce"]["windows"] and scarce["no_past"] == 4
    assert scarce["realised_p_deadline"] < 0.5


def test_a_recent_count_trace_weighs_a_count_groups_windows_by_the_gangs_own_past(run_cli, tmp_path):
    """A recent capacity read from a count trace holds the share of the past for every gang size; a count
    group's windows are weighed, for a gang of n, by the share of their past in which n could be had. Here one
    instance could always be had and two only in day-long stretches, so one node's past says nothing: told a
    recent past in which two could be had, a 2-node gang's trials start after such pasts, and one in which they
    could not, after the others."""
    rng = np.random.default_rng(4)
    ticks: list[int] = []
    while len(ticks) < 8000:   # one instance always, two in stretches of about a day, none for a tick now and then
        ticks += [1] * int(rng.geometric(1 / 150)) + [2] * int(rng.geometric(1 / 150))
    ticks = [0 if i % 500 == 0 else t for i, t in enumerate(ticks[:8000])]
    folder = tmp_path / "gangs"
    folder.mkdir()
    _trace(folder / "z_v100_4.json", ticks)
    past = 24 * 3600.0
    needed = int(past / GAP)
    recent_path = _trace(tmp_path / "recent.json", [1] * 200 + [2] * needed)
    recent = ensemble.recent_from_trace(recent_path, past)
    assert recent.share == 1.0 and recent.gang_shares == (1.0, 1.0)
    assert recent.at(2).share == 1.0 and recent.at(5).share == 1.0
    poor = ensemble.recent_from_trace(_trace(tmp_path / "poor.json", [2] * 200 + [1] * needed), past)
    assert poor.gang_shares == (1.0, 0.0) and poor.at(2).share == 0.0
    one = ensemble.recent_from_trace(_trace(tmp_path / "one.json", [1] * 200 + [0] * needed), past)
    assert one.share == 1.0 and one.gang_shares == () and one.at(3) is one   # a 1-node trace: one share

    spec = GroupSpec(name="z", period="p", paths=(str(folder / "z_v100_4.json"),))
    gang2, _ = ensemble.for_gang(spec, 2)
    for told, want in ((recent, 1.0), (poor, 0.0)):
        market = ensemble.build(MarketSpec(name="t", groups=(spec,), recent=told))
        starts = market.conditioning(2).starts[0]
        pasts = np.array([ensemble.past_share(gang2.windows[w], o, past) for w, o in zip(starts.windows, starts.offsets)])
        weighed = float(np.sum(starts.p * pasts))
        assert abs(weighed - want) < 0.25 and abs(float(np.mean(pasts)) - want) > 0.35, (want, weighed)
        # one node's past is the same nearly everywhere (one instance could always be had but for single ticks:
        # only the starts within hours of one of those are in a younger state)
        ones = market.conditioning(1).starts[0]
        assert np.mean(ones.p > 0.8 * float(np.max(ones.p))) > 0.8

    out = tmp_path / "plan.json"
    told = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--market", "traces", "--market-trace", str(folder),
                   "--trials", "20", "--recent-trace", recent_path, "--recent-past", "24h", "--out", str(out))
    assert told.exit_code == 0, told.stderr
    assert "2 could be had 100%" in " ".join(told.stdout.split())
    assert json.loads(out.read_text())["prediction"]["market"]["recent"]["gang_shares"] == [1.0, 1.0]
    again = run_cli("simulate", "--plan", str(out), "--trials", "20", "--format", "json")
    assert again.exit_code == 0, again.stderr


def test_validate_judges_a_window_only_on_what_its_trace_saw(run_cli, tmp_path):
    """A held-out trace shorter than the plan's horizon: past its end the replay has no capacity, which nobody saw.
    One 48 h long with spot for its first two hours only says the 36 h deadline was missed, not what the job would
    have cost or when it would have finished; one 3 h long says nothing. Before, both counted as jobs that never
    finished, at the cost of waiting out the horizon."""
    folder = tmp_path / "zones"
    folder.mkdir()
    for name, seed in (("a", 1), ("b", 2)):
        _trace(folder / f"{name}_v100_1.json", _pattern(up=60, down=4, length=6000, seed=seed))
    _trace(folder / "gone_v100_1.json", [0] * 12 + [1] * 276)   # 48 h of 600 s ticks: spot for the first 2 h
    _trace(folder / "brief_v100_1.json", [0] * 18)              # 3 h
    result = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--trials", "40",
                     "--market", "traces", "--market-trace", str(folder), "--format", "json")
    assert result.exit_code == 0, result.stderr
    by = {g["group"]: g for g in result.json()["groups"]}
    gone, brief = by["zones/gone"], by["zones/brief"]
    assert (gone["windows"], gone["cut_short"], gone["not_judged"]) == (1, 1, 0)
    assert gone["realised_p_deadline"] == 0.0 and gone["cost_coverage"] is None and gone["cost_crps"] is None
    assert (brief["windows"], brief["not_judged"]) == (0, 1) and brief["realised_p_deadline"] is None
    assert by["zones/a"]["cut_short"] == 0 and by["zones/a"]["cost_coverage"] is not None
    assert result.json()["pooled"]["groups"] == 3
    table = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--trials", "40",
                    "--market", "traces", "--market-trace", str(folder), "--group", "zones/brief")
    assert table.exit_code == 0 and "1 not judged" in " ".join(table.stdout.split())


def test_a_group_without_preemptions_or_outages_gets_the_zero_event_fit(run_cli, tmp_path):
    """A trace in which capacity never went (a count trace where at least one instance could always be had, read
    at one) has no preemption or outage to fit: its group gets exponential lives of the mean under which none in
    that exposure has even odds (exposure / ln 2) and minute-long outages, and plans run on it, where they stopped
    with an error before."""
    always = _trace(tmp_path / "always_v100_1.json", [0] * 3000)
    group = ensemble.build_group(GroupSpec(name="always", period="p", paths=(always,)))
    assert group.fit.lives == 0 and group.fit.outages == 0
    drawn = group.fit.draw(np.random.default_rng(0))
    assert drawn.shape == 1.0 and drawn.mtbf_s == pytest.approx(3000 * GAP / math.log(2.0))
    assert drawn.wait_mean_s == pytest.approx(ensemble.UNSEEN_OUTAGE_S)
    folder = tmp_path / "plenty"
    folder.mkdir()
    ticks = [1 + (i // 50) % 2 for i in range(20000)]   # one or two instances, never none
    ticks = [4 if i % 300 == 0 else t for i, t in enumerate(ticks)]
    _trace(folder / "z_v100_4.json", ticks)
    result = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--market", "traces", "--market-trace",
                     str(folder), "--trials", "40", "--out", str(tmp_path / "plan.json"))
    assert result.exit_code == 0, result.stderr


def test_a_zone_names_its_region_and_a_jobs_region_weighs_its_groups_more(tmp_path):
    """A group's region comes from the zone its name (or its file's) says; a market for a job in a region gives
    that region's groups `home_weight` times the others' trials, by the same low-discrepancy sequence for every
    configuration; a region with no group, or a weight of 1, leaves the market as it was (shared capacity)."""
    for name, region in (("us-west-2a_v100_1", "us-west-2"), ("cbl-us-west-2a-v100-1000.json.gz", "us-west-2"),
                         ("2023/us-east-1c", "us-east-1"), ("europe-west4-b_a100_1", "europe-west4"),
                         ("us-central1-a", "us-central1"), ("us-east-1", ""), ("good_v100_1", "")):
        assert ensemble.region_of(name) == region, name
    folder = tmp_path / "zones"
    folder.mkdir()
    _trace(folder / "us-east-1a_v100_1.json", _pattern(up=100, down=1, length=3000))
    _trace(folder / "us-east-1b_v100_1.json", _pattern(up=100, down=1, length=3000, seed=1))
    _trace(folder / "us-west-2a_v100_1.json", _pattern(up=1, down=100, length=3000))
    spec = MarketSpec(name="t", groups=ensemble.groups_from_paths([str(folder)]), replay_share=0.5)
    assert [g.region for g in spec.groups] == ["us-east-1", "us-east-1", "us-west-2"]
    assert spec.at_home("eu-north-1", 3.0) == spec and spec.at_home("us-west-2", 1.0) == spec
    unnamed = replace(spec, groups=(*spec.groups, replace(spec.groups[0], name="zones/good", region="")))
    assert unnamed.at_home("", 3.0) == unnamed   # a held-out group of no known region favours no group
    home = spec.at_home("us-west-2", 3.0)
    assert (home.home, home.prior().tolist()) == ("us-west-2", [1.0, 1.0, 3.0])
    assert MarketSpec.from_dict(home.as_dict()) == home   # plan.json keeps it
    params = JobParams(work_s=3 * 3600, deadline_s=12 * 3600, checkpoint_interval_s=1800, checkpoint_s=30,
                       changeover_s=300, horizon_s=48 * 3600)
    config = SimConfig(params=params, policy="spot-only", prices={"spot": MarketPrice(per_hour=1.0)},
                       market=ensemble.build(home))
    trials = 500
    samples = run_trials(config, trials, seed=3)
    counts = np.bincount(samples.group, minlength=3)
    expected = trials * home.prior() / home.prior().sum()   # 100, 100, 300
    assert np.all(np.abs(counts - expected) <= 3), counts   # a low-discrepancy sequence: off by a few at most
    other = replace(config, policy="greedy", prices={"spot": MarketPrice(per_hour=1.0),
                                                     "on-demand": MarketPrice(per_hour=3.0)})
    assert np.array_equal(run_trials(other, trials, seed=3).group, samples.group)   # common capacity
    stats = summarise(samples)
    assert stats.group_p_deadline["zones/us-west-2a"] == 0.0 and stats.group_p_deadline["zones/us-east-1a"] == 1.0
    assert stats.p_deadline == pytest.approx(counts[:2].sum() / trials, abs=0.01)   # about 2/5, not 2/3


def test_plan_weighs_the_offerings_region_and_validate_the_held_out_groups(run_cli, tmp_path):
    """The H200 spot offering is in us-east-1: its good us-east-1 zone weighs 3x by default, so spot-only states
    more than with every group the same; plan.json says so and replays. validate plans each held-out group for a
    job in its region: a bad us-west-2 zone, told its bad sibling, states closer to what its windows did."""
    folder = tmp_path / "zones"
    folder.mkdir()
    _trace(folder / "us-east-1a_v100_1.json", _pattern(up=100, down=1, length=3000))
    _trace(folder / "us-west-2a_v100_1.json", _pattern(up=1, down=100, length=3000))
    _trace(folder / "us-west-2b_v100_1.json", _pattern(up=1, down=100, length=3000, seed=1))
    stated = {}
    for weight in ("1", "3"):
        out = tmp_path / f"plan-{weight}.json"
        result = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--nodes", "1",
                         "--risk", "0.9", "--trials", "100", "--market", "traces", "--market-trace", str(folder),
                         "--home-weight", weight, "--out", str(out), "--format", "json")
        assert result.exit_code == 0, result.stderr
        stated[weight] = result.json()["chosen"]["prediction"]["p_deadline"]
        market = json.loads(out.read_text())["prediction"]["market"]
        assert [g["region"] for g in market["groups"]] == ["us-east-1", "us-west-2", "us-west-2"]
        assert (market.get("home"), market.get("home_weight")) == (
            (None, None) if weight == "1" else ("us-east-1", 3.0))
        replayed = run_cli("simulate", "--plan", str(out), "--format", "json")
        assert replayed.exit_code == 0 and replayed.json()["deadline_met"] == stated[weight], replayed.stderr
    # the good zone alone finishes: 1 of 3 groups, then 3 of 5 weights (each share of 100 trials, the sequence's)
    assert stated["1"] == pytest.approx(1 / 3, abs=0.02) and stated["3"] == pytest.approx(3 / 5, abs=0.02)
    table = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--nodes", "1",
                    "--trials", "40", "--market", "traces", "--market-trace", str(folder), "--out",
                    str(tmp_path / "p.json"))
    assert "us-east-1's 1 of 3 weigh 3x" in " ".join(table.stdout.split())
    errors = {}
    for weight in ("1", "10"):
        result = run_cli("validate", "--workload", "sdxl", "--gpu", "H200", "--policy", "spot-only", "--trials", "60",
                         "--market", "traces", "--market-trace", str(folder), "--group", "zones/us-west-2b",
                         "--home-weight", weight, "--format", "json")
        assert result.exit_code == 0, result.stderr
        assert result.json()["home_weight"] == float(weight)
        group = result.json()["groups"][0]
        assert group["realised_p_deadline"] == 0.0
        errors[weight] = group["p_error"]
    assert errors["1"] == pytest.approx(1 / 2, abs=0.05)   # told the good zone and the bad one alike
    assert errors["10"] == pytest.approx(1 / 11, abs=0.05)   # its bad sibling weighs 10x
    for args, says in ((("--home-weight", "0"), "--home-weight"),
                       (("--home-weight", "2", "--market", "fit"), "--home-weight weighs the ensemble's"),
                       (("--home-weight", "2", "--spot-model", str(folder / "us-east-1a_v100_1.json")),
                        "--home-weight weighs the ensemble's")):
        refused = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "20", "--out",
                          str(tmp_path / "p.json"), *args)
        assert refused.exit_code == 2 and says in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    for args, says in ((("--plan", str(tmp_path / "plan-3.json")), "--home-weight cannot change it"),
                       (("--workload", "sdxl", "--offering", "aws/us-east-1/p5en.48xlarge", "--trace", str(folder)),
                        "give one or the other"),
                       (("--work-hours", "4", "--deadline", "36h", "--checkpoint-interval", "1h"),
                        "go with --workload/--offering")):
        refused = run_cli("simulate", "--home-weight", "2", *args)
        assert refused.exit_code == 2 and says in refused.stderr and "Traceback" not in refused.stderr, refused.stderr


def test_a_told_gangs_other_nodes_replay_windows_told_the_same_past(tmp_path):
    """`costsim validate --recent-past` at 2 nodes: the plan told a window's past weighs both nodes' windows by
    it, so the replay's other node meets another window of the same bin (another time with the past the plan was
    told), spread evenly over the bin, not any window of the group. A trace without capacity for its first 1,000
    ticks and with capacity after: a gang in the second half's bin has capacity throughout, where the group-wide
    spread pairs every such window with one from the first half and the gang never runs."""
    from costsim.validate import _told_replays, replay_windows, window_starts

    folder = tmp_path / "zone"
    folder.mkdir()
    _trace(folder / "z_v100_1.json", [1] * 1000 + [0] * 1000)
    (spec,) = ensemble.groups_from_paths([str(folder / "z_v100_1.json")])
    group = ensemble.build_group(spec)
    horizon, stride = 100 * GAP, 50 * GAP
    starts = window_starts(group, horizon, stride)
    later = np.array([i for i, (_, offset) in enumerate(starts) if offset >= 1000 * GAP])
    assert 0 < len(later) < len(starts)
    told, seen = _told_replays(spec, 2, horizon, stride, starts, later, {})
    assert len(told) == len(seen) == len(later)
    for timeline in told:   # both nodes in the second half: capacity for the whole window
        assert timeline.available(0.0) and timeline.available(horizon - 1.0)
    anywhere, _ = replay_windows(group, horizon, stride, 2, starts)
    assert not any(anywhere[i].available(t) for i in later.tolist() for t in np.arange(0.0, horizon, GAP))
    one, one_seen = _told_replays(spec, 1, horizon, stride, starts, later, {})   # one node: the window itself
    alone, alone_seen = replay_windows(group, horizon, stride, 1, starts)
    grid = np.arange(0.0, horizon, GAP / 2)
    assert [[t.available(x) for x in grid] for t in one] == [[alone[i].available(x) for x in grid]
                                                             for i in later.tolist()]
    assert one_seen.tolist() == alone_seen[later].tolist()


def test_a_gangs_partner_shares_no_hour_with_it_where_the_bin_allows():
    """apart_partners: the evenly spread partner, moved on to the next window that shares no hour with the gang's
    windows so far (a horizon or more away on the same trace, or on another trace); a stitched bundle's windows
    share one trace; where every window is close, the evenly spread one."""
    from costsim.validate import apart_partners

    h = 3600.0
    up = (np.array([0.0]), np.array([1000 * h]))
    long = ensemble.Window(starts=up[0], ends=up[1], length_s=1000 * h, slide=True)
    group = ensemble.Group(name="g", period="p", windows=(long,), fit=None)
    starts = [(0, 0.0), (0, 6 * h), (0, 12 * h), (0, 300 * h)]
    assert apart_partners(group, starts, 144 * h, 2) == [[3], [3], [3], [1]]
    assert apart_partners(group, starts[:2], 144 * h, 2) == [[1], [0]]   # none apart: the evenly spread one
    three = [(0, 0.0), (1, 6 * h), (2, 300 * h)]
    stitched = tuple(replace(long, origin=o, slide=False) for o in (0.0, 6 * h, 300 * h))   # one trace's stretches
    separate = tuple(ensemble.Window(starts=up[0].copy(), ends=up[1].copy(), length_s=1000 * h) for _ in range(3))
    for windows, partners in ((stitched, [[2], [2], [0]]), (separate, [[1], [2], [0]])):
        g = ensemble.Group(name="b", period="p", windows=windows, fit=None)
        assert apart_partners(g, three, 144 * h, 2) == partners


def test_a_gang_of_four_replays_distinct_windows_sharing_the_fewest_hours():
    """apart_partners at 4 nodes: where no window is a horizon from the gang's, the partner is the one sharing the
    fewest hours with it, never a window the gang replays already unless the bin has fewer windows than the gang
    (the fallback to the evenly spread window repeated one: two 'independent' nodes on the very same hours)."""
    from costsim.validate import apart_partners

    h = 3600.0
    long = ensemble.Window(starts=np.array([0.0]), ends=np.array([1000 * h]), length_s=1000 * h, slide=True)
    group = ensemble.Group(name="g", period="p", windows=(long,), fit=None)
    starts = [(0, 0.0), (0, 6 * h), (0, 12 * h), (0, 300 * h), (0, 306 * h)]
    gangs = apart_partners(group, starts, 144 * h, 4)
    assert gangs[0] == [3, 2, 4]   # 300 h shares nothing; then 12 h (132 h shared) before 306 h and 6 h (138 h)
    for index, partners in enumerate(gangs):
        assert len({index, *partners}) == 4, (index, partners)
    assert apart_partners(group, [(0, 0.0), (0, 300 * h)], 144 * h, 4) == [[1, 1, 1], [0, 0, 0]]   # two windows


def test_a_bin_with_fewer_windows_than_the_gang_borrows_the_pasts_the_plan_weighs_most():
    """_partner_pool and apart_partners(heads=, rank=): a told bin of 2 windows and a gang of 4 replays the bin's
    2 windows and 2 lent ones, those whose past the told plan weighs most, one sharing no hour with the gang before
    a nearer past that does; never a window twice while the pool has another."""
    from costsim.validate import _likeness, _partner_pool, apart_partners

    told = ensemble.Recent(share=0.9, past_s=72 * 3600.0, bandwidth=0.1,
                           state=ensemble.State(up=True, age_s=48 * 3600.0))
    shares = np.array([0.9, 0.5, 0.85, 0.9, np.nan, 0.9])
    states = [ensemble.State(up=True, age_s=48 * 3600.0), ensemble.State(up=True, age_s=48 * 3600.0),
              ensemble.State(up=True, age_s=40 * 3600.0), ensemble.State(up=True, age_s=48 * 3600.0), None,
              ensemble.State(up=False, age_s=48 * 3600.0)]
    like = _likeness(told, shares, states)
    assert like[0] == like[3] == pytest.approx(1.0) and like[4] == like[5] == 0.0   # no past; the other state
    assert 0 < like[1] < like[2] < 1
    pool, rank = _partner_pool(np.array([0, 3]), like, 4)
    assert pool == [0, 3, 2, 1] and rank.tolist() == [0, 0, 1, 2]   # the nearer past first; none without a past
    assert _partner_pool(np.array([0, 3]), like, 2)[0] == [0, 3]   # enough in the bin: nothing lent
    h = 3600.0
    long = ensemble.Window(starts=np.array([0.0]), ends=np.array([1000 * h]), length_s=1000 * h, slide=True)
    group = ensemble.Group(name="g", period="p", windows=(long,), fit=None)
    starts = [(0, 0.0), (0, 300 * h), (0, 10 * h), (0, 600 * h)]   # the bin's two, then the lent two
    gangs = apart_partners(group, starts, 144 * h, 4, heads=2, rank=np.array([0, 0, 1, 2]))
    assert gangs[0] == [1, 3, 2]   # the bin's other; the lent one sharing no hour (rank 2) before the nearer (10 h)
    assert gangs[1] == [0, 3, 2]   # 10 h shares hours with the gang's window at 0 h


def _gang_overlaps(starts: ensemble.Starts, picks: list[int], horizon: float) -> bool:
    return any(starts.traces[a] == starts.traces[b] and abs(starts.offsets[a] - starts.offsets[b]) < horizon
               for i, a in enumerate(picks) for b in picks[i + 1:])


def test_a_told_plans_gang_replays_starts_sharing_no_hour_as_its_check_does(tmp_path):
    """Starts.gang: a plan told the recent capacity draws each node's start by its kernel weight, and its other
    nodes among the starts a horizon or more from the gang's on the same trace (or on another trace), as the
    validation pairs its windows (apart_partners) and as independent nodes are. Drawn one by one by weight, as
    until 2026-12-07, most of a 4-node gang's draws put two nodes on overlapping hours of one trace."""
    folder = tmp_path / "zones"
    folder.mkdir()
    _trace(folder / "a_v100_1.json", _pattern(up=12, down=12, length=6000, seed=3))
    _trace(folder / "b_v100_1.json", _pattern(up=12, down=12, length=6000, seed=4))
    groups = ensemble.groups_from_paths([str(folder / "a_v100_1.json"), str(folder / "b_v100_1.json")])
    recent = ensemble.Recent(share=0.5, past_s=24 * 3600.0, bandwidth=0.1, source="test")
    market = ensemble.build(MarketSpec(name="t", groups=groups, recent=recent))
    starts = market.conditioning(1).starts[0]
    assert starts is not None
    horizon = 144 * 3600.0
    rng = np.random.default_rng(0)
    gangs = [starts.gang(rng, 4, horizon) for _ in range(300)]
    assert not any(_gang_overlaps(starts, picks, horizon) for picks in gangs)
    assert all(len(set(picks)) == 4 for picks in gangs)
    # the same weights, each node drawn alone: the overlaps the rule removes are there to remove
    alone = [[int(rng.choice(len(starts.p), p=starts.p)) for _ in range(4)] for _ in range(300)]
    assert sum(_gang_overlaps(starts, picks, horizon) for picks in alone) > 100
    # one node draws as before (one draw by weight: one-node plans are unchanged)
    first, second = np.random.default_rng(5), np.random.default_rng(5)
    assert [starts.gang(first, 1, horizon) for _ in range(20)] == \
        [[int(second.choice(len(starts.p), p=starts.p))] for _ in range(20)]
    # a plan's trial replays those starts: its gang runs only while all four of the windows gang() picks have capacity
    timeline, index = market.timeline(np.random.default_rng(1), 0, 4, horizon)
    group, rng = market.groups[index], np.random.default_rng(1)
    told = market.conditioning(4).starts[index]
    assert told is not None
    nodes = [ArrayTimeline(*group.replay_at(rng, group.windows[int(told.windows[pick])], float(told.offsets[pick]),
                                            horizon)) for pick in told.gang(rng, 4, horizon)]
    grid = np.arange(0.0, horizon, GAP / 2)
    alone = [all(node.available(t) for node in nodes) for t in grid]
    assert [timeline.available(t) for t in grid] == alone and 0 < sum(alone) < len(grid)


def test_a_told_gang_keeps_the_told_past_where_like_pasts_lie_in_one_stretch(tmp_path):
    """Starts.gang: where the starts a horizon from the gang's carry under MIN_APART of the weight (every past
    like the told one lies in one stretch of the trace), the other nodes are the like starts that share the fewest
    hours, not starts whose past is unlike the told one (which a Gaussian kernel still weighs, at ~1e-20)."""
    _trace(tmp_path / "z_v100_1.json", [1] * 2000 + [0] * 250 + [1] * 2000)   # 41.7 h of capacity, once
    groups = ensemble.groups_from_paths([str(tmp_path / "z_v100_1.json")])
    past = 24 * 3600.0
    recent = ensemble.Recent(share=1.0, past_s=past, bandwidth=0.1, source="test")
    market = ensemble.build(MarketSpec(name="t", groups=groups, recent=recent))
    starts = market.conditioning(1).starts[0]
    assert starts is not None
    window = market.groups[0].windows[0]
    horizon = 40 * 3600.0
    rng = np.random.default_rng(0)
    for _ in range(100):
        picks = starts.gang(rng, 3, horizon)
        shares = [ensemble.past_share(window, float(starts.offsets[p]), past) for p in picks]
        assert min(shares) > 0.5, shares
        assert len(set(picks)) == 3   # distinct starts: the fewest shared hours, not one start thrice
