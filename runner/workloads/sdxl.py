"""`sdxl-unet`: the SDXL base UNet, a full fine-tune; synthetic by default, real with weights= and data=.

- Synthetic (no `data`): random 1024 px latents, text embeddings and pooled embeddings drawn on the
  GPU per sample. Random weights (no `weights`) are exact for speed and memory; nothing is ever
  downloaded. This is what benchmarks and profiles run.
- A fine-tune: `weights=DIR` (a diffusers UNet folder, or a pipeline folder with `unet/`, loaded
  into fp32 master weights) and `data=DIR` (latents and text embeddings in safetensors shards,
  runner/workloads/latents.py; `runner prepare-sdxl` makes them from images and captions), read
  ahead of the GPU into pinned memory.

The DDPM noise-prediction loss (epsilon, 1000 steps, SDXL's scaled-linear betas), bf16 autocast,
AdamW; optionally LR warm-up then constant or cosine, an EMA of the weights (in every checkpoint;
the export is the EMA), `noise_offset`, min-SNR-gamma weighting, and a validation loss on a held-out
slice of the data. At the end of a run the UNet is written to RUN/final/unet (diffusers, safetensors).
Noise and timesteps are drawn per sample from (seed, global sample index): a resumed run and a run at
another world size train on the same draws. Activation checkpointing, compilation and the attention
backend are the runner's settings (costsim.runtime).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from runner.workloads import BuildContext, Built, WorkloadOptionError, empty_build, workload
from runner.workloads.latents import (
    FIELDS,
    DatasetError,
    LatentShards,
    Order,
    Prefetcher,
    check_held_out,
    expected_shapes,
    shard_rows,
)

if TYPE_CHECKING:
    import torch

CONFIG_NAME = "sdxl_unet_config.json"
TRAIN_TIMESTEPS = 1000
VALIDATION_SEED = 7   # the validation set's noise and timesteps: the same in every run, comparable

OPTIONS = {
    "config": "a UNet config JSON (a smaller model, for tests; not with weights=)",
    "weights": "a local diffusers UNet folder, or a pipeline folder with unet/ (default: random weights)",
    "data": "a folder of safetensors shards: latents, text, pooled, time_ids (default: synthetic data)",
    "adamw": "fused or foreach",
    "lr": "peak learning rate (default 1e-5)",
    "warmup_steps": "steps of linear LR warm-up (default 0)",
    "schedule": "LR after the warm-up: constant or cosine (default constant)",
    "ema": "EMA decay of the weights, e.g. 0.9999 (default off); the exported UNet is the EMA",
    "noise_offset": "noise offset, e.g. 0.05 (default 0)",
    "snr_gamma": "min-SNR-gamma loss weighting, e.g. 5 (default off)",
    "val_samples": "samples of data= held out for a validation loss (default 0: none)",
    "val_every": "steps between validation losses (default 100)",
}


def load_config(path: Path | None = None) -> dict:
    """The UNet config: data/models/sdxl_unet_config.json unless a path is given."""
    from costsim.io import data_dir  # yaml: only when no config is named
    return json.loads(Path(path or data_dir() / "models" / CONFIG_NAME).read_text())


def _number(options: dict, key: str, default: float, low: float, high: float, *, integer: bool = False,
            open_low: bool = False) -> float:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise WorkloadOptionError(f"{key}={text!r}: expected {'an integer' if integer else 'a number'}") from None
    if not (low < value if open_low else low <= value) or value > high or (not integer and not math.isfinite(value)):
        bound = f"{'>' if open_low else '>='} {low:g} and <= {high:g}"
        raise WorkloadOptionError(f"{key}={text}: expected a value {bound}")
    return value


def _weights_folder(text: str) -> tuple[Path, str | None]:
    """The folder holding the UNet's config.json, and the subfolder when a pipeline folder was given."""
    folder = Path(text).expanduser()
    if not folder.is_dir():
        raise WorkloadOptionError(f"weights={text}: no such folder here; weights come from a local folder "
                                  "(nothing is downloaded): a diffusers UNet folder or a pipeline folder with unet/")
    for sub in (None, "unet"):
        config = folder / (sub or "") / "config.json"
        if config.is_file():
            try:
                kind = json.loads(config.read_text()).get("_class_name", "UNet2DConditionModel")
            except (json.JSONDecodeError, AttributeError):
                raise WorkloadOptionError(f"weights={text}: {config} is not a JSON object") from None
            if kind != "UNet2DConditionModel":
                raise WorkloadOptionError(f"weights={text}: {config} is a {kind}, not a UNet2DConditionModel "
                                          "(give the UNet's folder or the pipeline folder)")
            return folder, sub
    raise WorkloadOptionError(f"weights={text}: no config.json in it or in its unet/ (expected a diffusers "
                              "UNet folder, as save_pretrained writes, or a pipeline folder)")


