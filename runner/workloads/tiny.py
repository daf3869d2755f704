"""`tiny`: a 3-layer MLP regressing a fixed random teacher, on a fixed synthetic dataset.

Sample i is row i mod DATASET of a table drawn once from the seed: the data is a function of the
global sample index alone, so a step's global batch is the same at any world size. No dropout:
its masks would come from each rank's random state, which differs between world sizes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from runner.workloads import BuildContext, Built, WorkloadOptionError, empty_build, workload

INPUT, HIDDEN, OUTPUT = 64, 256, 16
DATASET = 1 << 16

if TYPE_CHECKING:
    import torch


def _teacher(seed: int) -> torch.Tensor:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn(INPUT, OUTPUT, generator=generator)


OPTIONS = {"hidden": f"width of the hidden layers ({HIDDEN}); 2048 makes a 53 MB checkpoint (object store tests "
                     "need multipart uploads)",
           "pace": "the least time an optimizer step takes, e.g. 5ms, spread over its micro-batches: a drill's "
                   "stand-in for a job of that speed, the same on a fast machine and a slow one (default: as fast as "
                   "it runs)"}


def _settings(options: dict) -> tuple[int, float]:
    """(hidden width, pace in seconds) from the options, or WorkloadOptionError naming the option."""
    text = options.get("hidden", str(HIDDEN))
    if not text.isdigit() or int(text) < 1:
        raise WorkloadOptionError(f"option hidden={text!r}: expected a whole number of units >= 1")
    return int(text), _pace_s(options.get("pace"))


def check(options: dict) -> None:
    """What `runner execute` checks before any process starts."""
    _settings(options)


@workload(options=OPTIONS, check=check)
def build(ctx: BuildContext) -> Built:
    """The CPU-sized reference workload of data/workloads/tiny.yaml."""
    import torch
    from torch import nn

    hidden, pace_s = _settings(ctx.options)
    torch.manual_seed(ctx.seed)   # identical initial weights on every rank

    def make() -> nn.Module:
        return nn.Sequential(nn.Linear(INPUT, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                             nn.ReLU(), nn.Linear(hidden, OUTPUT))
    model = empty_build(make, ctx.device) if ctx.restoring else None
    empty = model is not None
    if model is None:
        model = make().to(ctx.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10_000)
    teacher = _teacher(ctx.seed + 1).to(ctx.device)
    inputs = torch.randn(DATASET, INPUT, generator=torch.Generator().manual_seed(ctx.seed + 2)).to(ctx.device)
    targets = inputs @ teacher

    def batch(indices: range):
        rows = torch.arange(indices.start, indices.stop, device=ctx.device) % DATASET
        return inputs[rows], targets[rows]

    pacer = _pacer(pace_s / ctx.accumulation) if pace_s else None

    def loss(model: nn.Module, data) -> torch.Tensor:
        x, y = data
        if pacer is not None:   # a real job's time is in its micro-batches (a notice may come between them)
            pacer()
        return nn.functional.mse_loss(model(x), y)

    return Built(model=model, optimizer=optimizer, scheduler=scheduler, batch=batch, loss=loss, empty=empty)


def _pace_s(text: str | None) -> float:
    if text is None:
        return 0.0
    from costsim.errors import InputError
    from costsim.units import parse_duration_s
    try:
        return parse_duration_s(text, source="option", field="pace")
    except InputError as exc:
        raise WorkloadOptionError(f"option pace={text!r}: {exc.message}") from None


def _pacer(pace_s: float):
    """Before each micro-batch: wait out what is left of `pace_s` since the one before began (one that took
    longer, or a step that paid a checkpoint, waits nothing)."""
    last = [time.monotonic()]

    def wait() -> None:
        left = last[0] + pace_s - time.monotonic()
        if left > 0:
            time.sleep(left)
        last[0] = time.monotonic()
    return wait
