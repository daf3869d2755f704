"""The spot market fitted from what happened: censored Weibull lives, exponential outages, their
intervals, and the sources they come from (traces, run folders, the controller's journal)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from costsim import io
from costsim.contract.telemetry import announce_move
from costsim.io.market import read_market
from costsim.market_fit import Span, fit_exponential, fit_market, fit_weibull, kaplan_meier_mean, naive_mean_s, trace_spans

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "data" / "traces" / "aws-2023-02-15"
SHAPE, SCALE = 0.7, 5000.0


def censored_lives(rng, n: int, censor_mean: float) -> list[Span]:
    """Weibull(SHAPE, SCALE) lives, each observed until an independent exponential censoring time."""
    lives = SCALE * rng.weibull(SHAPE, n)
    cutoff = rng.exponential(censor_mean, n)
    return [Span(min(a, b), event=bool(a <= b)) for a, b in zip(lives, cutoff)]


def test_censored_weibull_intervals_cover_the_truth_at_their_stated_rate():
    rng = np.random.default_rng(20261130)
    true_mean = SCALE * math.gamma(1 + 1 / SHAPE)
    repetitions, covered = 400, {"shape": 0, "scale_s": 0, "mean_s": 0}
    censored_share = []
    for _ in range(repetitions):
        spans = censored_lives(rng, 150, censor_mean=3 * SCALE)
        censored_share.append(sum(not s.event for s in spans) / len(spans))
        fit = fit_weibull(spans)
        for name, truth in (("shape", SHAPE), ("scale_s", SCALE), ("mean_s", true_mean)):
            covered[name] += fit.ci[name].low <= truth <= fit.ci[name].high
    assert 0.2 < np.mean(censored_share) < 0.5            # a real share of the lives is censored
    tolerance = 3 * math.sqrt(0.95 * 0.05 / repetitions)   # three standard errors of a coverage estimate
    for name, hits in covered.items():
        assert abs(hits / repetitions - 0.95) < tolerance, (name, hits / repetitions)


def test_exponential_outage_interval_covers_the_truth_at_its_stated_rate():
    rng = np.random.default_rng(7)
    repetitions, hits, mean = 400, 0, 3000.0
    for _ in range(repetitions):
        waits, cutoff = rng.exponential(mean, 40), rng.exponential(4 * mean, 40)
        fit = fit_exponential([Span(min(a, b), event=bool(a <= b)) for a, b in zip(waits, cutoff)])
        hits += fit.ci.low <= mean <= fit.ci.high
    assert abs(hits / repetitions - 0.95) < 3 * math.sqrt(0.95 * 0.05 / repetitions)


def test_counting_censored_lives_as_preemptions_biases_the_mean_low_and_the_censored_fit_does_not():
    rng = np.random.default_rng(3)
    spans = censored_lives(rng, 2000, censor_mean=SCALE)          # about half the lives censored
    true_mean = SCALE * math.gamma(1 + 1 / SHAPE)
    fit = fit_weibull(spans)
    naive = naive_mean_s(spans)
    assert naive < 0.6 * true_mean                                # the naive mean is far too short
    assert fit.ci["mean_s"].low <= true_mean <= fit.ci["mean_s"].high
    # and a naive Weibull (every life an event) misses the truth too
    wrong = fit_weibull([Span(s.duration_s, True) for s in spans])
    assert not wrong.ci["mean_s"].low <= true_mean <= wrong.ci["mean_s"].high


@pytest.mark.parametrize("event, censored", [(20.0, 10.0), (10.0, 20.0), (9.1, 5.3)])
def test_one_preemption_pins_the_shape_instead_of_chasing_an_unbounded_likelihood(event, censored):
    # with the only event the longest life, the likelihood grows without end as the shape grows
    fit = fit_weibull([Span(event, True), Span(censored, False)])
    assert fit.shape_pinned and fit.shape == 1.0 and fit.scale_s == event + censored   # exponential: total / events
    assert "shape" not in fit.ci and fit.ci["mean_s"].low < fit.mean_s < fit.ci["mean_s"].high


def test_kaplan_meier_mean_without_censoring_is_the_sample_mean_with_its_normal_interval():
    values = np.random.default_rng(1).exponential(100.0, 500)
    km = kaplan_meier_mean([Span(v, True) for v in values])
    assert km.mean_s == pytest.approx(values.mean(), rel=1e-12)
    half = 1.959964 * values.std(ddof=0) / math.sqrt(len(values))
    assert (km.ci.high - km.ci.low) / 2 == pytest.approx(half, rel=1e-6)
    # the longest life censored: the curve stops short, so there is no Kaplan-Meier mean
    assert kaplan_meier_mean([Span(1.0, True), Span(5.0, False)]) is None


def test_a_trace_becomes_lives_and_outages_with_its_edges_censored_or_left_out():
    #        up(left-truncated) down up   down    up(censored)
    ticks = [0, 0, 1, 0, 0, 0, 1, 1, 0, 0]
    lives, outages = trace_spans(ticks, 10.0)
    assert [(s.duration_s, s.event) for s in lives] == [(30.0, True), (20.0, False)]
    assert [(s.duration_s, s.event) for s in outages] == [(10.0, True), (20.0, True)]


def test_the_shipped_traces_refit_to_what_spot_models_yaml_says():
    shipped = io.load_spot_models()["aws-gpu"]
    fit = fit_market("aws-gpu", *read_market([str(p) for p in sorted(TRACES.glob("*.json"))])["traces"])
    assert fit.lives.events > 1800 and fit.mean_up.method == "kaplan-meier"
    assert fit.lives.ci["shape"].low <= shipped.weibull_shape <= fit.lives.ci["shape"].high
    assert fit.mean_up.ci.low <= shipped.mtbf_s <= fit.mean_up.ci.high
    assert fit.outages.ci.low <= shipped.wait_mean_s <= fit.outages.ci.high


def costsim(*args, **kw):
    return subprocess.run([sys.executable, "-m", "costsim", *args], capture_output=True, text=True, timeout=300, **kw)


def test_calibrate_market_reports_each_figure_with_its_interval_and_counts(tmp_path):
    thin = tmp_path / "thin.json"
    thin.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 0]}))
    result = costsim("calibrate", "--market", str(TRACES), str(thin), "--offering", "aws-gpu", "--format", "json")
    assert result.returncode == 0, result.stderr
    [record] = json.loads(result.stdout)["offerings"]
    for name in ("weibull_shape", "weibull_scale_s", "mean_up_s", "mean_outage_s", "preemptions", "censored"):
        assert name in record
    for name in ("weibull_shape", "weibull_scale_s", "mean_up_s", "mean_outage_s"):
        low, high = record["ci"][name]
        assert low < record[name] < high
    assert record["thin"] == []
    alone = json.loads(costsim("calibrate", "--market", str(thin), "--format", "json").stdout)["offerings"][0]
    assert alone["offering"] == "traces" and alone["preemptions"] == 3 and alone["censored"] == 1
    assert set(alone["thin"]) == {"weibull_shape", "weibull_scale_s", "mean_up_s", "mean_outage_s"}
    table = costsim("calibrate", "--market", str(thin)).stdout
    assert " !" in table and "fewer than 10 events" in table


def test_calibrate_market_fits_a_count_trace_as_one_node_and_says_so(tmp_path):
    """A multi-node count trace (instances that could be had): one node's lives are where at least one could be
    had, the fit the planner's fitted model draws per node; a line on stderr says how it was read."""
    counts = [3, 3, 1, 0, 0, 2, 4, 4, 1, 0, 1, 1]
    path = tmp_path / "z_v100_4.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": counts}))
    as_one = tmp_path / "one.json"
    as_one.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0 if c else 1 for c in counts]}))
    result = costsim("calibrate", "--market", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert "a count trace of up to 4 instances, fitted as one node's capacity" in result.stderr
    same = costsim("calibrate", "--market", str(as_one), "--format", "json")
    assert "count trace" not in same.stderr
    record, twin = (json.loads(r.stdout)["offerings"][0] for r in (result, same))
    assert (record["preemptions"], record["censored"], record["mean_outage_s"]) == (
        twin["preemptions"], twin["censored"], twin["mean_outage_s"]) == (1, 1, 900.0)


def test_a_fitted_model_file_plans_and_the_plan_says_which_model_and_whether_its_interval_changes_the_choice(tmp_path):
    fitted = tmp_path / "fitted.yaml"
    made = costsim("calibrate", "--market", str(TRACES), "--offering", "aws-gpu", "--out", str(fitted))
    assert made.returncode == 0, made.stderr
    doc = yaml.safe_load(fitted.read_text())["models"]["aws-gpu"]
    assert doc["fitted"]["ci"]["mtbf_s"][0] < float(doc["mtbf"].rstrip("s")) < doc["fitted"]["ci"]["mtbf_s"][1]
    out = tmp_path / "plan.json"
    result = costsim("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "100", "--spot-model", str(fitted),
                     "--out", str(out))
    assert result.returncode == 0, result.stderr
    plan = json.loads(out.read_text())
    if plan["policy"]["name"] != "on-demand":
        assert plan["resources"]["spot_model"] == "fitted.yaml:aws-gpu"
    ends = plan["sensitivity"]
    assert ends["pessimistic"]["spot_model"] in ("fitted.yaml:aws-gpu@pessimistic", None)
    assert ends["optimistic"]["spot_model"] in ("fitted.yaml:aws-gpu@optimistic", None)
    assert ends["pessimistic"]["cost_mean"] >= ends["optimistic"]["cost_mean"]
    assert "spot model at its pessimistic end" in result.stdout
    simulated = costsim("simulate", "--work-hours", "10", "--deadline", "20h", "--checkpoint-interval", "30m",
                        "--spot-model", str(fitted), "--spot-price", "1", "--trials", "50", "--format", "json")
    assert simulated.returncode == 0, simulated.stderr
    assert json.loads(simulated.stdout)["preemptions"] > 0


def test_a_model_file_that_matches_no_offering_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  nosuch/offering:\n    mtbf: 2h\n")
    result = costsim("plan", "--workload", "sdxl", "--spot-model", str(bad))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "match no spot offering" in result.stderr and "aws-gpu" in result.stderr


def test_the_controllers_journal_is_read_with_censoring(tmp_path):
    journal = tmp_path / "control.json"
    journal.write_text(json.dumps({"end_s": 9000, "instances": [
        {"offering": "aws/x", "market": "spot", "start_s": 0, "end_s": 3600, "ended": "preempted-notice"},
        {"offering": "aws/x", "market": "on-demand", "start_s": 3600, "end_s": 7200, "ended": "finished"},
        {"offering": "aws/x", "market": "spot", "start_s": 7200, "end_s": 9000, "ended": "finished"}],
        "outages": [{"offering": "aws/x", "start_s": 3600, "end_s": 5400}, {"offering": "aws/x", "start_s": 8000,
                                                                           "end_s": None}]}))
    lives, outages = read_market([str(journal)])["aws/x"]
    assert [(s.duration_s, s.event) for s in lives] == [(3600.0, True), (1800.0, False)]   # on-demand left out
    assert [(s.duration_s, s.event) for s in outages] == [(1800.0, True), (1000.0, False)]
    journal.write_text(json.dumps({"instances": [{"offering": "a", "market": "spot", "start_s": 0, "end_s": 1,
                                                  "ended": "exploded"}]}))
    result = costsim("calibrate", "--market", str(journal))
    assert result.returncode == 2 and "instances[0].ended" in result.stderr and "preempted-notice" in result.stderr
    journal.write_text(json.dumps({"instances": [], "outages": [3]}))
    result = costsim("calibrate", "--market", str(journal))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "outages[0]: expected a mapping" in result.stderr


def test_a_controlled_run_folder_is_read_through_its_journal_in_trace_time_and_once(tmp_path):
    """A drill's run folder: its telemetry is in wall seconds, its journal in trace seconds (x600 here); the
    folder is read through the journal, and a journal named beside its own folder is not counted twice
    (a 4-second wall life used to be a 4-second spot life)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "telemetry.jsonl").write_text(
        '{"t": 100.0, "rank": null, "event": "instance", "offering": "aws/x", "market": "spot"}\n'
        '{"t": 104.0, "rank": null, "event": "exit", "status": "preempted", "ended": "preempted-notice"}\n')
    (run / "control.json").write_text(json.dumps({"time_scale": 600.0, "end_s": 2400.0, "instances": [
        {"offering": "aws/x", "market": "spot", "start_s": 0.0, "end_s": 2400.0, "ended": "preempted"}]}))
    for refs in ([str(run)], [str(run), str(run / "control.json")]):
        lives, _ = read_market(refs)["aws/x"]
        assert [(s.duration_s, s.event) for s in lives] == [(2400.0, True)]


@pytest.mark.slow
def test_a_spot_life_killed_after_its_notice_is_a_preemption_with_notice_to_its_last_event(tmp_path):
    """A reclaim that kills the runner before its `exit` (literal events): the life ends as the supervisor's
    `notice` event said (a move is censored, as its exit would have said), its length to the job's last event."""
    def sup(t, event, **fields):
        return {"t": t, "run": "r", "rank": None, "world_size": None, "node": 0, "event": event, **fields}

    def step(t, n):
        return {"t": t, "run": "r", "rank": 0, "world_size": 1, "event": "step", "step": n}

    spot = {"market": "spot", "offering": "test/spot-cpu"}
    lines = [sup(0, "instance", **spot), step(10, 1), sup(50, "notice", ended="preempted-notice"), step(60, 2),
             sup(100, "instance", **spot), step(110, 3), sup(150, "notice", ended="moved"), step(155, 4),
             sup(200, "instance", **spot), step(230, 5)]
    (tmp_path / "telemetry.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    lives, _ = read_market([str(tmp_path)])["test/spot-cpu"]
    assert [(s.ended, s.event, s.duration_s) for s in lives] == [("preempted-notice", True, 60), ("moved", False, 55),
                                                                  ("preempted", True, 30)]


def test_a_runs_instance_lives_are_recorded_a_notice_as_a_preemption_a_finish_as_censored(tmp_path):
    pytest.importorskip("torch")
    import signal
    import time

    from tests.runner_helpers import events, execute, tiny_plan
    plan = tiny_plan(tmp_path / "p", interval_steps=50)
    doc = json.loads(plan.read_text())
    doc["resources"].update(market="spot", offering="test/spot-cpu")
    plan.write_text(json.dumps(doc))
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run), "--seed", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not any(e["step"] >= 60 for e in events(run, "step")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75
    # a second life that `costsim control` moves off spot: its SIGTERM is the same, its word says it is a move
    second = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run), "--seed", "1",
                             "--steps", "400"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not any(e["t"] > second for e in events(run, "step")) and time.monotonic() < deadline:   # it trains
        time.sleep(0.05)
    announce_move(run, from_market="spot", to_market="on-demand", reason="no slack left")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75
    assert execute(plan, run, "--seed", "1", "--steps", "200").returncode == 0   # a new instance finishes the job
    lives, outages = read_market([str(run)])["test/spot-cpu"]
    assert [(s.ended, s.event) for s in lives] == [("preempted-notice", True), ("moved", False), ("finished", False)]
    assert all(s.duration_s > 1 for s in lives) and outages == []
    fitted = costsim("calibrate", "--market", str(run), "--format", "json")   # a run folder, through the CLI
    assert fitted.returncode == 0, fitted.stderr
    [record] = json.loads(fitted.stdout)["offerings"]
    assert (record["offering"], record["preemptions"], record["censored"]) == ("test/spot-cpu", 1, 2)
    assert record["weibull_shape_pinned"] and record["ci"]["weibull_shape"] is None   # one event fixes no shape
    assert set(record["thin"]) >= {"weibull_shape", "mean_up_s"}
