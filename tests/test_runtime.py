"""Runner settings (costsim.runtime): parsing, the path profile -> plan.json, and calibration on the
measured H200 runs that the shipped profile was made from. No torch needed."""

import json
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from costsim import io as cio
from costsim.calibrate import calibrate, load_run
from costsim.errors import InputError
from costsim.runtime import Runtime, parse_pairs, parse_runtime
from tests.test_bad_input import check

ROOT = Path(__file__).resolve().parents[1]
RESTARTS = ROOT / "data" / "measurements" / "2026-11-30-h200-sdxl-restart"
READER = ROOT / "data" / "measurements" / "2026-11-30-h200-sdxl-reader"
MEASURED = ROOT / "data" / "measurements" / "2026-11-29-h200-sdxl-speed"
LIVES = ROOT / "data" / "measurements" / "2026-12-02-h200-lives"
FAST = ROOT / "data" / "measurements" / "2026-12-02-h200-fast-resume"
EMPTY = ROOT / "data" / "measurements" / "2026-12-02-h200-empty-build"
ABANDON = ROOT / "data" / "measurements" / "2026-12-03-h200-notice-abandon"
GPU_COUNT = ROOT / "data" / "measurements" / "2026-12-03-h200-gpu-count"
STREAMING = ROOT / "data" / "measurements" / "2026-12-03-h200-async-streaming"
RESUME_CHECK = ROOT / "data" / "measurements" / "2026-12-04-h200-resume-check"
REMOVE_AHEAD = ROOT / "data" / "measurements" / "2026-12-04-h200-remove-ahead"
ZLIB_NG = ROOT / "data" / "measurements" / "2026-12-04-h200-fetch-zlib-ng"
MEASURED_AT = ROOT / "data" / "measurements"
GEGLU = ROOT / "data" / "measurements" / "2026-12-06-h200-geglu-split"
FINETUNE = ROOT / "data" / "measurements" / "2026-11-30-h200-sdxl-finetune"
GRAPHS_RUN = ROOT / "data" / "measurements" / "2026-12-06-h100-graphs-runner" / "run"
GRAPHS_RESUME_RUN = ROOT / "data" / "measurements" / "2026-12-07-h100-graphs-resume-load" / "run"   # a resume
PRECOMPILED_RUN = ROOT / "data" / "measurements" / "2026-12-07-h100-precompile" / "as-written-precompile" / "run"
INDEXED_RUN = ROOT / "data" / "measurements" / "2026-12-07-h100-graph-tree-index" / "precompiled-resume" / "on" / "run"
KEPT_AUTOTUNE = ROOT / "data" / "measurements" / "2026-12-08-h100-kept-autotune"
KEPT_AUTOTUNE_RUNS = [KEPT_AUTOTUNE / "call1" / "1-kept-autotune-1" / "run",
                      KEPT_AUTOTUNE / "call2" / "3-kept-autotune-1" / "run"]


def test_defaults_are_the_plain_eager_loop():
    assert parse_runtime(None, "p") == Runtime()
    assert Runtime().describe() == "eager defaults"


def test_cuda_graphs_are_the_compiled_modes_that_replay_graphs():
    # what keeps a resume's warm step (a forward on another thread) off CUDA graph trees, which live per thread
    assert Runtime(compile="model", compile_mode="reduce-overhead").cuda_graphs
    assert Runtime(compile="blocks", compile_mode="max-autotune").cuda_graphs
    assert not Runtime(compile="model", compile_mode="max-autotune-no-cudagraphs").cuda_graphs
    assert not Runtime(compile="model").cuda_graphs
    assert not Runtime(compile="off", compile_mode="reduce-overhead").cuda_graphs   # nothing compiled, no graphs


def test_pairs_and_mappings_parse_to_the_same_settings():
    pairs = parse_pairs(["compile=blocks", "channels_last=true", "sdpa=cudnn", "ddp_bucket_mb=100",
                         "ddp_comm=bf16", "cudnn_benchmark=on", "fp8=blocks", "activation_memory_budget=0.5"])
    mapping = parse_runtime({"compile": "blocks", "channels_last": True, "sdpa": "cudnn", "ddp_bucket_mb": 100,
                             "ddp_comm": "bf16", "cudnn_benchmark": True, "fp8": "blocks",
                             "activation_memory_budget": 0.5}, "p")
    assert pairs == mapping
    assert pairs.describe() == ("compile=blocks channels_last=true sdpa=cudnn activation_memory_budget=0.5 fp8=blocks "
                                "ddp_bucket_mb=100.0 ddp_comm=bf16 cudnn_benchmark=true")


def test_pairs_override_a_base():
    base = parse_runtime({"compile": "blocks", "sdpa": "flash"}, "p")
    assert parse_pairs(["sdpa=auto"], base=base) == Runtime(compile="blocks")


