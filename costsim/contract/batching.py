"""How a step's global batch is split over the processes a job runs on: the one rule the planner
(costsim.throughput, the step time it prices) and the runner (runner.batching, what it runs) share.

A plan fixes the global batch and the per-GPU micro-batch it was priced at (what fits the GPU's
memory). The processes a job actually gets may be fewer or more than the plan's: the micro-batch
stays at most the plan's, and gradient accumulation makes up the rest, so the optimizer sees the
same global batch at any world size. Samples are numbered globally, sample index = step x global
batch + i, and each (rank, micro-batch) takes its own slice of the step's range: the global batch of
step s is the same set of samples whatever the processes, nodes and accumulation.
"""

from __future__ import annotations

from dataclasses import dataclass


class BatchSplitError(ValueError):
    """The global batch cannot be split over these processes (the message names the numbers)."""


@dataclass(frozen=True, slots=True)
class BatchSplit:
    global_batch: int
    world_size: int
    micro_batch: int      # samples per micro-batch on each rank
    accumulation: int     # micro-batches per optimizer step on each rank

    @property
    def per_rank(self) -> int:
        return self.micro_batch * self.accumulation

    def indices(self, step: int, rank: int, micro: int) -> range:
        """The global sample indices of rank `rank`'s micro-batch `micro` at optimizer step `step`."""
        start = step * self.global_batch + rank * self.per_rank + micro * self.micro_batch
        return range(start, start + self.micro_batch)

    def following(self, indices: range, rank: int) -> range:
        """The range rank `rank` asks for after `indices` (its next micro-batch, else the next step's
        first): what a data loader reads ahead."""
        step, within = divmod(indices.start - rank * self.per_rank, self.global_batch)
        micro = within // self.micro_batch
        if micro + 1 < self.accumulation:
            return self.indices(step, rank, micro + 1)
        return self.indices(step + 1, rank, 0)

    def as_dict(self) -> dict:
        return {"world_size": self.world_size, "micro_batch": self.micro_batch, "accumulation": self.accumulation}


def split_batch(global_batch: int, world_size: int, max_micro_batch: int) -> BatchSplit:
    """Micro-batch and accumulation for `world_size` processes: the largest micro-batch of at most
    `max_micro_batch` that divides each rank's share of the global batch, and as many micro-batches
    as make up that share. More processes than planned means fewer accumulation steps, never a
    micro-batch above the plan's."""
    if global_batch < 1 or world_size < 1 or max_micro_batch < 1:
        raise BatchSplitError(f"global batch {global_batch}, {world_size} processes and micro-batch "
                              f"{max_micro_batch} must all be >= 1")
    if global_batch % world_size:
        raise BatchSplitError(f"global batch {global_batch} does not split over {world_size} processes "
                              f"(each would take {global_batch / world_size:g} samples)")
    per_rank = global_batch // world_size
    micro = next(m for m in range(min(max_micro_batch, per_rank), 0, -1) if per_rank % m == 0)
    return BatchSplit(global_batch=global_batch, world_size=world_size, micro_batch=micro,
                      accumulation=per_rank // micro)
