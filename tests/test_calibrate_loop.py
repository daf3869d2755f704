"""Closing the loop on CPU: plan -> execute -> calibrate -> plan -> execute, with the tiny workload."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from costsim.io.files import resolve
from tests.runner_helpers import execute

pytest.importorskip("torch")
pytestmark = pytest.mark.slow   # real DDP runs (see pyproject's markers)
ROOT = Path(__file__).resolve().parents[1]


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


STARTUP_S, STEP_S, SAVE_S, INTERVAL_STEPS, EXIT_S = 3.0, 0.004, 0.05, 500, 0.4


def synthetic_run(folder, plan_path, steps, seed, startup_s=STARTUP_S, cache_bytes=None):
    """A run folder as `runner execute` writes it, from known figures: start-up, steps of STEP_S
    (+-5% noise, seeded), a synchronous save of SAVE_S every INTERVAL_STEPS and at the end. With `cache_bytes`, a
    compiled run whose first start found a compile cache of that size (0: an empty one)."""
    import random
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    plan = json.loads(plan_path.read_text())
    plan["checkpoint"]["interval_steps"] = INTERVAL_STEPS
    (folder / "plan.json").write_text(json.dumps(plan))
    split = {"world_size": 2, "micro_batch": plan["prediction"]["per_gpu_batch"], "accumulation": 1, "nodes": 1}
    t, batch = 1.0e9, plan["workload"]["global_batch"]
    events = [{"t": t, "rank": None, "world_size": None, "event": "launch", "attempt": 0}]
    compiled = {} if cache_bytes is None else {"compiled_modules": 70, "compile_cache_bytes": cache_bytes}
    events.append({"t": t + 2.0, "rank": 0, "world_size": 2, "event": "runtime", "settings": plan.get("runtime") or {},
                   **split, **compiled})
    t += startup_s
    events.append({"t": t, "rank": 0, "world_size": 2, "event": "start", "step": 0})
    for step in range(1, steps + 1):
        took = STEP_S * (1 + rng.uniform(-0.05, 0.05))
        t += took
        events.append({"t": t, "rank": 0, "world_size": 2, "event": "step", "step": step, "step_time_s": took,
                       "samples": batch})
        if step % INTERVAL_STEPS == 0 or step == steps:
            t += SAVE_S
            events.append({"t": t, "rank": 0, "world_size": 2, "event": "checkpoint_save", "step": step,
                           "duration_s": SAVE_S, "stall_s": SAVE_S, "bytes": 10**6, "mode": "sync",
                           "reason": "final" if step == steps else "interval"})
    events.append({"t": t, "rank": 0, "world_size": 2, "event": "end", "step": steps, "samples": steps * batch})
    t += EXIT_S
    events.append({"t": t, "rank": None, "world_size": None, "event": "exit", "status": "done", "restarts": 0})
    (folder / "telemetry.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (folder / "summary.json").write_text(json.dumps({"status": "done", "wall_s": t - events[0]["t"], "steps": steps}))
    return t - events[0]["t"]


def test_calibration_recovers_known_figures_and_the_next_plan_predicts_the_run(tmp_path):
    """plan -> (recorded run) -> calibrate -> plan, on telemetry made from known figures: the fit
    finds them and the calibrated plan predicts the run's wall time. (The same loop with real runs
    on this machine is `python3 scripts/calibrate_loop.py`, a benchmark that prints its ratio: the
    machine's own run-to-run drift of 5-20% makes it no test.)"""
    workload = tiny_in_fewer_steps(tmp_path)
    plan1 = plan(workload, tmp_path / "plan1.json")
    steps = plan1["workload"]["samples"] // plan1["workload"]["global_batch"]
    wall = synthetic_run(tmp_path / "a", tmp_path / "plan1.json", steps, seed=1)
    report = calibrate([tmp_path / "a"], tmp_path / "cal.yaml")
    [row] = report["runs"]
    assert row["step_s"]["measured"] == pytest.approx(STEP_S, rel=0.01)        # noise +-5%, 2,000 steps
    fitted = yaml.safe_load((tmp_path / "cal.yaml").read_text())["gpus"]["cpu"]
    assert float(fitted["checkpoint_save"].rstrip("s")) == pytest.approx(SAVE_S, rel=1e-6)
    # start-up: launch to the end of the warm-up steps less as many steady steps, plus end to exit
    assert float(fitted["startup"].rstrip("s")) == pytest.approx(STARTUP_S + EXIT_S, rel=0.01)
    assert row["wall_s"]["refit"] == pytest.approx(wall, rel=0.01)
    plan2 = plan(workload, tmp_path / "plan2.json", "--profile", str(tmp_path / "cal.yaml"))
    assert plan2["resources"]["offering"] == plan1["resources"]["offering"]
    # the plan's job: start-up, every step, a save per interval of its own choosing and the final one
    predicted = plan2["prediction"]["makespan_s"]["p50"]
    saves_then = plan2["prediction"]["work_s"] / plan2["checkpoint"]["interval_s"]
    expected = STARTUP_S + EXIT_S + steps * STEP_S + (int(saves_then) + 1) * SAVE_S
    print(f"calibrated plan P50 {predicted:.3f}s, the same job from the known figures {expected:.3f}s, the run {wall:.3f}s")
    assert predicted == pytest.approx(expected, rel=0.01), (predicted, expected, wall)


