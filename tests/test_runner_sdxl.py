"""The sdxl-unet workload through the runner on CPU: the real diffusers UNet class from a tiny config
(the full config is for GPUs), synthetic latents and text embeddings, the noise-prediction loss."""


import pytest

from tests.runner_helpers import clean_and_killed, events
from tests.sdxl_tiny import TINY_UNET, sdxl_plan

pytest.importorskip("diffusers")
pytestmark = pytest.mark.slow   # real DDP runs (see pyproject's markers)


def test_sdxl_unet_trains_checkpoints_and_resumes_exactly(tmp_path):
    plan = sdxl_plan(tmp_path)
    _, drill = clean_and_killed(plan, tmp_path, "--option", f"config={TINY_UNET}", "--steps", "10", "--seed", "2",
                                kill="kill@6")
    assert events(drill, "checkpoint_load")[0]["step"] == 4
    assert [e["build"] for e in events(drill, "runtime")] == ["initialised", "empty"]   # the resume drew no weights


def test_full_sdxl_config_is_the_2_57b_unet():
    torch = pytest.importorskip("torch")
    from diffusers import UNet2DConditionModel

    from runner.workloads.sdxl import load_config
    with torch.device("meta"):
        model = UNet2DConditionModel.from_config(load_config())
    assert sum(p.numel() for p in model.parameters()) == 2_567_463_684
