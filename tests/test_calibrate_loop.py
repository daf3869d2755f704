"""Closing the loop on CPU: plan -> execute -> calibrate -> plan -> execute, with the tiny workload."""

import json
import subprocess
import sys

import pytest

from tests.runner_helpers import execute, summary

pytest.importorskip("torch")


def costsim(*args):
    return subprocess.run([sys.executable, "-m", "costsim", *args], capture_output=True, text=True, timeout=300)


def test_calibrated_plan_predicts_the_next_run_within_15_percent(tmp_path):
    first_plan = tmp_path / "plan1.json"
    assert costsim("plan", "--workload", "tiny", "--trials", "10", "--out", str(first_plan)).returncode == 0
    assert execute(first_plan, tmp_path / "run1").returncode == 0
    calibrated = tmp_path / "tiny-calibrated.yaml"
    result = costsim("calibrate", str(tmp_path / "run1"), "--out", str(calibrated), "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    first_error = report["runs"][0]["wall_s"]["plan"] / report["runs"][0]["wall_s"]["measured"] - 1
    print(f"first plan's wall-time error: {first_error:+.1%}")   # reported, not asserted: it is an estimate
    assert "compute_overhead_s" in report["pinned"]                # one batch size cannot identify it
    second_plan = tmp_path / "plan2.json"
    assert costsim("plan", "--workload", "tiny", "--trials", "10", "--profile", str(calibrated),
                   "--out", str(second_plan)).returncode == 0
    plan2 = json.loads(second_plan.read_text())
    assert plan2["profile"]["path"] == str(calibrated)
    assert execute(second_plan, tmp_path / "run2").returncode == 0
    predicted = plan2["prediction"]["makespan_s"]["p50"]
    measured = summary(tmp_path / "run2")["wall_s"]
    print(f"second plan: predicted {predicted:.2f}s, measured {measured:.2f}s ({predicted / measured - 1:+.1%})")
    assert abs(predicted / measured - 1) <= 0.15
    both = costsim("calibrate", str(tmp_path / "run1"), str(tmp_path / "run2"), "--out", str(tmp_path / "p.yaml"),
                   "--format", "json")
    rows = json.loads(both.stdout)["runs"]
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
