"""`tiny`: a 3-layer MLP regressing a fixed random teacher, on data made from (seed, step, rank)."""

from __future__ import annotations

import torch
from torch import nn

from runner.workloads import BuildContext, Built

INPUT, HIDDEN, OUTPUT = 64, 256, 16


def _teacher(seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(INPUT, OUTPUT, generator=generator)


def build(ctx: BuildContext) -> Built:
    """The CPU-sized reference workload of data/workloads/tiny.yaml."""
    torch.manual_seed(ctx.seed)   # identical initial weights on every rank
    model = nn.Sequential(nn.Linear(INPUT, HIDDEN), nn.ReLU(), nn.Dropout(0.1), nn.Linear(HIDDEN, HIDDEN),
                          nn.ReLU(), nn.Linear(HIDDEN, OUTPUT)).to(ctx.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10_000)
    teacher = _teacher(ctx.seed + 1).to(ctx.device)

    def batch(step: int, micro: int):
        key = ((ctx.seed * 1_000_003 + step) * 64 + micro) * 4096 + ctx.rank
        generator = torch.Generator().manual_seed(key)
        x = torch.randn(ctx.micro_batch, INPUT, generator=generator).to(ctx.device)
        return x, x @ teacher

    def loss(model: nn.Module, data) -> torch.Tensor:
        x, y = data
        return nn.functional.mse_loss(model(x), y)

    return Built(model=model, optimizer=optimizer, scheduler=scheduler, batch=batch, loss=loss)
