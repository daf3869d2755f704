"""A run folder belongs to one job: plan.json written once with the job's fingerprint, another job
refused before anything is touched, a finished run says so, a changed plan only when asked (recorded)."""

import json
from dataclasses import replace

import pytest

from costsim.contract.job import Finished, check_binding, defining, differences, fingerprint
from costsim.contract.plan import Plan, RunSection
from costsim.errors import InputError
from costsim.runtime import Runtime
from tests.runner_helpers import events, execute, tiny_plan


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    return tiny_plan(tmp_path_factory.mktemp("plan"), interval_steps=20)


def with_run(plan: Plan, **run) -> Plan:
    return replace(plan, run=RunSection(**run))


def test_what_may_change_between_attempts_keeps_the_fingerprint(plan_path):
    plan = with_run(Plan.read(plan_path), seed=1)
    moved = replace(plan, runtime=Runtime(compile="blocks"), run=replace(plan.run, steps=7),
                    resources=replace(plan.resources, nodes=3, gpus_per_node=1, market="spot"))
    assert fingerprint(moved) == fingerprint(plan) and differences(plan, moved) == []


@pytest.mark.parametrize("change, expected", [
    (lambda p: replace(p, workload=replace(p.workload, model="sdxl-unet")), "model: tiny -> sdxl-unet"),
    (lambda p: replace(p, workload=replace(p.workload, global_batch=32)), "global_batch: 64 -> 32"),
    (lambda p: replace(p, run=replace(p.run, seed=2)), "seed: 1 -> 2"),
    (lambda p: replace(p, run=replace(p.run, options={"ema": "0.99"})), "option ema: (unset) -> 0.99"),
])
def test_what_defines_the_job_changes_the_fingerprint_and_is_named(plan_path, change, expected):
    plan = with_run(Plan.read(plan_path), seed=1)
    other = change(plan)
    assert fingerprint(other) != fingerprint(plan)
    assert differences(plan, other) == [expected]
    assert set(defining(plan)) == {"workload", "model", "workload_entry", "samples", "global_batch", "precision",
                                   "seed", "options"}


def test_a_new_folder_binds_to_anything(plan_path, tmp_path):
    assert check_binding(tmp_path / "new", Plan.read(plan_path)) == []


@pytest.mark.slow
def test_a_run_folder_refuses_another_job_says_when_it_is_finished_and_records_an_accepted_change(plan_path, tmp_path):
    run = tmp_path / "run"
    first = execute(plan_path, run, "--steps", "40")
    assert first.returncode == 0, first.stderr[-2000:]
    job = json.loads((run / "plan.json").read_text())
    assert len(job["run"]["fingerprint"]) == 16
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}

    # Another job (another seed, another batch): one line, exit 2, nothing touched.
    doc = json.loads(plan_path.read_text())
    doc["workload"]["global_batch"] = 32
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    for args in ((plan_path, "--steps", "40", "--seed", "3"), (other, "--steps", "40")):
        result = execute(args[0], run, *args[1:])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
        assert "plan.json" in lines[0] and "another job" in lines[0] and "--accept-plan-change" in lines[0]
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before

    # The same job again: finished, nothing to do, nothing written.
    again = execute(plan_path, run, "--steps", "40", "--runtime", "gc_every=3")
    assert again.returncode == 0 and "finished at step 40" in again.stderr, again.stderr[-2000:]
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before

    # The same job, longer and with other runner settings: it goes on; the job's record stays.
    longer = execute(plan_path, run, "--steps", "60", "--runtime", "gc_every=3")
    assert longer.returncode == 0, longer.stderr[-2000:]
    assert (run / "plan.json").read_bytes() == before["plan.json"]
    assert json.loads((run / "current-plan.json").read_text())["runtime"]["gc_every"] == 3
    assert events(run, "start")[-1]["step"] == 40 and events(run, "end")[-1]["step"] == 60

    # Another job with the explicit flag: the earlier plan kept, the change in the telemetry.
    changed = execute(other, run, "--steps", "80", "--accept-plan-change")
    assert changed.returncode == 0, changed.stderr[-2000:]
    recorded = events(run, "plan_changed", rank=None)
    assert [e["changes"] for e in recorded] == [["global_batch: 64 -> 32"]]
    assert (run / recorded[0]["superseded"]).read_bytes() == before["plan.json"]
    assert json.loads((run / "plan.json").read_text())["workload"]["global_batch"] == 32


def test_check_binding_reads_only(plan_path, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    recorded = with_run(Plan.read(plan_path), steps=10)
    recorded.write(run / "plan.json")
    (run / "telemetry.jsonl").write_text(json.dumps({"t": 1.0, "event": "end", "rank": 0, "step": 10}) + "\n")
    with pytest.raises(Finished):
        check_binding(run, recorded)
    assert check_binding(run, with_run(Plan.read(plan_path), steps=20)) == []   # more steps: it goes on
    with pytest.raises(InputError) as error:
        check_binding(run, with_run(Plan.read(plan_path), steps=20, seed=5))
    assert "seed: 0 -> 5" in str(error.value)
