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


def tiny_in_fewer_steps(tmp_path, steps=2000):
    """The tiny workload (model, batch, data, checkpoints) in 2,000 steps instead of 3,000: six runs in ~90 s."""
    doc = yaml.safe_load(resolve("tiny", "workloads").read_text())
    doc.update(name="tiny-2000", samples=doc["global_batch"] * steps)
    path = tmp_path / "tiny-2000.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def plan(workload, out, *args):
    assert costsim("plan", "--workload", workload, "--trials", "10", "--out", str(out), *args).returncode == 0
    return json.loads(out.read_text())


def calibrate(runs, out):
    result = costsim("calibrate", *map(str, runs), "--out", str(out), "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_calibrated_plan_predicts_the_next_run_within_15_percent(tmp_path):
    """plan -> execute -> calibrate -> plan -> execute: the calibrated P50 within 15% of the measured wall time.

    This 2-vCPU VM does not repeat itself well enough to compare one run with the next: the same plan's
    wall time moves by 10-20% within minutes (`python scripts/repeat_runs.py --runs 8 --steps 2000`:
    sd 4.8%, 10.9% between two runs in a row; three runs in a row once took 12.3, 14.3 and 12.6 s;
    CI once measured 22.4 s and then 17.8 s), so a calibration made in one minute and a measurement
    made in the next differ by the machine's drift as much as by the model's error. The runs of the first
    plan are therefore interleaved with those of the second (A B A B A B, as the benchmark scripts
    measure side by side): the first A is calibrated and planned from, strictly in order, and that
    plan's error is printed; then the second plan is made again from the calibration of all three A
    runs, it must choose the same configuration that the B runs ran, and its P50 is checked against
    the B runs' median. No B run is in any calibration. Five runs of this test here: +1.7, +8.0,
    +0.4, +2.1 and -5.2%; the same design without the interleaving (three A runs, then three B runs)
    gave +5.6, -8.9, +5.1, -9.2 and +17.6%.
    """
    workload = tiny_in_fewer_steps(tmp_path)
    plan1 = plan(workload, tmp_path / "plan1.json")
    first = [tmp_path / f"a{i}" for i in range(3)]
    second = [tmp_path / f"b{i}" for i in range(3)]
    assert execute(tmp_path / "plan1.json", first[0]).returncode == 0
    report = calibrate(first[:1], tmp_path / "cal-a0.yaml")
    wall = report["runs"][0]["wall_s"]
    print(f"first plan's wall-time error: {wall['plan'] / wall['measured'] - 1:+.1%}")   # reported: an estimate
    assert "compute_overhead_s" in report["pinned"]                # one batch size cannot identify it
    plan2 = plan(workload, tmp_path / "plan2.json", "--profile", str(tmp_path / "cal-a0.yaml"))
    assert plan2["profile"]["path"] == str(tmp_path / "cal-a0.yaml")
    assert plan2["prediction"]["makespan_s"]["p50"] != plan1["prediction"]["makespan_s"]["p50"]
    for i, b in enumerate(second):                                  # B A B A B after the first A
        assert execute(tmp_path / "plan2.json", b).returncode == 0
        if i + 1 < len(first):
            assert execute(tmp_path / "plan1.json", first[i + 1]).returncode == 0
    walls = [summary(run)["wall_s"] for run in second]
    measured = statistics.median(walls)
    print(f"second plan (from a0 alone): predicted {plan2['prediction']['makespan_s']['p50']:.2f}s, "
          f"measured {', '.join(f'{w:.2f}s' for w in walls)}")
    calibrate(first, tmp_path / "cal-a.yaml")
    again = plan(workload, tmp_path / "plan2-again.json", "--profile", str(tmp_path / "cal-a.yaml"))
    for key in ("resources", "checkpoint", "runtime"):
        assert again[key] == plan2[key], key
    predicted = again["prediction"]["makespan_s"]["p50"]
    print(f"second plan (from a0-a2): predicted {predicted:.2f}s, "
          f"{predicted / measured - 1:+.1%} from the B runs' median")
    assert abs(predicted / measured - 1) <= 0.15
    rows = calibrate(first + second, tmp_path / "p.yaml")["runs"]
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