def _settings(options: dict) -> dict:
    """Every option parsed and checked (WorkloadOptionError names the option and what is allowed)."""
    if "weights" in options and "config" in options:
        raise WorkloadOptionError("config= and weights= together: the weights folder has its own config")
    schedule = options.get("schedule", "constant")
    if schedule not in ("constant", "cosine"):
        raise WorkloadOptionError(f"schedule={schedule!r}: allowed constant, cosine")
    adamw = options.get("adamw")
    if adamw not in (None, "fused", "foreach"):
        raise WorkloadOptionError(f"adamw={adamw!r}: allowed fused, foreach")
    settings = {
        "adamw": adamw, "schedule": schedule,
        "lr": _number(options, "lr", 1e-5, 0.0, 1.0, open_low=True),
        "warmup_steps": int(_number(options, "warmup_steps", 0, 0, 10**9, integer=True)),
        "ema": _number(options, "ema", 0.0, 0.0, 1.0, open_low=True) if "ema" in options else None,
        "noise_offset": _number(options, "noise_offset", 0.0, 0.0, 1.0),
        "snr_gamma": _number(options, "snr_gamma", 0.0, 0.0, 1e6) or None,
        "val_samples": int(_number(options, "val_samples", 0, 0, 10**9, integer=True)),
        "val_every": int(_number(options, "val_every", 100, 1, 10**9, integer=True)),
    }
    if settings["ema"] is not None and settings["ema"] >= 1.0:
        raise WorkloadOptionError(f"ema={options['ema']}: expected a decay below 1, e.g. 0.9999")
    if settings["val_samples"] and "data" not in options:
        raise WorkloadOptionError("val_samples= needs data=: the validation set is held out of the dataset")
    if "weights" in options:
        settings["weights"] = _weights_folder(options["weights"])
        folder, sub = settings["weights"]
        settings["config"] = json.loads((folder / (sub or "") / "config.json").read_text())
    else:
        config_path = options.get("config")
        if config_path is not None and not Path(config_path).is_file():
            raise WorkloadOptionError(f"config={config_path}: no such file")
        settings["config"] = load_config(config_path)
    return settings


def check(options: dict) -> None:
    """What `runner execute` checks before any process starts: every option, the weights folder,
    every shard's tensors and shapes against the model's config (headers only), the held-out slice."""
    settings = _settings(options)
    if "data" in options:
        try:
            shards = shard_rows(Path(options["data"]), expected_shapes(settings["config"]))
            check_held_out(sum(rows for _, rows in shards), settings["val_samples"])
        except DatasetError as exc:
            raise WorkloadOptionError(str(exc)) from None


# LoRA, the text encoders, scipy (diffusers' single-file loader imports it for schedulers a UNet never uses) and
# torchao (diffusers imports it for its quantizers when installed; runtime.fp8 imports it after the build);
# the UNet's module, what `from diffusers import UNet2DConditionModel` imports (1-2 s warm, more from a cold disk)
@workload(options=OPTIONS, check=check, unused=("peft", "transformers", "scipy", "torchao"),
          imports=("diffusers.models.unets.unet_2d_condition",))
