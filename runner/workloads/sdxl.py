"""`sdxl-unet`: the real SDXL base UNet (from its config, random weights) on synthetic 1024 px latents.

Random weights are exact for speed and memory; no download is ever needed. Latents (B, 4, 128, 128),
text embeddings (B, 77, 2048), pooled embeddings (B, 1280) and time ids (B, 6), the DDPM
noise-prediction loss, bf16 autocast and fused AdamW, as in a full fine-tune. Options (--option):
`config=PATH` (a smaller config, for tests), `adamw=fused|foreach`. Activation checkpointing,
compilation and the attention backend are the runner's settings (costsim.runtime).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from costsim.io import data_dir
from runner.workloads import BuildContext, Built, WorkloadOptionError, workload

CONFIG_NAME = "sdxl_unet_config.json"
TRAIN_TIMESTEPS = 1000


def load_config(path: Path | None = None) -> dict:
    """The UNet config: data/models/sdxl_unet_config.json unless a path is given."""
    return json.loads(Path(path or data_dir() / "models" / CONFIG_NAME).read_text())


@workload(options={"config": "a UNet config JSON (a smaller model, for tests)", "adamw": "fused or foreach"})
def build(ctx: BuildContext) -> Built:
    """The SDXL UNet full fine-tune; `ctx.options['config']` may point at a smaller config for tests."""
    from diffusers import UNet2DConditionModel

    config = load_config(ctx.options.get("config"))
    torch.manual_seed(ctx.seed)
    with ctx.device:   # initialise on the GPU itself: 2.57B parameters are slow to initialise on a CPU
        model = UNet2DConditionModel.from_config(config)
    adamw = ctx.options.get("adamw", "fused" if ctx.device.type == "cuda" else "foreach")
    if adamw not in ("fused", "foreach"):
        raise WorkloadOptionError(f"--option adamw={adamw!r}: allowed fused, foreach")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=1e-2,
                                  **{"fused": True} if adamw == "fused" else {"foreach": True})
    betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, TRAIN_TIMESTEPS, dtype=torch.float64) ** 2
    alphas_cumprod = torch.cumprod(1.0 - betas, dim=0).to(torch.float32).to(ctx.device)
    size = config.get("sample_size", 128)
    channels = config.get("in_channels", 4)
    text_dim = config.get("cross_attention_dim", 2048)
    text_dim = text_dim[0] if isinstance(text_dim, list) else text_dim
    pooled_dim = config.get("projection_class_embeddings_input_dim", 2816) - 6 * config.get("addition_time_embed_dim", 256)
    time_ids = torch.tensor([[size * 8, size * 8, 0, 0, size * 8, size * 8]], dtype=torch.float32).to(ctx.device)

    generator = torch.Generator(device=ctx.device)   # one, re-seeded per sample: no new device state per step

    def batch(indices: range):
        # Drawn on the device itself: no host copy, so the host never waits for the GPU and keeps
        # queuing work ahead of it. Each sample from its own seed (seed, global index): the same
        # samples at any world size and after any resume.
        b, on = len(indices), {"device": ctx.device}
        data = {"latents": torch.empty(b, channels, size, size, **on), "noise": torch.empty(b, channels, size, size, **on),
                "timesteps": torch.empty(b, dtype=torch.int64, **on), "text": torch.empty(b, 77, text_dim, **on),
                "pooled": torch.empty(b, pooled_dim, **on)}
        for row, index in enumerate(indices):
            g = generator.manual_seed(ctx.seed * 1_000_000_007 + index)
            for name in ("latents", "noise", "text", "pooled"):
                data[name][row].normal_(generator=g)
            data["timesteps"][row:row + 1].random_(0, TRAIN_TIMESTEPS, generator=g)
        data["time_ids"] = time_ids.expand(b, 6)
        return data

    def loss(model, data) -> torch.Tensor:
        a = alphas_cumprod[data["timesteps"]].view(-1, 1, 1, 1)
        noisy = a.sqrt() * data["latents"] + (1.0 - a).sqrt() * data["noise"]
        prediction = model(noisy, data["timesteps"], encoder_hidden_states=data["text"],
                           added_cond_kwargs={"text_embeds": data["pooled"], "time_ids": data["time_ids"]}).sample
        return torch.nn.functional.mse_loss(prediction.float(), data["noise"].float())

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(ctx.precision)
    return Built(model=model, optimizer=optimizer, batch=batch, loss=loss, autocast_dtype=dtype)
