"""The batch split the runner runs: the contract's one rule (costsim.contract.batching), also what
the planner priced. No torch here: `runner execute` checks the split before any process starts."""

from costsim.contract.batching import BatchSplit, BatchSplitError, split_batch

__all__ = ["BatchSplit", "BatchSplitError", "split_batch"]