def build(ctx: BuildContext) -> Built:
    """The SDXL UNet full fine-tune (synthetic data and random weights unless data= and weights=)."""
    import torch
    from diffusers import UNet2DConditionModel

    s = _settings(ctx.options)
    config = s["config"]
    torch.manual_seed(ctx.seed)
    # Resuming: a checkpoint is loaded over the model, so neither the weights folder is read nor 2.57B
    # parameters initialised (the config alone gives the shapes).
    model = empty_build(lambda: UNet2DConditionModel.from_config(config), ctx.device) if ctx.restoring else None
    empty = model is not None
    if model is None and "weights" in s:
        folder, sub = s["weights"]
        model = UNet2DConditionModel.from_pretrained(folder, subfolder=sub, local_files_only=True,
                                                     torch_dtype=torch.float32).to(ctx.device)
    elif model is None:
        with ctx.device:   # initialise on the GPU itself: 2.57B parameters are slow to initialise on a CPU
            model = UNet2DConditionModel.from_config(config)
    model.train()
    adamw = s["adamw"] or ("fused" if ctx.device.type == "cuda" else "foreach")
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=1e-2, fused=adamw == "fused" or None,
                                  foreach=adamw == "foreach" or None)
    scheduler = lr_schedule(optimizer, s["warmup_steps"], s["schedule"], ctx.total_steps)
    betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, TRAIN_TIMESTEPS, dtype=torch.float64) ** 2
    alphas_cumprod = torch.cumprod(1.0 - betas, dim=0).to(torch.float32).to(ctx.device)
    shapes = expected_shapes(config)
    channels, size = shapes["latents"][0], shapes["latents"][1]
    generator = torch.Generator(device=ctx.device)   # one, re-seeded per sample: no new device state per step

    def draws(data: dict, indices, seed: int) -> dict:
        """Noise (with the offset) and timesteps per sample, from (seed, sample index)."""
        b, device = len(indices), ctx.device
        data["noise"] = torch.empty(b, channels, size, size, device=device)
        data["timesteps"] = torch.empty(b, dtype=torch.int64, device=device)
        offset = torch.empty(b, channels, 1, 1, device=device) if s["noise_offset"] else None
        for row, index in enumerate(indices):
            g = generator.manual_seed(seed * 1_000_000_007 + index)
            data["noise"][row].normal_(generator=g)
            data["timesteps"][row:row + 1].random_(0, TRAIN_TIMESTEPS, generator=g)
            if offset is not None:
                offset[row].normal_(generator=g)
        if offset is not None:
            data["noise"] += s["noise_offset"] * offset
        return data

    def loss(model, data, weighted: bool = True) -> torch.Tensor:
        a = alphas_cumprod[data["timesteps"]].view(-1, 1, 1, 1)
        noisy = a.sqrt() * data["latents"] + (1.0 - a).sqrt() * data["noise"]
        # return_dict=False: the output as a tuple, as runtime.precompile's saved function can rebuild it
        prediction = model(noisy, data["timesteps"], encoder_hidden_states=data["text"], return_dict=False,
                           added_cond_kwargs={"text_embeds": data["pooled"], "time_ids": data["time_ids"]})[0]
        if s["snr_gamma"] is None or not weighted:
            return torch.nn.functional.mse_loss(prediction.float(), data["noise"].float())
        # min-SNR-gamma (Hang et al. 2023) for epsilon prediction: weight min(SNR, gamma) / SNR per sample
        snr = (a / (1.0 - a)).flatten()
        weight = torch.clamp(snr, max=s["snr_gamma"]) / snr
        per_sample = (prediction.float() - data["noise"].float()).pow(2).mean(dim=(1, 2, 3))
        return (per_sample * weight).mean()

    built = Built(model=model, optimizer=optimizer, scheduler=scheduler, batch=_synthetic(ctx, shapes, generator),
                  loss=loss, autocast_dtype={"bf16": torch.bfloat16, "fp16": torch.float16}.get(ctx.precision),
                  empty=empty)
    if "data" in ctx.options:
        _real_data(ctx, s, shapes, built, draws, loss)   # its own batches, validation and close
    if s["ema"] is not None:
        _ema(model, s["ema"], built)
    built.export = _exporter(model, built)
    return built


