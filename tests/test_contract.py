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
                    if isinstance(item, dict):   # a later schema may add a figure (p10): what was there stays
                        assert {k: back[section][key][k] for k in item} == item, f"{path}: {section}.{key}"
                    else:
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


# -- telemetry: every event and field the code writes is the contract's ------------------------------
def _written_events() -> list[tuple[str, str, set[str]]]:
    """(file:line, event, keyword names) of every telemetry write in the runner: `.event("name", ...)`
    and the checkpointer's `on_event("name", ...)` (keywords spread with ** are checked on a real run)."""
    import ast
    found = []
    for path in sorted((ROOT / "runner").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
                    and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("event", "on_event")
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                names = {k.arg for k in node.keywords if k.arg is not None} - {"buffered"}
                found.append((f"{path.name}:{node.lineno}", node.args[0].value, names))
    return found


def test_every_event_the_runner_writes_is_in_the_contract_with_its_fields():
    from costsim.contract.telemetry import EVENT_FIELDS, fields_of
    written = _written_events()
    assert {name for _, name, _ in written} >= set(EVENT_FIELDS) - {"fatal"}   # fatal: through a helper
    for where, name, names in written:
        assert name in EVENT_FIELDS, (where, name)
        assert names <= fields_of(name), (where, name, sorted(names - fields_of(name)))


def test_the_helper_that_writes_fatal_writes_its_kind_and_reason():
    import ast
    tree = ast.parse((ROOT / "runner" / "train.py").read_text())
    helper = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "fatal")
    call = next(n for n in ast.walk(helper) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "event")
    assert call.args[0].value == "fatal" and {k.arg for k in call.keywords} >= {"kind", "reason"}


@pytest.mark.slow
def test_a_real_run_writes_only_contract_events_and_fields(tmp_path):
    """A drill with a kill, a notice, restarts and every kind of save: each line's fields are the contract's."""
    import json as _json

    from costsim.contract.telemetry import SAVE_REASONS, fields_of
    from tests.runner_helpers import execute, tiny_plan
    plan = tiny_plan(tmp_path, interval_steps=20)
    result = execute(plan, tmp_path / "run", "--steps", "80", "--inject-preemptions", "kill@30,term@55")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [_json.loads(line) for line in (tmp_path / "run" / "telemetry.jsonl").read_text().splitlines()]
    seen = {e["event"] for e in lines}
    assert seen >= {"instance", "launch", "restart", "exit", "runtime", "start", "step", "progress", "checkpoint_save",
                    "checkpoint_load", "preempted", "end"}
    for e in lines:
        assert set(e) <= fields_of(e["event"]), (e["event"], sorted(set(e) - fields_of(e["event"])))
    assert {e["reason"] for e in lines if e["event"] == "checkpoint_save"} == set(SAVE_REASONS)
    assert {e["device"] for e in lines if e["event"] == "runtime"} == {"cpu"}   # what calibrate reads the GPU type from


def test_every_reader_passes_a_damaged_telemetry_line_over_and_counts_it(tmp_path):
    """One rule for a damaged line (costsim.contract.telemetry.parse_event), in every reader: a line torn by a
    writer that died mid-line, with later lives' lines after it, or a line that is no event, is passed
    over and its number kept; nothing raises (a damaged line used to stop the job in its supervisor)."""
    from costsim.control.progress import RunFolder
    lines = ['{"t": 1, "event": "start", "rank": 0, "step": 0}', '{"t": 2, "ev', '[1, 2]', '{"t": "x", "event": "step"}',
             '{"t": 3, "event": "step", "rank": 0, "step": 1, "step_time_s": 0.5}', '', '{"t": 4, "event": "st']
    (tmp_path / "telemetry.jsonl").write_text("\n".join(lines))
    events = read_events(tmp_path)
    assert [e["t"] for e in events] == [1, 3] and events.damaged == (2, 3, 4, 7)
    folder = RunFolder(tmp_path)
    assert folder.observe().step == 1 and folder.bad_lines == 3   # the unfinished last line: read when it ends


def test_the_planner_prices_the_batch_split_the_runner_runs():
    """One rule (costsim.contract.batching), both sides on literal cases: global batch 18 on 2 GPUs of at most
    8 each is 3 x 3 (the planner used to call it infeasible, the runner ran 3 x 3); 64 on 8 of at most 4 is
    4 x 2; 60 on 4 of at most 16 is 15 x 1. (test_runner_rescale checks the runner's split on its own cases.)"""
    from dataclasses import replace as with_fields

    from costsim import io
    from costsim.throughput import step_model
    from runner import batching
    h200 = io.load_profile("sdxl-unet").gpus["H200"]
    for (global_batch, gpus, largest), expected in (((18, 2, 8), (3, 3)), ((64, 8, 4), (4, 2)), ((60, 4, 16), (15, 1))):
        priced = step_model(with_fields(h200, max_batch_per_gpu=largest), global_batch=global_batch,
                            gpus_per_node=gpus, nodes=1, inter_node_gbps=100)
        ran = batching.split_batch(global_batch, gpus, largest)
        assert (priced.per_gpu_batch, priced.accumulation) == expected
        assert (ran.micro_batch, ran.accumulation) == expected


def test_the_runner_reads_telemetry_through_the_contract_never_the_fitter():
    """Nothing in runner/ imports costsim.calibrate (scipy, the profile fit): the rules it shares with
    calibrate live in costsim.contract (steps, timing, telemetry); `runner profile` runs the fit as
    `costsim calibrate`, its own command."""
    import ast
    root = Path(__file__).resolve().parents[1] / "runner"
    importers = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(name == "costsim.calibrate" or name.startswith("costsim.calibrate.") for name in names) or (
                    isinstance(node, ast.ImportFrom) and node.module == "costsim"
                    and any(a.name == "calibrate" for a in node.names)):
                importers.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    assert not importers, importers
