"""Closing the loop on CPU: plan -> execute -> calibrate -> plan -> execute, with the tiny workload."""

import json
import statistics
import subprocess
import sys

import pytest
import yaml

from costsim.io.files import resolve
from tests.runner_helpers import execute, summary

pytest.importorskip("torch")


def costsim(*args):
    return subprocess.run([sys.executable, "-m", "costsim", *args], capture_output=True, text=True, timeout=300)


RUNS_A_SIDE = 3


def tiny_in_fewer_steps(tmp_path, steps=2000):
    """The tiny workload (model, batch, data, checkpoints) in 2,000 steps instead of 3,000: six runs in ~90 s."""
    doc = yaml.safe_load(resolve("tiny", "workloads").read_text())
    doc.update(name="tiny-2000", samples=doc["global_batch"] * steps)
    path = tmp_path / "tiny-2000.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_calibrated_plan_predicts_the_next_run_within_15_percent(tmp_path):
    """plan -> execute -> calibrate -> plan -> execute: the calibrated P50 within 15% of the measured wall time.

    Three runs on each side, and the medians compared, because on a 2-vCPU VM one plan's wall time
    varies from run to run by 7% (one standard deviation; 24 runs of the 3,000-step plan here took
    15.4-21.0 s, CI once measured 22.4 s and then 17.8 s), with the odd run 15-20% off the others.
    One run against one run puts ~10% of machine noise on the ratio, and 15% is then within reach of
    the machine alone. Calibrate takes medians over its runs too (start-up; the step-time fit is on logs).
    What medians cannot remove is the machine's drift between the two sides' minute-long windows: two
    runs of this test here gave +5.6% and -8.9%.
    """
    workload = tiny_in_fewer_steps(tmp_path)
    first_plan = tmp_path / "plan1.json"
    assert costsim("plan", "--workload", workload, "--trials", "10", "--out", str(first_plan)).returncode == 0
    first_runs = [tmp_path / f"run1-{i}" for i in range(RUNS_A_SIDE)]
    for run in first_runs:
        assert execute(first_plan, run).returncode == 0
    calibrated = tmp_path / "tiny-calibrated.yaml"
    result = costsim("calibrate", *map(str, first_runs), "--out", str(calibrated), "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    first_errors = [row["wall_s"]["plan"] / row["wall_s"]["measured"] - 1 for row in report["runs"]]
    print("first plan's wall-time errors:", ", ".join(f"{e:+.1%}" for e in first_errors))   # reported: an estimate
    assert "compute_overhead_s" in report["pinned"]                # one batch size cannot identify it
    second_plan = tmp_path / "plan2.json"
    assert costsim("plan", "--workload", workload, "--trials", "10", "--profile", str(calibrated),
                   "--out", str(second_plan)).returncode == 0
    plan2 = json.loads(second_plan.read_text())
    assert plan2["profile"]["path"] == str(calibrated)
    second_runs = [tmp_path / f"run2-{i}" for i in range(RUNS_A_SIDE)]
    for run in second_runs:
        assert execute(second_plan, run).returncode == 0
    predicted = plan2["prediction"]["makespan_s"]["p50"]
    walls = [summary(run)["wall_s"] for run in second_runs]
    measured = statistics.median(walls)
    print(f"second plan: predicted {predicted:.2f}s, measured {', '.join(f'{w:.2f}s' for w in walls)} "
          f"({predicted / measured - 1:+.1%} from their median)")
    assert abs(predicted / measured - 1) <= 0.15
    every = costsim("calibrate", *map(str, first_runs + second_runs), "--out", str(tmp_path / "p.yaml"),
                    "--format", "json")
    rows = json.loads(every.stdout)["runs"]
    assert all(row["loo_step_error"] is not None and abs(row["loo_step_error"]) < 0.5 for row in rows)


def test_runs_of_different_workloads_are_not_fitted_together(tmp_path):
    plan = tmp_path / "plan.json"
    assert costsim("plan", "--workload", "tiny", "--trials", "10", "--out", str(plan)).returncode == 0
    assert execute(plan, tmp_path / "a", "--steps", "30").returncode == 0
    doc = json.loads(plan.read_text())
    doc["workload"]["model"] = "other"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "plan.json").write_text(json.dumps(doc))
    (tmp_path / "b" / "telemetry.jsonl").write_text((tmp_path / "a" / "telemetry.jsonl").read_text())
    result = costsim("calibrate", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "p.yaml"))
    assert result.returncode == 2
    assert "workload.model" in result.stderr and "one workload on one GPU type" in result.stderr


def test_calibrate_bad_input(tmp_path):
    result = costsim("calibrate", str(tmp_path))
    assert result.returncode == 2 and "telemetry.jsonl" in result.stderr and "not found" in result.stderr


def test_runner_profile_writes_a_profile_the_planner_uses(tmp_path):
    out = tmp_path / "tiny-measured.yaml"
    result = subprocess.run([sys.executable, "-m", "runner", "profile", "--workload", "tiny", "--gpus", "1,2",
                             "--batch", "8,32", "--steps", "20", "--out", str(out), "--run-root", str(tmp_path / "runs")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    import yaml
    doc = yaml.safe_load(out.read_text())
    assert doc["source"] == "measured" and doc["gpus"]["cpu"]["source"].startswith("measured")
    fitted = set(doc["calibrations"][-1]["fitted"])
    assert {"compute_per_sample_s", "compute_overhead_s", "intra_a_s"} <= fitted
    assert len(doc["calibrations"][-1]["runs"]) == 4
    planned = costsim("plan", "--workload", "tiny", "--trials", "10", "--profile", str(out), "--out",
                      str(tmp_path / "plan.json"))
    assert planned.returncode == 0, planned.stderr
