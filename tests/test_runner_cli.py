"""runner execute from the command line: bad input is one line with exit 2; a user's own workload runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runner_helpers import events, execute, summary, tiny_plan

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return tiny_plan(tmp_path_factory.mktemp("plan"))


def one_line_error(result, *fragments):
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_missing_plan(tmp_path):
    one_line_error(execute(tmp_path / "none.json", tmp_path / "run"), "none.json", "not found")


def test_malformed_plan(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    one_line_error(execute(bad, tmp_path / "run"), "plan.json", "not valid JSON")
    bad.write_text(json.dumps({"schema": "other/9"}))
    one_line_error(execute(bad, tmp_path / "run"), "schema", "costsim.plan/1")


def test_unknown_workload_is_refused(plan, tmp_path):
    doc = json.loads(plan.read_text())
    doc["workload"]["model"] = "os:system"
    other = tmp_path / "plan.json"
    other.write_text(json.dumps(doc))
    one_line_error(execute(other, tmp_path / "run"), "not registered", "--workload-entry")


def test_unreachable_rendezvous(plan, tmp_path):
    result = execute(plan, tmp_path / "run", "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:9",
                     "--rdzv-timeout", "2s")
    one_line_error(result, "cannot reach the rendezvous at 127.0.0.1:9")


def test_checkpoint_folder_not_writable(plan, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    one_line_error(execute(plan, blocker / "run"), "not writable")
    assert not list(tmp_path.glob("**/step-*"))


def test_a_negative_seed_is_refused(plan, tmp_path):
    one_line_error(execute(plan, tmp_path / "run", "--seed", "-5"), "--seed", "0<=x<=4294967295")


@pytest.mark.parametrize("location", ["s3:/bucket/x", "gs://bucket/x"])
def test_a_checkpoint_url_the_runner_cannot_use_is_refused_not_made_a_folder(plan, tmp_path, location):
    """`s3:/bucket` (one slash) trained with its checkpoints in a local folder named `s3:`."""
    result = subprocess.run([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", "run",
                             "--checkpoint-dir", location], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    one_line_error(result, "--checkpoint-dir", location, "s3://bucket/prefix")
    assert not list(tmp_path.iterdir())


def test_bad_drill_schedule(plan, tmp_path):
    one_line_error(execute(plan, tmp_path / "run", "--inject-preemptions", "boom@3"), "--inject-preemptions", "bad fault")


@pytest.mark.slow
def test_own_workload_through_a_named_entry_point(plan, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "docs" / "examples")}
    result = subprocess.run([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(tmp_path),
                             "--workload-entry", "linear_workload:build", "--steps", "60"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert summary(tmp_path)["steps"] == 60
    assert (tmp_path / "plan.json").exists() and (tmp_path / "checkpoints" / "step-60" / "manifest.json").exists()


def test_runner_help_has_an_example():
    for args in (["--help"], ["execute", "--help"]):
        result = subprocess.run([sys.executable, "-m", "runner", *args], capture_output=True, text=True)
        assert result.returncode == 0 and "Example:" in result.stdout


@pytest.mark.slow
def test_a_failure_that_recurs_without_progress_is_not_restarted_forever(plan, tmp_path):
    (tmp_path / "broken.py").write_text("def build(ctx):\n    raise RuntimeError('out of memory (simulated)')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(tmp_path / "run"),
                             "--workload-entry", "broken:build"], capture_output=True, text=True, env=env, timeout=180)
    assert result.returncode == 1
    assert "failed 3 times in a row without a new checkpoint" in result.stderr
    assert summary(tmp_path / "run")["restarts"] == 2 and summary(tmp_path / "run")["status"] == "failed"


def test_a_plan_without_a_gpu_type_is_refused_not_run_on_the_cpu(plan, tmp_path):
    doc = json.loads(plan.read_text())
    del doc["resources"]["gpu"]
    bare = tmp_path / "plan.json"
    bare.write_text(json.dumps(doc))
    one_line_error(execute(bare, tmp_path / "run"), "resources.gpu", "missing")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_run_folder_holds_the_effective_plan_the_workers_read_and_a_plans_own_run_section_is_ignored(plan,
                                                                                                         tmp_path):
    doc = json.loads(plan.read_text())
    doc["run"] = {"workload_entry": "os:system", "steps": 1, "options": {"evil": "1"}}   # never taken from a plan
    doc["workload"]["options"] = {"hidden": "48"}   # the workload's options the plan was priced with are
    given = tmp_path / "given.json"
    given.write_text(json.dumps(doc))
    result = execute(given, tmp_path / "run", "--steps", "20", "--seed", "4", "--runtime", "gc_every=5")
    assert result.returncode == 0, result.stderr[-2000:]
    written = json.loads((tmp_path / "run" / "current-plan.json").read_text())
    assert written["run"] == {"steps": 20, "options": {"hidden": "48"}, "workload_entry": None, "seed": 4,
                              "final_save": True}
    assert written["runtime"]["gc_every"] == 5
    job = json.loads((tmp_path / "run" / "plan.json").read_text())   # the job's record: the same, fingerprinted
    assert job["run"].pop("fingerprint") and job == written
    settings = [e["settings"] for e in events(tmp_path / "run", "runtime", rank=None)]
    assert len(settings) == 2 and all(s["gc_every"] == 5 for s in settings)   # both workers read it there
    assert summary(tmp_path / "run")["steps"] == 20


def test_pace_holds_each_step_to_at_least_its_time_and_a_bad_pace_is_one_line(plan, tmp_path):
    """The tiny workload's `pace` (the drill's stand-in for a job of a given speed): steps after the first
    take at least the pace between them (time.sleep waits at least its time, so this lower bound cannot
    flake on a slow machine; a step event's window is offset from the pacer's by the step's bookkeeping,
    so n steps are bounded, not each), and the unpaced job, well under 20 ms a step here, is faster."""
    paced = execute(plan, tmp_path / "paced", "--steps", "60", "--option", "pace=20ms")
    assert paced.returncode == 0, paced.stderr[-2000:]
    times = [e["step_time_s"] for e in events(tmp_path / "paced", "step")][2:]
    assert len(times) >= 50 and sum(times) >= 0.020 * len(times) - 0.005
    # and most steps near it, not a few long ones hiding short ones: a step's window moves against the pacer's by its
    # bookkeeping's jitter (a median of 19.885 ms once, in CI), so the median is held to within a tenth of the pace
    assert sorted(times)[len(times) // 2] >= 0.018
    assert execute(plan, tmp_path / "bare", "--steps", "60").returncode == 0
    assert sorted(e["step_time_s"] for e in events(tmp_path / "bare", "step"))[30] < 0.020
    one_line_error(execute(plan, tmp_path / "bad", "--option", "pace=5"), "option pace='5'", "without a unit")


def test_workers_forked_from_the_agent_train_as_new_interpreters_do(tmp_path, monkeypatch):
    """A CPU plan's workers are forked from torchrun's agent after its imports (runner.torchrun); with
    COSTSIM_WORKER_START=exec they start as new interpreters, as a GPU plan's do. Both train the job to the same
    final state (2 ranks, 30 steps, a checkpoint on the way); the forked workers spend nothing on imports, the
    new interpreters do. Any other value is one line before anything starts. The garbage collector's pause
    through a start (runner.gcstart) changes nothing of the result."""
    plan = tiny_plan(tmp_path, interval_steps=10)
    ends, imports = {}, {}
    for start in ("fork", "exec"):
        monkeypatch.setenv("COSTSIM_WORKER_START", start)
        result = execute(plan, tmp_path / start, "--steps", "30", "--seed", "3")
        assert result.returncode == 0, result.stderr[-3000:]
        ends[start] = summary(tmp_path / start)["final_state_sha256"]
        imports[start] = [e["start_phases_s"]["imports"] for e in events(tmp_path / start, "runtime", rank=None)]
    assert ends["fork"] == ends["exec"]
    assert len(imports["fork"]) == len(imports["exec"]) == 2
    assert max(imports["fork"]) == 0.0 and min(imports["exec"]) > 0.1, imports
    # Either way the garbage collector was paused through the start and settled after the first step (rank 0
    # reports it: runner.gcstart); with COSTSIM_GC_START=0 it is not, and the job ends in the same state.
    for start in ("fork", "exec"):
        (settled,) = events(tmp_path / start, "gc_settle")
        assert settled["step"] == 1 and settled["frozen"] > 10_000 and settled["paused_s"] > 0, settled
    monkeypatch.setenv("COSTSIM_GC_START", "0")
    result = execute(plan, tmp_path / "collector", "--steps", "30", "--seed", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert summary(tmp_path / "collector")["final_state_sha256"] == ends["exec"]
    assert not events(tmp_path / "collector", "gc_settle")
    monkeypatch.delenv("COSTSIM_GC_START")
    monkeypatch.setenv("COSTSIM_WORKER_START", "spawn")
    refused = execute(plan, tmp_path / "bad", "--steps", "5")
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert "COSTSIM_WORKER_START: 'spawn': allowed fork, exec" in lines[0]
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("name, value, allowed", [("COSTSIM_S3_FETCH_THREADS", "sixteen", "a whole number >= 1"),
                                                  ("COSTSIM_S3_FETCH_PROCESSES", "0", "a whole number >= 1"),
                                                  ("COSTSIM_LEASE_TTL_S", "nan", "a number >= 1"),
                                                  ("COSTSIM_GC_START", "off", "1, 0")])
def test_a_bad_setting_in_the_runners_environment_is_one_line_before_anything_starts(tmp_path, monkeypatch, name,
                                                                                      value, allowed):
    """The store's, the lease's and the collector's settings are read as their modules are imported; a bad one used
    to be a traceback from the import (`int('sixteen')`), before the command's error handling."""
    plan = tiny_plan(tmp_path)
    monkeypatch.setenv(name, value)
    refused = execute(plan, tmp_path / "run", "--steps", "5")
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert f"environment: {name}: '{value}': allowed {allowed}" in lines[0]
    assert not (tmp_path / "run").exists()