@pytest.mark.parametrize("raw, field, allowed", [
    ({"compile": "fast"}, "runtime.compile", "off, blocks, model"),
    ({"sdpa": "xformers"}, "runtime.sdpa", "auto, flash, efficient, cudnn, math"),
    ({"channels_last": "maybe"}, "runtime.channels_last", "true or false"),
    ({"ddp_bucket_mb": -1}, "runtime.ddp_bucket_mb", "positive"),
    ({"ddp_comm": "fp16"}, "runtime.ddp_comm", "fp32, bf16"),
    ({"compile": "model", "ddp_graph": "joined"}, "runtime.ddp_graph", "split, whole"),
    ({"ddp_graph": "whole"}, "runtime.ddp_graph", "applies to compiled models"),
    ({"cudnn_benchmark": "fast"}, "runtime.cudnn_benchmark", "true or false"),
    ({"fp8": "e4m3"}, "runtime.fp8", "off, blocks, model"),
    ({"fp8": "blocks", "fp8_select": "big"}, "runtime.fp8_select", "all, large"),
    ({"fp8_select": "large"}, "runtime.fp8_select", "set fp8=blocks or fp8=model"),
    ({"compile": "model", "activation_memory_budget": 0}, "runtime.activation_memory_budget", "fraction in (0, 1]"),
    ({"compile": "model", "activation_memory_budget": "half"}, "runtime.activation_memory_budget", "fraction"),
    ({"activation_memory_budget": 0.5}, "runtime.activation_memory_budget", "applies to compiled graphs"),
    ({"coordinate_descent_tuning": True}, "runtime.coordinate_descent_tuning", "set compile=blocks"),
    ({"compile": "blocks", "coordinate_descent_tuning": "always"}, "runtime.coordinate_descent_tuning", "true or false"),
    ({"geglu": "halves"}, "runtime.geglu", "fused, split"),
    ({"compile": "blocks", "ddp_graph": "whole", "precompile": True}, "runtime.precompile", "set compile=model"),
    ({"compile": "model", "precompile": True}, "runtime.precompile", "ddp_graph=whole"),
    ({"compile": "model", "ddp_graph": "whole", "precompile": "always"}, "runtime.precompile", "true or false"),
    ({"geglu": "split", "fp8": "blocks"}, "runtime.geglu", "fp8=off"),
    ({"shell": "rm -rf /"}, "runtime.shell", "allowed: compile"),
])
def test_bad_settings_name_the_field_and_what_is_allowed(raw, field, allowed):
    with pytest.raises(InputError) as error:
        parse_runtime(raw, "plan.json")
    assert error.value.field == field and allowed in error.value.message


def test_profile_settings_travel_into_plan_json(run_cli, tmp_path):
    doc = yaml.safe_load((Path(cio.data_dir()) / "profiles" / "tiny.yaml").read_text())
    gpu = next(iter(doc["gpus"]))
    doc["gpus"][gpu]["runtime"] = {"channels_last": True, "ddp_bucket_mb": 50}
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(doc))
    out = tmp_path / "plan.json"
    result = run_cli("plan", "--workload", "tiny", "--profile", str(profile), "--trials", "10", "--out", str(out))
    assert result.exit_code == 0, result.stderr
    runtime = json.loads(out.read_text())["runtime"]
    assert runtime["channels_last"] is True and runtime["ddp_bucket_mb"] == 50 and runtime["compile"] == "off"


def test_a_profile_with_a_bad_setting_is_one_line(run_cli, tmp_path):
    doc = yaml.safe_load((Path(cio.data_dir()) / "profiles" / "tiny.yaml").read_text())
    gpu = next(iter(doc["gpus"]))
    doc["gpus"][gpu]["runtime"] = {"compile": "yes"}
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(doc))
    check(run_cli("plan", "--workload", "tiny", "--profile", str(profile)), "profile.yaml",
          f"gpus.{gpu}.runtime.compile", "off, blocks, model")


def geglu_split_saving(rows: Path, fused: str, split: str) -> float:
    """Seconds a sample that geglu=split saved in a measurement's A B A B rows (its labels begin `fused` or `split`):
    the mean step's difference over the micro-batch."""
    measured = [json.loads(line) for line in rows.read_text().splitlines() if line.strip()]
    steps = {way: [r["step_s"] for r in measured if r["label"].startswith(label + " (")]
             for way, label in (("fused", fused), ("split", split))}
    assert all(len(v) == 2 for v in steps.values())
    return (statistics.mean(steps["fused"]) - statistics.mean(steps["split"])) / measured[0]["batch"]


def as_measured(profile):
    """The profile with its H200 configurations as the runs of their calibration ran: without geglu=split, which the
    shipped ones run since 2026-12-06 (a run matches the configuration whose settings it ran)."""
    def fused(entry):
        return replace(entry, runtime=replace(entry.runtime, geglu="fused"))
    return replace(profile, gpus={**profile.gpus, "H200": fused(profile.gpus["H200"])},
                   variants={**profile.variants, "H200": tuple(fused(v) for v in profile.variants["H200"])})


