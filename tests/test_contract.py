"""The contracts between the commands (costsim.contract): plan.json as a frozen Plan, and telemetry."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from costsim.contract.plan import SCHEMA, Plan, RunSection
from costsim.contract.telemetry import EVENTS, events_of, read_events
from costsim.errors import InputError
from tests.runner_helpers import tiny_plan

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "data" / "measurements"
# A runner setting measured once and then removed (docs/runner-speed.md): those run folders' plans
# are refused by name, as any plan with a setting the runner does not have.
REMOVED_SETTING = "checkpoint_prefetch"


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> Path:
    return tiny_plan(tmp_path_factory.mktemp("plan"), interval_steps=None)


def test_the_planners_plan_json_reads_back_to_the_same_document(planned):
    written = json.loads(planned.read_text())
    plan = Plan.read(planned)
    assert written["schema"] == SCHEMA
    assert plan.to_dict() == written
    assert Plan.from_dict(plan.to_dict()) == plan


def test_every_recorded_run_folders_plan_reads_and_keeps_its_figures():
    paths = sorted(MEASUREMENTS.glob("**/plan.json"))
    assert len(paths) >= 20
    read = 0
    for path in paths:
        original = json.loads(path.read_text())
        if REMOVED_SETTING in (original.get("runtime") or {}):
            with pytest.raises(InputError, match=f"runtime.{REMOVED_SETTING}: unknown setting"):
                Plan.read(path)
            continue
        back = Plan.read(path).to_dict()
        for section, value in original.items():
            if isinstance(value, dict) and section not in ("runtime", "sensitivity"):
                for key, item in value.items():
                    assert back[section][key] == item, f"{path}: {section}.{key}"
            elif section != "runtime":
                assert back[section] == value, f"{path}: {section}"
        read += 1
    assert read >= len(paths) - 3


@pytest.mark.parametrize("edit, field, message", [
    (lambda d: d["resources"].pop("gpu"), "resources.gpu", "missing"),
    (lambda d: d["checkpoint"].update(intervl_s=60), "checkpoint.intervl_s", "unknown field; allowed:"),
    (lambda d: d.update(extra=1), "extra", "unknown field"),
    (lambda d: d["resources"].update(market="reserved"), "resources.market", "allowed: spot, on-demand, owned"),
    (lambda d: d["resources"].update(min_nodes=9), "resources.min_nodes", "expected 1..resources.nodes"),
    (lambda d: d["checkpoint"].update(interval_steps=0), "checkpoint.interval_steps", "expected an integer > 0"),
    (lambda d: d["workload"].update(precision="fp8"), "workload.precision", "allowed: bf16, fp16, fp32"),
    (lambda d: d["policy"].update(name="yolo"), "policy.name", "unknown 'yolo'; allowed:"),
    (lambda d: d["prediction"].update(per_gpu_batch=2.5), "prediction.per_gpu_batch", "expected an integer"),
    (lambda d: d.update(run={"options": {"a": 1}}), "run.options", "option names to text"),
    (lambda d: d.update(run={"seed": "1"}), "run.seed", "expected an integer"),
    (lambda d: d["runtime"].update(compile="everything"), "runtime.compile", "allowed"),
])
def test_bad_fields_are_refused_by_name(planned, tmp_path, edit, field, message):
    doc = json.loads(planned.read_text())
    edit(doc)
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(InputError) as caught:
        Plan.read(bad)
    assert caught.value.source == str(bad) and caught.value.field == field
    assert message in caught.value.message


def test_the_runner_added_fields_are_written_only_when_set(planned, tmp_path):
    plan = Plan.read(planned)
    assert {"interval_steps", "min_nodes", "run"}.isdisjoint(
        {*plan.to_dict(), *plan.to_dict()["checkpoint"], *plan.to_dict()["resources"]})
    ran = replace(plan, checkpoint=replace(plan.checkpoint, interval_steps=7),
                  resources=replace(plan.resources, nodes=2, min_nodes=1),
                  run=RunSection(steps=3, options={"k": "v"}, seed=5))
    back = Plan.read(ran.write(tmp_path / "ran.json"))
    assert back == ran and back.checkpoint.interval_steps == 7 and back.resources.min_nodes == 1
    assert back.run == RunSection(steps=3, options={"k": "v"}, workload_entry=None, seed=5, final_save=True)


def test_a_worker_reads_its_plan_without_the_planners_dependencies(planned):
    """runner.plan is what a torchrun worker reads its plan with: no SimPy, scipy, numpy or yaml."""
    code = ("import sys; from runner.plan import load_run_spec; load_run_spec(sys.argv[1]); "
            "print(sorted(m for m in ('yaml', 'simpy', 'scipy', 'numpy', 'costsim.io', 'costsim.sim') "
            "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code, str(planned)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_telemetry_names_are_checked_where_written_and_read(tmp_path):
    from runner.telemetry import Telemetry
    telemetry = Telemetry(tmp_path, "r", rank=0, world_size=1)
    telemetry.event("step", step=1, step_time_s=0.5, samples=4)
    with pytest.raises(ValueError, match="unknown telemetry event 'stpe'"):
        telemetry.event("stpe", step=2)
    telemetry.close()
    events = read_events(tmp_path)
    assert [e["event"] for e in events] == ["step"] and events_of(events, "step")[0]["step_time_s"] == 0.5
    with pytest.raises(ValueError, match="unknown telemetry event"):
        events_of(events, "steps")
    assert set(EVENTS) >= {"step", "start", "runtime", "checkpoint_save", "end", "exit"}
