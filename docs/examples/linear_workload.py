"""A user's own workload for `runner execute --workload-entry linear_workload:build`.

The runner owns the loop, DDP, checkpoints, restarts and telemetry; a workload only builds.
"""

import torch

from runner.workloads import BuildContext, Built, workload


@workload(options={"lr": "SGD learning rate (default 0.05)"})
def build(ctx: BuildContext) -> Built:
    torch.manual_seed(ctx.seed)                      # same initial weights on every rank
    model = torch.nn.Linear(32, 1).to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=float(ctx.options.get("lr", 0.05)))

    def batch(indices: range):
        # A pure function of the global sample indices: resuming at any step, on any number of
        # processes, gives the same samples. Sample i is drawn from its own seed.
        x = torch.stack([torch.randn(32, generator=torch.Generator().manual_seed(ctx.seed * 1_000_003 + i))
                         for i in indices])
        return x.to(ctx.device), x.sum(dim=1, keepdim=True).to(ctx.device)

    def loss(model, data):
        x, y = data
        return torch.nn.functional.mse_loss(model(x), y)

    return Built(model=model, optimizer=optimizer, batch=batch, loss=loss)