def test_shipped_h200_profile_is_the_calibration_of_the_measured_runs():
    shipped = cio.load_profile("sdxl-unet")
    profile = as_measured(shipped)
    model, (blocks,) = profile.gpus["H200"], profile.variants["H200"]
    assert (model.variant, blocks.variant) == ("model", "blocks")
    # Both run geglu=split (2026-12-06), measured A B A B on one H200 against the runs below, which ran without it:
    # their compute per sample is the calibration's less the saving per sample measured there.
    assert shipped.gpus["H200"].runtime.geglu == shipped.variants["H200"][0].runtime.geglu == "split"
    model_saving = geglu_split_saving(GEGLU / "model" / "warm.jsonl", "compile=model geglu=fused",
                                      "compile=model geglu=split")
    blocks_saving = geglu_split_saving(GEGLU / "blocks" / "bench_sdxl.jsonl", "compile=blocks",
                                       "compile=blocks geglu=split")
    assert 0 < blocks_saving < model_saving
    # The main configuration: whole-model compilation (one graph under DDP) at 16 per GPU, from its
    # 1- and 2-GPU runs, the drill and the restarts: step time, checkpoint save and async cost, restart ...
    runs = [load_run(str(RESTARTS / name)) for name in ("whole-gpus1-cold", "whole-gpus2")]
    runs += [load_run(str(READER / name)) for name in ("whole-gpus2-cold", "drill", "restart2", "restart3")]
    result = calibrate(runs, profile)
    assert all(r.runtime == model.runtime for r in runs) and model.runtime.ddp_graph == "whole"
    assert result.after.compute_per_sample_s - model_saving == pytest.approx(model.compute_per_sample_s, rel=1e-4)
    assert result.after.intra_a_s == pytest.approx(model.intra_a_s, rel=1e-4)
    assert result.after.restart_s == pytest.approx(model.restart_s, abs=0.05)
    assert result.after.checkpoint_save_s == pytest.approx(model.checkpoint_save_s, abs=0.05)
    assert result.after.checkpoint_stall_s == pytest.approx(model.checkpoint_stall_s, abs=0.005)
    assert max(r.point.micro_batch for r in runs) == model.max_batch_per_gpu == 16
    assert "compute_overhead_s" in result.step_fit.pinned   # one batch size: said, not silently fitted
    # ... an async save costs more than its stall (the step that paid it, the steps beside its write) ...
    stalls = [s for r in runs for s in r.async_stall_s]
    assert len(stalls) == 5 and max(stalls) < model.checkpoint_stall_s
    # ... and its start-up from the runs that compiled cold (a job's first start) on 1 and 2 GPUs.
    cold = calibrate([load_run(str(RESTARTS / "whole-gpus1-cold")), load_run(str(READER / "whole-gpus2-cold"))],
                     profile)
    assert cold.after.startup_s == pytest.approx(model.startup_s, abs=0.05)
    lives = calibrate([load_run(str(LIVES / "run"))], profile)
    # The variant measured before: compile=blocks at 8 per GPU, restart from the drill.
    tuned = MEASURED / "ddp-tuned" / "tuned"
    result = calibrate([load_run(str(tuned / "gpus1-batch8")), load_run(str(tuned / "gpus2-batch8"))], profile)
    assert result.before is blocks and blocks.runtime == Runtime(compile="blocks", gc_every=50, ddp_bucket_mb=200)
    assert result.after.compute_per_sample_s - blocks_saving == pytest.approx(blocks.compute_per_sample_s, rel=1e-4)
    assert result.after.intra_a_s == pytest.approx(blocks.intra_a_s, rel=1e-4)
    assert result.after.startup_s == pytest.approx(blocks.startup_s, abs=0.05)
    # Its save: the notice's save of the plan as written with its CRCs computed while writing (2026-12-03);
    # 2026-12-02's two notices' saves, read back after, took longer. Its restart: the same plan's same-node
    # resumes with the workers' bytecode kept (2026-12-02, one machine), two a day later (another) and three on a
    # third machine, counted from runner execute's own start, and one each on a fourth and a fifth, async saves streamed
    streamed = [load_run(str(STREAMING / "ab" / "run")), load_run(str(STREAMING / "second" / "ab" / "run"))]
    # ... and three more machines' lives with the supervisor's check of the checkpoint (2026-12-04)
    checked = [load_run(str(RESUME_CHECK / name / "run")) for name in ("first", "second", "third")]
    # ... and two more machines' with room made ahead of the save and the imports done beside the load
    checked += [load_run(str(REMOVE_AHEAD / name / "run")) for name in ("first", "second", "third")]
    # ... and three more runs' (two more machines) with the checkpoints' CRC-32 by zlib-ng
    checked += [load_run(str(ZLIB_NG / name / "run")) for name in ("second", "third", "fourth")]
    noticed = calibrate([load_run(str(ABANDON / "blocking" / "run")), *streamed, *checked], profile)
    assert noticed.after.checkpoint_save_s == pytest.approx(17.82, abs=0.05)   # the save until 2026-12-05
    # The restart since 2026-12-05 (the read in batches, the warm step beside it): two more machines' lives too,
    # then the state made directly (one more), then the same code again (2026-12-05, evening: the read buffers'
    # two timings alternated); the save since then from the notices of all of them
    batched = [load_run(str(MEASURED_AT / name / "run")) for name in (
        "2026-12-05-h200-batched-read/first", "2026-12-05-h200-batched-read/second",
        "2026-12-05-h200-state-sizing/first", "2026-12-05-h200-state-sizing/second",
        "2026-12-05-h200-read-buffers/first", "2026-12-05-h200-read-buffers/second")]
    bytecode = calibrate([load_run(str(EMPTY / "third" / "run")), load_run(str(ABANDON / "blocking" / "run")),
                          load_run(str(ABANDON / "default" / "run")), load_run(str(GPU_COUNT / "run")), *streamed,
                          *checked, *batched], profile)
    assert bytecode.after.restart_s == pytest.approx(blocks.restart_s, abs=0.05)
    assert bytecode.after.checkpoint_save_s == pytest.approx(blocks.checkpoint_save_s, abs=0.05)
    assert lives.after.checkpoint_save_s > blocks.checkpoint_save_s + 3
    empty = calibrate([load_run(str(EMPTY / "run")), load_run(str(EMPTY / "second" / "run"))], profile)
    fast = calibrate([load_run(str(FAST / "second" / "run"))], profile)
    restarts = [blocks.restart_s, empty.after.restart_s, fast.after.restart_s, lives.after.restart_s, 77.65]
    assert restarts == sorted(restarts) and blocks.restart_s < 20.0   # each change made it shorter; 77.65: 2026-11-29