def test_the_start_up_comes_from_starts_that_compiled_from_an_empty_cache(tmp_path):
    """A run whose first start found an earlier run's compile cache (a second run on one machine) started as a
    restart does: the start-up (a new node's) comes from the runs that compiled from an empty cache; where every one
    found a cache, from them, and the notes say the figure is short of a new node's."""
    workload = tiny_in_fewer_steps(tmp_path, steps=600)
    plan(workload, tmp_path / "plan.json")
    steps = 600
    synthetic_run(tmp_path / "cold", tmp_path / "plan.json", steps, seed=1, startup_s=40.0, cache_bytes=0)
    synthetic_run(tmp_path / "warm", tmp_path / "plan.json", steps, seed=2, startup_s=8.0, cache_bytes=15_000_000)
    synthetic_run(tmp_path / "warm2", tmp_path / "plan.json", steps, seed=3, startup_s=9.0, cache_bytes=15_000_000)

    def startup(*names):
        report = calibrate([tmp_path / n for n in names], tmp_path / "cal.yaml")
        fitted = yaml.safe_load((tmp_path / "cal.yaml").read_text())["gpus"]["cpu"]
        return float(fitted["startup"].rstrip("s")), report["notes"]

    value, notes = startup("cold", "warm", "warm2")
    assert value == pytest.approx(40.0 + EXIT_S, rel=0.01)   # the median of all three would be a warm start's
    assert any("from the 1 run(s) whose first start compiled from an empty cache; warm, warm2 found" in n for n in notes)
    value, notes = startup("warm", "warm2")
    assert value == pytest.approx(8.5 + EXIT_S, rel=0.01)
    assert any("every first start here found an earlier run's compile cache (up to 15 MB)" in n for n in notes)
    value, notes = startup("cold")
    assert value == pytest.approx(40.0 + EXIT_S, rel=0.01) and not any("compile cache" in n for n in notes)


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


def test_the_loop_script_runs_in_a_work_folder_it_makes(tmp_path):
    """`scripts/calibrate_loop.py --work DIR` with a DIR that is not there yet makes it (it ended in a
    traceback), and a folder it cannot make is one line."""
    work = tmp_path / "new" / "sub"
    script = ROOT / "scripts" / "calibrate_loop.py"
    result = subprocess.run([sys.executable, str(script), "--work", str(work), "--steps", "60", "--pairs", "1"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"runs of 60 steps in {work}" in result.stdout and (work / "plan1.json").is_file()
    (tmp_path / "file").write_text("")
    blocked = subprocess.run([sys.executable, str(script), "--work", str(tmp_path / "file" / "sub")],
                             capture_output=True, text=True, timeout=60)
    assert blocked.returncode != 0 and "Traceback" not in blocked.stderr
    assert blocked.stderr.strip() == f"calibrate_loop.py: --work {tmp_path / 'file' / 'sub'}: cannot make it (Not a " \
                                     "directory)"
