"""A user's own workload for `runner execute --workload-entry linear_workload:build`.

The runner owns the loop, DDP, checkpoints, restarts and telemetry; a workload only builds.
"""

import torch

from runner.workloads import BuildContext, Built


def build(ctx: BuildContext) -> Built:
    torch.manual_seed(ctx.seed)                      # same initial weights on every rank
    model = torch.nn.Linear(32, 1).to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def batch(step: int, micro: int):
        # A pure function of (seed, step, micro, rank): resuming at any step gives the same data.
        g = torch.Generator().manual_seed(((ctx.seed * 100_003 + step) * 8 + micro) * 1024 + ctx.rank)
        x = torch.randn(ctx.micro_batch, 32, generator=g)
        return x.to(ctx.device), x.sum(dim=1, keepdim=True).to(ctx.device)

    def loss(model, data):
        x, y = data
        return torch.nn.functional.mse_loss(model(x), y)

    return Built(model=model, optimizer=optimizer, batch=batch, loss=loss)