def test_calibrate_raises_the_largest_batch_to_one_a_run_trained_at():
    profile = as_measured(cio.load_profile("sdxl-unet"))   # the configurations these runs ran
    smaller = replace(profile, gpus={**profile.gpus, "H200": replace(profile.gpus["H200"], max_batch_per_gpu=8)})
    run = load_run(str(MEASURED / "model-b16" / "warm" / "gpus1-batch16"))
    result = calibrate([run], smaller)
    assert run.point.micro_batch == result.after.max_batch_per_gpu == 16
    assert any("max_batch_per_gpu raised from 8 to 16" in note for note in result.notes)
    tuned = load_run(str(MEASURED / "ddp-tuned" / "tuned" / "gpus1-batch8"))   # 8 proves nothing about 16
    assert calibrate([tuned], profile).after.max_batch_per_gpu == profile.variants["H200"][0].max_batch_per_gpu


def _tiny_with_variant(tmp_path, **compiled) -> str:
    doc = yaml.safe_load((Path(cio.data_dir()) / "profiles" / "tiny.yaml").read_text())
    cpu = doc["gpus"]["cpu"]
    cpu["variant"] = "eager"
    cpu["variants"] = {"compiled": {"source": "test", "runtime": {"compile": "blocks"}, **compiled}}
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_the_planner_weighs_each_runner_configuration(run_cli, tmp_path):
    out = tmp_path / "plan.json"

    def chosen(profile):
        result = run_cli("plan", "--workload", "tiny", "--profile", profile, "--trials", "10", "--out", str(out),
                         "--format", "json")
        assert result.exit_code == 0, result.stderr
        ranked = {c["variant"] for c in json.loads(result.stdout)["candidates"]}
        doc = json.loads(out.read_text())
        return doc["profile"]["variant"], doc["runtime"]["compile"], ranked

    # Twice the throughput: the compiled configuration wins and the plan carries its settings ...
    assert chosen(_tiny_with_variant(tmp_path, compute_per_sample="0.000015s")) == \
        ("compiled", "blocks", {"eager", "compiled"})
    # ... unless its start-up (here longer than the deadline) costs more than its speed saves.
    assert chosen(_tiny_with_variant(tmp_path, compute_per_sample="0.000015s", startup="20m"))[:2] == ("eager", "off")


@pytest.mark.parametrize("variant, field, allowed", [
    ({"variants": {"compiled": {"runtime": {"compile": "blocks"}}}}, "gpus.cpu.variant", "missing"),
    ({"variant": "eager", "variants": ["compiled"]}, "gpus.cpu.variants", "expected a mapping"),
    ({"variant": "eager", "variants": {"same": {"compute_per_sample": "1s"}}}, "gpus.cpu.variants.same.runtime",
     "configurations differ in their runner settings"),
    ({"variant": "eager", "variants": {"eager": {"runtime": {"compile": "blocks"}}}}, "gpus.cpu.variants.eager.name",
     "names must differ"),
    ({"variant": "eager", "variants": {"x": {"runtime": {"compile": "yes"}}}}, "gpus.cpu.variants.x.runtime.compile",
     "off, blocks, model"),
])
def test_bad_variants_are_one_line(run_cli, tmp_path, variant, field, allowed):
    doc = yaml.safe_load((Path(cio.data_dir()) / "profiles" / "tiny.yaml").read_text())
    doc["gpus"]["cpu"].update(variant)
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(doc))
    check(run_cli("plan", "--workload", "tiny", "--profile", str(profile)), "profile.yaml", field, allowed)