def lr_schedule(optimizer, warmup_steps: int, schedule: str, total_steps: int):
    """Linear warm-up over `warmup_steps`, then constant or a cosine decay to zero at `total_steps`."""
    import torch

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _synthetic(ctx: BuildContext, shapes: dict, generator):
    import torch

    (channels, size, _), text_dim, pooled_dim = shapes["latents"], shapes["text"][1], shapes["pooled"][0]
    time_ids = torch.tensor([[size * 8, size * 8, 0, 0, size * 8, size * 8]], dtype=torch.float32).to(ctx.device)

    def batch(indices: range):
        # Drawn on the device itself: no host copy, so the host never waits for the GPU and keeps
        # queuing work ahead of it. Each sample from its own seed (seed, global index): the same
        # samples at any world size and after any resume.
        b, device = len(indices), ctx.device
        data = {"latents": torch.empty(b, channels, size, size, device=device),
                "noise": torch.empty(b, channels, size, size, device=device),
                "timesteps": torch.empty(b, dtype=torch.int64, device=device),
                "text": torch.empty(b, 77, text_dim, device=device), "pooled": torch.empty(b, pooled_dim, device=device)}
        for row, index in enumerate(indices):
            g = generator.manual_seed(ctx.seed * 1_000_000_007 + index)
            for name in ("latents", "noise", "text", "pooled"):
                data[name][row].normal_(generator=g)
            data["timesteps"][row:row + 1].random_(0, TRAIN_TIMESTEPS, generator=g)
        data["time_ids"] = time_ids.expand(b, 6)
        return data
    return batch


def _real_data(ctx: BuildContext, s: dict, shapes: dict, built: Built, draws, loss) -> None:
    """batch() from the shards, read ahead; validate() on the held-out slice."""
    import torch

    try:
        shards = LatentShards(ctx.options["data"], shapes)
        order = Order(len(shards), ctx.seed, s["val_samples"])
    except DatasetError as exc:
        raise WorkloadOptionError(str(exc)) from None
    if ctx.rank == 0:
        samples = ctx.total_steps * ctx.split.global_batch
        print(f"sdxl-unet: data {ctx.options['data']}: {len(order.training)} training samples in {len(shards.paths)} "
              f"shard(s), {len(order.validation)} held out; {ctx.total_steps} steps x {ctx.split.global_batch} = "
              f"{samples / len(order.training):.3g} epochs", file=sys.stderr, flush=True)
    pin = ctx.device.type == "cuda"
    prefetcher = Prefetcher(lambda indices: shards.read(order.rows(indices), pin=pin), ctx.following)

    def to_device(host: dict) -> dict:
        return {name: host[name].to(ctx.device, non_blocking=True).float() for name in FIELDS}

    def batch(indices: range):
        return draws(to_device(prefetcher.get(indices)), indices, ctx.seed)

    built.batch = batch
    built.close = prefetcher.close
    mine = order.validation[ctx.rank::ctx.world_size]   # this rank's share of the held-out rows
    if not order.validation:
        return

    @torch.no_grad()
    def validate(model) -> torch.Tensor:
        total = torch.zeros(2, device=ctx.device)
        autocast = torch.autocast(ctx.device.type, dtype=built.autocast_dtype, enabled=built.autocast_dtype is not None)
        for start in range(0, len(mine), ctx.micro_batch):
            rows = mine[start:start + ctx.micro_batch]
            data = draws(to_device(shards.read(rows, pin=pin)), rows, VALIDATION_SEED)
            with autocast:   # the plain noise-prediction error: comparable across runs whatever their weighting
                total[0] += loss(model, data, weighted=False).float() * len(rows)
            total[1] += len(rows)
        return total

    built.validate, built.validate_every = validate, s["val_every"]


def _ema(model, decay: float, built: Built) -> None:
    """An fp32 EMA of every parameter on the device, with diffusers' warm-up: decay min(d, n/(n+9)) at step n."""
    import torch

    params = dict(model.named_parameters())
    shadow = {name: p.detach().clone().float() for name, p in params.items()}
    live, averaged = list(params.values()), list(shadow.values())

    @torch.no_grad()
    def after_step(step: int) -> None:
        torch._foreach_lerp_(averaged, live, 1.0 - min(decay, step / (step + 9)))

    built.state["ema"] = shadow
    built.after_step = after_step


def _exporter(model, built: Built):
    def export(folder: Path) -> None:
        """The trained UNet (the EMA when on) as a diffusers folder: the last thing a run does, since it
        overwrites the live weights with the EMA's."""
        import torch

        shadow = built.state.get("ema")
        if shadow is not None:
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.copy_(shadow[name])
        model.save_pretrained(Path(folder) / "unet", safe_serialization=True)
    return export
