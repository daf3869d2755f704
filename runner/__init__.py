"""runner: run a costsim plan as a real checkpointed PyTorch DDP job that survives preemption."""

__version__ = "0.1.0"
