"""The sdxl-unet workload through the runner on CPU: the real diffusers UNet class from a tiny config
(the full config is for GPUs), synthetic latents and text embeddings, the noise-prediction loss."""

import json
from pathlib import Path

import pytest

from tests.runner_helpers import events, execute, summary, tiny_plan

pytest.importorskip("diffusers")
pytestmark = pytest.mark.slow   # real DDP runs (see pyproject's markers)
TINY_UNET = Path(__file__).resolve().parent / "data" / "tiny_unet_config.json"


def sdxl_plan(tmp_path):
    plan = tiny_plan(tmp_path, interval_steps=4)
    doc = json.loads(plan.read_text())
    doc["workload"].update(model="sdxl-unet", global_batch=4, precision="bf16")
    plan.write_text(json.dumps(doc))
    return plan


def test_sdxl_unet_trains_checkpoints_and_resumes_exactly(tmp_path):
    plan = sdxl_plan(tmp_path)
    option = ["--option", f"config={TINY_UNET}", "--steps", "10", "--seed", "2"]
    clean = execute(plan, tmp_path / "clean", *option)
    assert clean.returncode == 0, clean.stderr[-3000:]
    drill = execute(plan, tmp_path / "drill", *option, "--inject-preemptions", "kill@6")
    assert drill.returncode == 0, drill.stderr[-3000:]
    assert summary(tmp_path / "drill")["restarts"] == 1
    assert events(tmp_path / "drill", "checkpoint_load")[0]["step"] == 4
    assert summary(tmp_path / "clean")["final_state_sha256"] == summary(tmp_path / "drill")["final_state_sha256"]


def test_full_sdxl_config_is_the_2_57b_unet():
    torch = pytest.importorskip("torch")
    from diffusers import UNet2DConditionModel

    from runner.workloads.sdxl import load_config
    with torch.device("meta"):
        model = UNet2DConditionModel.from_config(load_config())
    assert sum(p.numel() for p in model.parameters()) == 2_567_463_684