def test_calibrate_refuses_runs_of_different_runner_settings(tmp_path):
    eager = tmp_path / "eager"
    eager.mkdir()
    source = MEASURED / "profile-1gpu-blocks-b8"
    (eager / "plan.json").write_text((source / "plan.json").read_text())
    lines = []
    for line in (source / "telemetry.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "runtime":
            event["settings"]["compile"] = "off"
        lines.append(json.dumps(event))
    (eager / "telemetry.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as error:
        calibrate([load_run(str(source)), load_run(str(eager))], cio.load_profile("sdxl-unet"))
    assert error.value.field == "runtime" and "one runner configuration at a time" in error.value.message


def test_runs_from_another_machine_find_the_builtin_profile_of_their_plan(tmp_path):
    from costsim.calibrate import plan_profile
    for name, path in (("moved", "/elsewhere/data/profiles/sdxl-unet.yaml"), ("unknown", "/elsewhere/mine.yaml")):
        folder = tmp_path / name
        folder.mkdir()
        plan = json.loads((MEASURED / "profile-1gpu-blocks-b8" / "plan.json").read_text())
        plan["profile"]["path"] = path
        (folder / "plan.json").write_text(json.dumps(plan))
        (folder / "telemetry.jsonl").write_text((MEASURED / "profile-1gpu-blocks-b8" / "telemetry.jsonl").read_text())
    assert plan_profile(load_run(str(tmp_path / "moved"))).id == cio.load_profile("sdxl-unet").id
    with pytest.raises(InputError) as error:
        plan_profile(load_run(str(tmp_path / "unknown")))
    assert error.value.field == "profile.path" and "pass --profile" in error.value.message


def test_simulate_runs_the_configuration_named(run_cli):
    """On on-demand (no preemptions) a run's makespan is the named configuration's start-up, its work,
    its periodic checkpoint stalls and the final synchronous save: each variant's own figures, taken here
    from its profile entry (start-up, step time, checkpoint figures), not from the code under test."""
    import math

    from costsim.catalog import find_offering
    from costsim.planner import checkpoints_for
    from costsim.storage import load_storage
    from costsim.throughput import step_model
    workload = cio.load_workload("sdxl")
    profile = cio.load_profile_for(workload.model, workload.profile)
    offering = find_offering("aws/us-east-1/p5en.48xlarge", workload)
    args = ("simulate", "--workload", "sdxl", "--offering", offering.id, "--policy", "on-demand", "--trials", "3",
            "--checkpoint-interval", "1h", "--format", "json")
    makespans = {}
    for gpu in profile.configurations("H200"):
        result = run_cli(*args, "--variant", gpu.variant)
        assert result.exit_code == 0, result.stderr
        step = step_model(gpu, global_batch=workload.global_batch, gpus_per_node=offering.gpus_per_node, nodes=1,
                          inter_node_gbps=offering.inter_node_gbps)
        saves = checkpoints_for(workload, profile, offering, gpu, load_storage())
        # each trial's speed: lognormal of mean 1 and the profile's spread, from the stream (seed, trial, 1)
        sigma = math.sqrt(math.log1p(gpu.step_time_spread ** 2))
        expected = []
        for trial in range(3):
            speed = np.random.default_rng([0, trial, 1]).lognormal(-0.5 * sigma * sigma, sigma) if sigma else 1.0
            work_s = workload.samples / step.samples_per_s * speed
            expected.append(offering.provision_s + gpu.startup_s + work_s + math.floor(work_s / 3600) * saves.stall_s
                            + saves.save_s)
        makespans[gpu.variant] = json.loads(result.stdout)["makespan_h"]["mean"] * 3600
        assert makespans[gpu.variant] == pytest.approx(np.mean(expected), rel=1e-9)
    # the two configurations' figures differ (compilation: start-up and step time), so a wrong pick shows
    assert set(makespans) == {"model", "blocks"} and abs(makespans["model"] - makespans["blocks"]) > 60.0
    check(run_cli(*args, "--variant", "nope"), "--variant", "'nope'", "allowed: model, blocks")


def test_calibrate_compares_an_async_plans_stall_with_async_saves_only():
    from costsim.calibrate import report_rows
    profile = cio.load_profile("sdxl-unet")
    runs = [load_run(str(RESTARTS / "drill")), load_run(str(RESTARTS / "restart"))]   # both plans: async
    assert all(r.plan.checkpoint.async_ for r in runs)
    rows = {row["run"]: row["checkpoint_stall_s"]["measured"] for row in report_rows(calibrate(runs[:1], profile))
            + report_rows(calibrate(runs[1:], profile))}
    assert rows["drill"] == pytest.approx(statistics.median(runs[0].async_cost_s))
    assert min(runs[0].async_cost_s) > max(runs[0].async_stall_s)   # the stalled step and the steps beside the write
    assert runs[1].sync_save_s and not runs[1].async_stall_s
    assert rows["restart"] is None   # only a final synchronous save: no measurement of an async stall


def test_a_run_on_other_gpus_than_its_plan_priced_is_not_compared_with_its_step_time():
    """The shipped plan (8 x H200, micro-batch 8) run on the 2 GPUs a machine had (accumulation 4):
    the plan's step time is for another batch split, so no error is computed against it."""
    from costsim.calibrate import report_rows
    profile = cio.load_profile("sdxl-unet")
    other = load_run(str(FINETUNE / "finetune"))
    assert not other.ran_as_priced and (other.point.gpus, other.point.accumulation) == (2, 4)
    result = calibrate([other], profile)
    row, = report_rows(result)
    assert row["step_s"]["plan"] is None and row["samples_per_s"]["plan"] is None
    assert row["step_s"]["measured"] == other.point.step_s
    assert any("not the 8 GPU(s) on 1 node(s) its plan priced" in note for note in result.notes)
    same = load_run(str(FINETUNE / "eager" / "data-1"))
    assert same.ran_as_priced
    row, = report_rows(calibrate([same], profile))
    assert row["step_s"]["plan"] == same.plan.prediction.step_time_s


def test_a_run_cut_short_is_not_compared_with_its_plans_makespan():
    from costsim.calibrate import report_rows
    run = load_run(str(READER / "drill"))   # `--steps 110` of a plan for the whole fine-tune
    assert run.steps == 110 < run.plan.job_steps
    result = calibrate([run], cio.load_profile("sdxl-unet"))
    row, = report_rows(result)
    assert row["wall_s"]["plan"] is None and row["wall_s"]["measured"] == run.wall_s
    assert any("ran 110 of its plan's" in note for note in result.notes)


def test_a_restart_is_not_compared_with_a_plans_restart_that_includes_the_object_stores_fetch():
    """The plan as written keeps its checkpoints in an object store: its restart is a new node's, the fetch
    included (costsim.storage); a run's measured restart leaves any fetch out. Plans whose checkpoints stay on
    the node or in a shared folder compare theirs."""
    from costsim.calibrate import report_rows
    profile = cio.load_profile("sdxl-unet")
    run = load_run(str(RESUME_CHECK / "second" / "run"))
    assert run.plan.checkpoint.storage_kind == "object" and len(run.restart_s) == 3
    result = calibrate([run], profile)
    row, = report_rows(result)
    assert row["restart_s"]["plan"] is None
    assert row["restart_s"]["measured"] == pytest.approx(statistics.median(run.restart_s))
    assert any("fetch from its object store" in note for note in result.notes)
    shared = load_run(str(READER / "drill"))
    assert shared.plan.checkpoint.storage_kind != "object" and shared.restart_s
    row, = report_rows(calibrate([shared], profile))
    assert row["restart_s"]["plan"] == shared.plan.prediction.restart_s


@pytest.mark.parametrize("device, known, said", [
    ("NVIDIA H100 80GB HBM3", ("H100", "H200", "B200"), "H100"),
    ("NVIDIA H200", ("H100", "H200"), "H200"),
    ("NVIDIA A100-SXM4-80GB", ("A100-80GB", "A100-40GB", "A100"), "A100-80GB"),
    ("NVIDIA A100-PCIE-40GB", ("A100-80GB", "A100-40GB"), "A100-40GB"),
    ("NVIDIA L40", ("L40S",), None),
    ("NVIDIA GH200 480GB", ("H200",), None),
    ("cpu", ("cpu", "H100"), "cpu"),
    (None, ("H100",), None),
])
def test_a_device_name_says_the_gpu_type(device, known, said):
    from costsim.devices import gpu_type, plan_gpu_mismatch
    assert gpu_type(device, known) == said
    if device and len(known) == 1:   # the runner's warning at a start: the device is not the plan's GPU
        warning = plan_gpu_mismatch(known[0], device)
        assert (warning is None) == (said is not None)
        assert warning is None or f"the plan priced {known[0]} GPUs and this one is {device}" in warning


def with_device(src: Path, dst: Path, device: str) -> Path:
    """A copy of a measured run folder whose workers said what they trained on, as runners since 2026-12-06 do."""
    dst.mkdir(parents=True)
    for name in ("plan.json", "summary.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    lines = []
    for line in (src / "telemetry.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "runtime":
            event["device"] = device
        lines.append(json.dumps(event))
    (dst / "telemetry.jsonl").write_text("\n".join(lines) + "\n")
    return dst


def test_a_run_on_another_gpu_than_its_plan_priced_refits_that_gpus_figures(tmp_path):
    """The H200 plan run on an H100: its figures are the H100's. They refit the H100's entry, and none is compared
    with the plan's H200 prediction; a name no profile GPU has is taken as the plan's, with a note."""
    from costsim.calibrate import report_rows, updated_profile_document
    profile = cio.load_profile("sdxl-unet")
    src = FINETUNE / "eager" / "data-1"   # ran as its H200 plan priced: compared when the device agrees
    h200 = load_run(str(with_device(src, tmp_path / "h200", "NVIDIA H200")))
    row, = report_rows(calibrate([h200], profile))
    assert h200.gpu == "H200" and row["step_s"]["plan"] == h200.plan.prediction.step_time_s

    h100 = load_run(str(with_device(src, tmp_path / "h100", "NVIDIA H100 80GB HBM3")))
    result = calibrate([h100], profile)
    assert result.gpu == "H100" and h100.plan.resources.gpu == "H200"
    row, = report_rows(result)
    assert all(row[k]["plan"] is None for k in ("step_s", "samples_per_s", "wall_s", "checkpoint_stall_s",
                                                  "restart_s"))
    assert row["step_s"]["measured"] == h100.point.step_s
    assert any("ran on NVIDIA H100 80GB HBM3 (H100), its plan priced H200" in n for n in result.notes)
    doc = updated_profile_document(profile.path, result)
    shipped = yaml.safe_load(Path(profile.path).read_text())["gpus"]["H100"]
    assert doc["gpus"]["H100"]["variants"]["eager"]["source"].startswith("measured (1 run(s)")   # its settings'
    assert doc["gpus"]["H100"]["compute_per_sample"] == shipped["compute_per_sample"]   # the main one's stay
    assert doc["calibrations"][-1]["devices"] == ["NVIDIA H100 80GB HBM3"]   # where the figures came from
    assert doc["gpus"]["H200"] == yaml.safe_load(Path(profile.path).read_text())["gpus"]["H200"]   # untouched

    mixed = [h200, load_run(str(tmp_path / "h100"))]
    with pytest.raises(InputError, match="GPU type 'H100' differs from h200's 'H200'"):
        calibrate(mixed, profile)

    odd = load_run(str(with_device(src, tmp_path / "odd", "NVIDIA RTX 6000 Ada Generation")))
    result = calibrate([odd], profile)
    assert result.gpu == "H200" and any("names no GPU type of" in n and "taken as its plan's H200" in n
                                        for n in result.notes)


def test_calibrate_gpu_names_the_gpu_of_runs_that_do_not_and_is_refused_against_one_that_does(run_cli, tmp_path):
    """`costsim calibrate --gpu`: runs from before the runner recorded its device (the 2026-12-05 H100 lives, whose
    plan named the H200) refit the GPU given; a run that names another device, an unknown type and --market are
    refused in one line."""
    src = FINETUNE / "eager" / "data-1"
    old = tmp_path / "old"
    old.mkdir()
    for name in ("plan.json", "summary.json", "telemetry.jsonl"):
        (old / name).write_bytes((src / name).read_bytes())
    out = tmp_path / "cal.yaml"
    result = run_cli("calibrate", str(old), "--gpu", "h100", "--out", str(out), "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["gpu"] == "H100" and any("ran on H100 (--gpu), its plan priced H200" in n for n in doc["notes"])
    assert doc["runs"][0]["step_s"]["plan"] is None
    assert yaml.safe_load(out.read_text())["gpus"]["H100"]["source"].startswith("measured")
    named = with_device(src, tmp_path / "named", "NVIDIA H200")
    check(run_cli("calibrate", str(named), "--gpu", "H100", "--out", str(out)), "runtime.device",
          "ran on NVIDIA H200 (H200), not the --gpu H100 given")
    check(run_cli("calibrate", str(old), "--gpu", "H300", "--out", str(out)), "--gpu", "'H300' is no GPU type",
          "allowed: A100-80GB, B200, H100, H200")
    check(run_cli("calibrate", str(old), "--gpu", "a100-40gb", "--out", str(out)), "--gpu",
          "(A100-40GB is unsupported: 40 GB cannot hold", "allowed: A100-80GB, B200, H100, H200")
    market = run_cli("calibrate", "--market", str(old), "--gpu", "H100")
    assert market.exit_code == 2 and "--gpu goes without --market" in market.stderr


def out_of_memory_run(folder: Path, plan_from: Path, micro_batch: int, settings: dict, device: str) -> Path:
    """A run folder whose workers stopped out of memory at their first step, in the telemetry the runner writes
    then (runner.train: the `fatal` event, kind out_of_memory, with the batch split)."""
    folder.mkdir()
    (folder / "plan.json").write_bytes((plan_from / "plan.json").read_bytes())
    events = [{"t": 1.0, "event": "instance", "rank": None, "node": 0, "offering": "x", "market": "spot", "host": "h"},
              {"t": 1.1, "event": "launch", "rank": None, "attempt": 0},
              {"t": 9.0, "event": "runtime", "rank": 0, "world_size": 2, "settings": settings, "device": device,
               "micro_batch": micro_batch, "accumulation": 1},
              {"t": 30.0, "event": "fatal", "rank": 0, "world_size": 2, "kind": "out_of_memory", "micro_batch": micro_batch,
               "accumulation": 1, "reason": f"out of memory on rank 0, GPU 0 ({device}), at {micro_batch} samples ..."},
              {"t": 31.0, "event": "exit", "rank": None, "status": "failed", "restarts": 0, "ended": "failed"}]
    (folder / "telemetry.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder


def test_a_run_that_ran_out_of_memory_lowers_its_gpus_batch_limit(run_cli, tmp_path):
    """The H200's entry allows 16 a GPU; a run under eager settings trained at 8 and another ran out of memory at
    16: the calibrated limit of that configuration (new to the profile: it joins it as `eager`) is 8, and the
    others keep theirs. Out of memory at a batch a run trained at, or under other settings, leaves it; a run that
    only ran out of memory is no calibration on its own."""
    from costsim.calibrate import load_out_of_memory
    profile = cio.load_profile("sdxl-unet")
    trained_src = FINETUNE / "eager" / "data-1"   # eager defaults, 2 x H200 at 8
    trained = load_run(str(with_device(trained_src, tmp_path / "trained", "NVIDIA H200")))
    settings = trained.runtime.as_dict()
    at16 = out_of_memory_run(tmp_path / "at16", trained_src, 16, settings, "NVIDIA H200")
    stop = load_out_of_memory(str(at16))
    assert stop is not None and stop.micro_batch == 16 and stop.runtime == trained.runtime
    assert load_out_of_memory(str(tmp_path / "trained")) is None
    result = calibrate([trained], profile, out_of_memory=[stop])
    assert result.before.max_batch_per_gpu == 16 and result.after.max_batch_per_gpu == 8
    assert any("lowered from 16 to 8: at16 ran out of memory at 16 a GPU" in n for n in result.notes)

    at8 = load_out_of_memory(str(out_of_memory_run(tmp_path / "at8", trained_src, 8, settings, "NVIDIA H200")))
    result = calibrate([trained], profile, out_of_memory=[at8])
    assert result.after.max_batch_per_gpu == 16 and any("a run that trained proves it fits" in n for n in result.notes)
    other = out_of_memory_run(tmp_path / "other", trained_src, 16, {**settings, "compile": "model"}, "NVIDIA H200")
    result = calibrate([trained], profile, out_of_memory=[load_out_of_memory(str(other))])
    assert result.after.max_batch_per_gpu == 16 and any("not used" in n for n in result.notes)

    out = tmp_path / "cal.yaml"
    cli = run_cli("calibrate", str(tmp_path / "trained"), str(at16), "--out", str(out), "--format", "json")
    assert cli.exit_code == 0, cli.stderr
    h200 = yaml.safe_load(out.read_text())["gpus"]["H200"]
    assert h200["variants"]["eager"]["max_batch_per_gpu"] == 8 and h200["max_batch_per_gpu"] == 16
    assert [r["run"] for r in json.loads(cli.stdout)["runs"]] == ["trained"]   # the stop is in the notes, not a row
    check(run_cli("calibrate", str(at16), "--out", str(out)), "step", "every run given ran out of memory")


def test_calibrating_new_runner_settings_adds_a_configuration_beside_the_others(run_cli, tmp_path):
    """The H200 plan run on an H100 under whole-model compilation with CUDA graphs, against the shipped profile
    less the H100's `graphs` configuration that this run measured (settings no H100 entry then has): the calibrated
    profile keeps the H100's compile=blocks figures, now named, and adds the run's as a configuration of its own,
    which the planner weighs beside them; calibrating the run again against that profile, or against the shipped
    one, refits it in place."""
    from costsim.calibrate import configuration_name, updated_profile_document
    shipped_profile = cio.load_profile("sdxl-unet")
    doc = yaml.safe_load(Path(shipped_profile.path).read_text())
    assert doc["gpus"]["H100"].pop("variants") and doc["gpus"]["H100"].pop("variant") == "blocks"
    without = tmp_path / "without-graphs.yaml"
    without.write_text(yaml.safe_dump(doc, sort_keys=False))
    profile = cio.load_profile(str(without))
    shipped = doc["gpus"]["H100"]
    run = load_run(str(GRAPHS_RUN))
    result = calibrate([run], profile)
    assert result.gpu == "H100" and result.new_configuration and result.after.variant == "model-graphs"
    doc = updated_profile_document(profile.path, result)
    h100 = doc["gpus"]["H100"]
    assert h100["variant"] == "blocks" and h100["compute_per_sample"] == shipped["compute_per_sample"]
    assert h100["runtime"] == shipped["runtime"]
    added = h100["variants"]["model-graphs"]
    assert added["runtime"]["compile"] == "model" and added["runtime"]["compile_mode"] == "reduce-overhead"
    assert float(added["compute_per_sample"].rstrip("s")) == pytest.approx(result.after.compute_per_sample_s)
    assert float(added["restart"].rstrip("s")) == pytest.approx(statistics.median(run.restart_s))
    # its only start ran into a notice (no run without a restart): the start-up is that first life's start and exit,
    # the cold compile's 312 s first step in it, not the main configuration's 240 s
    assert run.fixed_s is None and run.first_life_s is not None and run.first_life_s > 312
    assert float(added["startup"].rstrip("s")) == pytest.approx(run.first_life_s)
    assert any("start-up: from the first lives of 1 run(s)" in n for n in result.notes)
    written = tmp_path / "calibrated.yaml"
    written.write_text(yaml.safe_dump(doc, sort_keys=False))
    calibrated = cio.load_profile(str(written))
    assert [g.variant for g in calibrated.configurations("H100")] == ["blocks", "model-graphs"]
    planned = run_cli("plan", "--workload", "sdxl", "--gpu", "H100", "--profile", str(written), "--trials", "20",
                      "--out", str(tmp_path / "plan.json"), "--format", "json")
    assert planned.exit_code == 0, planned.stderr
    assert {"blocks", "model-graphs"} <= {c["variant"] for c in json.loads(planned.stdout)["candidates"]}

    again = calibrate([run], calibrated)   # the configuration is found now: refitted where it is
    assert not again.new_configuration and again.after.variant == "model-graphs"
    redone = updated_profile_document(str(written), again)
    assert list(redone["gpus"]["H100"]["variants"]) == ["model-graphs"]
    assert redone["gpus"]["H100"]["compute_per_sample"] == shipped["compute_per_sample"]
    # the shipped profile's `graphs` is this configuration precompiled (runtime.precompile): a run without precompile
    # is another configuration beside it, one with it is found by its runner settings
    plain = calibrate([run], shipped_profile)
    assert plain.new_configuration and plain.after.variant == "model-graphs"
    assert plain.after.compute_per_sample_s == pytest.approx(result.after.compute_per_sample_s)
    (graphs,) = [g for g in shipped_profile.configurations("H100") if g.variant == "graphs"]
    assert graphs.runtime.precompile and not result.after.runtime.precompile
    precompiled = calibrate([load_run(str(PRECOMPILED_RUN))], shipped_profile)
    assert not precompiled.new_configuration and precompiled.after.variant == "graphs"
    # its restart is the runner's as it is now (the graph-tree index, the kept bytecode and autotuning timings: the
    # two runs of 2026-12-08), its start-up the median of the three cold starts measured (the precompiled resume's,
    # the indexed one's on a slower host, the kept timings' first), its compute figure the plain resume's (the same
    # steady step: data/measurements/2026-12-07-h100-precompile)
    indexed = calibrate([load_run(str(INDEXED_RUN))], shipped_profile)
    kept = calibrate([load_run(str(folder)) for folder in KEPT_AUTOTUNE_RUNS], shipped_profile)
    assert not indexed.new_configuration and indexed.after.variant == "graphs"
    assert not kept.new_configuration and kept.after.variant == "graphs"
    starts = [precompiled.after.startup_s, indexed.after.startup_s, kept.after.startup_s]
    assert (graphs.restart_s, graphs.startup_s) == pytest.approx((kept.after.restart_s, statistics.median(starts)),
                                                                 rel=1e-5)
    assert kept.after.restart_s < indexed.after.restart_s
    resumed = calibrate([load_run(str(GRAPHS_RESUME_RUN))], shipped_profile)
    assert resumed.new_configuration
    assert graphs.compute_per_sample_s == pytest.approx(resumed.after.compute_per_sample_s, rel=1e-5)
    # 23.5 s loading the saved model against 35.7 s tracing it again, and 47.9 s from step 0
    assert precompiled.after.restart_s < resumed.after.restart_s < result.after.restart_s

    assert configuration_name(Runtime(), set()) == "eager"
    assert configuration_name(parse_pairs(["compile=blocks", "compile_mode=max-autotune"]), {"blocks-graphs"}) \
        == "blocks-graphs-2"
