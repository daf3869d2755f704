"""The sdxl-unet workload as a real fine-tune on CPU: a tiny UNet saved as a diffusers folder, latent
shards made by `runner prepare-sdxl` from a tiny pipeline (or written here), EMA, validation, the
export, bit-exact resume after a SIGKILL, and a loss that goes down where there is something to learn."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runner_helpers import clean_and_killed, events, execute
from tests.sdxl_tiny import TINY_UNET, save_images, save_tiny_pipeline, sdxl_plan

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

FINE_TUNE = ["--option", "ema=0.99", "--option", "val_samples=4", "--option", "val_every=5", "--option", "lr=1e-3",
             "--option", "warmup_steps=2", "--option", "schedule=cosine", "--option", "snr_gamma=5",
             "--option", "noise_offset=0.05"]


def save_weights(folder: Path) -> Path:
    from diffusers import UNet2DConditionModel
    torch.manual_seed(0)
    UNet2DConditionModel.from_config(json.loads(TINY_UNET.read_text())).save_pretrained(folder)
    return folder


def write_shards(folder: Path, sizes=(7, 5, 8), *, text_dim: int = 64, learnable: bool = False) -> Path:
    """Shards of other sizes, bf16 and fp32 mixed. `learnable`: latents are scaled copies of one smooth
    pattern (a denoiser can learn them); else noise."""
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    y, x = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    pattern = torch.stack([torch.sin(x / 3), torch.cos(y / 4), torch.sin((x + y) / 5), torch.cos((x - y) / 6)])
    for k, n in enumerate(sizes):
        latents = (pattern * (torch.rand(n, 4, 1, 1, generator=g) + 0.5) if learnable
                   else torch.randn(n, 4, 16, 16, generator=g))
        save_file({"latents": latents.to(torch.bfloat16).contiguous(),
                   "text": torch.randn(n, 77, text_dim, generator=g).to(torch.bfloat16),
                   "pooled": torch.randn(n, 32, generator=g), "time_ids": torch.full((n, 6), 128.0)},
                  str(folder / f"shard-{k:05d}.safetensors"))
    return folder


def exported(run: Path) -> dict:
    return load_file(str(run / "final" / "unet" / "diffusion_pytorch_model.safetensors"))


@pytest.mark.slow
def test_a_fine_tune_resumes_bit_exact_after_a_kill_and_exports_its_ema(tmp_path):
    plan, weights, data = sdxl_plan(tmp_path), save_weights(tmp_path / "weights"), write_shards(tmp_path / "data")
    # model, optimizer, EMA, LR schedule and the data position all resumed: the same training to the bit
    clean, drill = clean_and_killed(plan, tmp_path, "--steps", "10", "--option", f"weights={weights}",
                                    "--option", f"data={data}", *FINE_TUNE, kill="kill@6")
    assert events(drill, "checkpoint_load")[0]["step"] == 4
    assert [e["build"] for e in events(drill, "runtime")] == ["initialised", "empty"]   # the resume read no weights
    a, b = exported(clean), exported(drill)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [e["loss"] for e in events(tmp_path / "clean", "validation")] == \
        [e["loss"] for e in events(tmp_path / "drill", "validation")][-2:]   # step 5 ran twice in the drill

    # The export is the final checkpoint's EMA (not the live weights), and diffusers loads it.
    import torch.distributed.checkpoint as dcp
    from diffusers import UNet2DConditionModel
    loaded = UNet2DConditionModel.from_pretrained(tmp_path / "clean" / "final" / "unet")
    names = [name for name, _ in loaded.named_parameters()]
    state = {"ema": {n: torch.empty_like(p) for n, p in loaded.named_parameters()},
             "model": {n: torch.empty_like(p) for n, p in loaded.named_parameters()}}
    dcp.load(state, checkpoint_id=str(tmp_path / "clean" / "checkpoints" / "step-10"))
    assert all(torch.equal(dict(loaded.named_parameters())[n].detach(), state["ema"][n]) for n in names)
    assert not all(torch.equal(state["ema"][n], state["model"][n]) for n in names)


@pytest.mark.slow
def test_the_validation_loss_goes_down_on_a_learnable_dataset(tmp_path):
    plan, weights = sdxl_plan(tmp_path), save_weights(tmp_path / "weights")
    data = write_shards(tmp_path / "data", sizes=(48,), learnable=True)
    result = execute(plan, tmp_path / "run", "--steps", "20", "--nproc-per-node", "1", "--option", f"weights={weights}",
                     "--option", f"data={data}", "--option", "val_samples=8", "--option", "val_every=5",
                     "--option", "lr=1e-3")
    assert result.returncode == 0, result.stderr[-3000:]
    losses = [e["loss"] for e in events(tmp_path / "run", "validation")]
    assert len(losses) == 4 and losses[-1] < 0.6 * losses[0], losses


@pytest.mark.slow
def test_prepare_sdxl_writes_shards_that_train_and_picks_up_where_it_stopped(tmp_path):
    model = save_tiny_pipeline(tmp_path / "pipeline")
    images = save_images(tmp_path / "images", 5, metadata=True)
    prepare = [sys.executable, "-m", "runner", "prepare-sdxl", str(images), "--model", str(model), "--out",
               str(tmp_path / "data"), "--resolution", "128", "--shard-size", "2", "--batch", "2"]
    first = subprocess.run(prepare, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    shards = sorted((tmp_path / "data").glob("*.safetensors"))
    assert [len(load_file(str(s))["latents"]) for s in shards] == [2, 2, 1]
    kept, lost = shards[0].stat().st_mtime_ns, load_file(str(shards[1]))
    shards[1].unlink()   # as if it had stopped there
    again = subprocess.run(prepare, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 already written" in again.stderr and shards[0].stat().st_mtime_ns == kept
    redone = load_file(str(shards[1]))
    assert all(torch.equal(redone[k], lost[k]) for k in lost)   # seeded: the same shard again

    # pipeline folder as weights= (its unet/), the shards as data=: they train and export
    result = execute(sdxl_plan(tmp_path), tmp_path / "run", "--steps", "2", "--option", f"weights={model}",
                     "--option", f"data={tmp_path / 'data'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "final" / "unet" / "config.json").is_file()


def bad(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    return execute(sdxl_plan(tmp_path), tmp_path / "run", "--steps", "2", *[a for o in options for a in ("--option", o)])


def test_bad_weights_and_data_are_one_line_before_anything_starts(tmp_path):
    weights = save_weights(tmp_path / "weights")
    wrong = write_shards(tmp_path / "wrong", sizes=(3,), text_dim=48)
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL"}))
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "shard-00000.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    cases = [
        (["weights=stabilityai/stable-diffusion-xl-base-1.0"], "no such folder here"),
        ([f"weights={tmp_path}"], "no config.json in it"),
        ([f"weights={weights}", f"data={wrong}"], "shard-00000.safetensors: tensor 'text' has shape (3, 77, 48); "
                                                  "the model needs (N, 77, 64)"),
        ([f"weights={weights}", f"data={tmp_path / 'torn'}"], "not a readable safetensors file"),
        ([f"config={TINY_UNET}", f"data={write_shards(tmp_path / 'few', sizes=(3,))}", "val_samples=3"],
         "the dataset has 3 samples; hold out fewer"),
        ([f"weights={tmp_path / 'vae'}"], "is a AutoencoderKL, not a UNet2DConditionModel"),
        (["schedule=linear"], "allowed constant, cosine"),
        (["val_samples=2"], "needs data="),
    ]
    for options, message in cases:
        result = bad(tmp_path, *options)
        assert result.returncode == 2, (options, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, (options, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not (tmp_path / "run").exists()   # refused before the run folder was made


def test_prepare_sdxl_refuses_bad_input_in_one_line(tmp_path):
    images = save_images(tmp_path / "images", 2)
    model = tmp_path / "pipeline"
    for part in ("vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"):
        (model / part).mkdir(parents=True)   # every folder there, no files in them
    (tmp_path / "empty").mkdir()

    def prepare(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "runner", "prepare-sdxl", "--out", str(tmp_path / "out"),
                               "--resolution", "128", "--device", "cpu", *args],   # the case's options win
                              capture_output=True, text=True, timeout=120)

    cases = [((str(tmp_path / "empty"), "--model", str(model)), "no images"),
             ((str(images), "--model", str(tmp_path / "nowhere")), "no such folder: --model is a local diffusers"),
             ((str(images), "--model", str(model)), "cannot load the VAE, tokenizers and text encoders"),
             ((str(images), "--model", str(model), "--resolution", "100"), "not a multiple of 8")]
    for args, message in cases:
        result = prepare(*args)
        assert result.returncode == 2, (args, result.stderr)
        error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(error) == 1 and message in error[0] and "Traceback" not in result.stderr, (args, result.stderr)


def test_runner_execute_checks_options_without_importing_torch(tmp_path):
    """The supervisor checks the workload's options (the weights folder, every shard's header) before torchrun
    starts, on every life's path: torch's import (1-2 s) would be paid there once more before the workers'."""
    weights, data = save_weights(tmp_path / "weights"), write_shards(tmp_path / "data")
    plan = sdxl_plan(tmp_path)
    code = ("import sys\n"
            "from runner.cli import cli\n"
            "try:\n"
            f"    cli.main(['execute', {str(plan)!r}, '--run-dir', {str(tmp_path / 'run')!r}, '--check', '--option',"
            f" 'weights={weights}', '--option', 'data={data}', '--option', 'val_samples=4'], standalone_mode=False)\n"
            "except SystemExit as done:\n"
            "    assert done.code in (0, None), done.code\n"
            "from runner.workloads import check_options, resolve\n"
            "check_options(resolve('tiny'), 'tiny', {'pace': '5ms'})\n"
            "from runner import supervisor, workerenv\n"
            "print('torch imported' if 'torch' in sys.modules else 'no torch')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "no torch", result.stdout + result.stderr
    # and the same check still refuses what the workers could not load
    bad_data = write_shards(tmp_path / "few", sizes=(3,))
    refused = bad(tmp_path, f"weights={weights}", f"data={bad_data}", "val_samples=3")
    assert refused.returncode == 2 and "the dataset has 3 samples; hold out fewer" in refused.stderr
