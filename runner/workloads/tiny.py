"""`tiny`: a 3-layer MLP regressing a fixed random teacher, on a fixed synthetic dataset.

Sample i is row i mod DATASET of a table drawn once from the seed: the data is a function of the
global sample index alone, so a step's global batch is the same at any world size. No dropout:
its masks would come from each rank's random state, which differs between world sizes.
"""

from __future__ import annotations

import torch
from torch import nn

from runner.workloads import BuildContext, Built, WorkloadOptionError, workload

INPUT, HIDDEN, OUTPUT = 64, 256, 16
DATASET = 1 << 16


def _teacher(seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(INPUT, OUTPUT, generator=generator)


@workload(options={"hidden": f"width of the hidden layers ({HIDDEN}); 2048 makes a 53 MB checkpoint (object store "
                             "tests need multipart uploads)"})
def build(ctx: BuildContext) -> Built:
    """The CPU-sized reference workload of data/workloads/tiny.yaml."""
    text = ctx.options.get("hidden", str(HIDDEN))
    if not text.isdigit() or int(text) < 1:
        raise WorkloadOptionError(f"option hidden={text!r}: expected a whole number of units >= 1")
    hidden = int(text)
    torch.manual_seed(ctx.seed)   # identical initial weights on every rank
    model = nn.Sequential(nn.Linear(INPUT, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                          nn.ReLU(), nn.Linear(hidden, OUTPUT)).to(ctx.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10_000)
    teacher = _teacher(ctx.seed + 1).to(ctx.device)
    inputs = torch.randn(DATASET, INPUT, generator=torch.Generator().manual_seed(ctx.seed + 2)).to(ctx.device)
    targets = inputs @ teacher

    def batch(indices: range):
        rows = torch.arange(indices.start, indices.stop, device=ctx.device) % DATASET
        return inputs[rows], targets[rows]

    def loss(model: nn.Module, data) -> torch.Tensor:
        x, y = data
        return nn.functional.mse_loss(model(x), y)

    return Built(model=model, optimizer=optimizer, scheduler=scheduler, batch=batch, loss=loss)
