"""Training state as a DCP state dict: model, optimizer, scheduler, progress and every RNG."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import random
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

PRIVATE_PREFIX = "rng_rank"   # the one top-level entry that differs between ranks: each rank's own


def rng_state() -> dict:
    """This process's random states as tensors and numbers (no pickled objects)."""
    np_state = np.random.get_state(legacy=True)   # ("MT19937", keys, pos, has_gauss, cached_gaussian)
    assert isinstance(np_state, tuple)
    state: dict[str, Any] = {"torch": torch.get_rng_state(),
             "python": torch.tensor(random.getstate()[1], dtype=torch.int64),
             "numpy_keys": torch.from_numpy(np_state[1].astype(np.int64)), "numpy_pos": int(np_state[2])}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(int(x) for x in state["python"].tolist()), None))
    np.random.set_state(("MT19937", state["numpy_keys"].numpy().astype(np.uint32), int(state["numpy_pos"]), 0, 0.0))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def training_state(model, optimizer, scheduler, step: int, rank: int, extra: dict | None = None) -> dict:
    """The state dict that a checkpoint saves and a resume loads in place; `extra` is a workload's
    own state ({name: {key: tensor}}, e.g. an EMA of the weights), loaded in place too."""
    how = make_optimizer_state(optimizer)
    with _grads_aside(optimizer) if how == "torch" else contextlib.nullcontext():
        model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optim_state,
            "scheduler": scheduler.state_dict() if scheduler is not None else {},
            "progress": {"step": step}, f"{PRIVATE_PREFIX}{rank}": rng_state(), **(extra or {})}


def make_optimizer_state(optimizer: torch.optim.Optimizer) -> str:
    """Give an optimizer without state (a resumed process's) the state its first step would make, for a
    checkpoint to load into, without that step; returns how: "kept" (it had state), "probed" or "torch" (left to
    get_state_dict, which makes none where gradients exist: it takes the optimizer for a stateless one, SGD's kind;
    the runner's DDP processes have zero gradients from the start, train.grads_for_buckets, so the probe runs
    whatever the gradients, and training_state sets them aside for torch's way).

    torch's get_state_dict makes it with one step at learning rate 0 on zero gradients over every
    parameter: a gradient the size of each, the optimizer's own arithmetic over all of them, then the
    gradients freed. Here one step of the same optimizer, with each parameter group's options, on a small
    probe of each (group, dtype, device, number of dimensions: an optimizer may treat a matrix and a vector
    differently) shows what the state holds. Each parameter then gets that state made directly: zeros for
    each entry shaped like the probe (in the entry's dtype and device), a copy of each scalar (Adam's step
    count). Every key, dtype and device is the optimizer's own in this torch version, and the values are the
    ones torch's way leaves (the load writes over them anyway). Where the probe's state holds anything else
    (another shape, an object), or its step fails, torch's way is left to run.
    """
    if optimizer.state:
        return "kept"
    layouts: dict[tuple, dict | None] = {}
    made: dict[torch.Tensor, dict] = {}
    for index, group in enumerate(optimizer.param_groups):
        for param in group["params"]:
            if not param.requires_grad:
                continue
            key = (index, param.dtype, param.device, param.dim())
            if key not in layouts:
                layouts[key] = _probe_state(optimizer, group, param)
            layout = layouts[key]
            if layout is None:
                return "torch"
            made[param] = {name: (torch.zeros_like(param, dtype=value.dtype, device=value.device,
                                                   memory_format=torch.preserve_format)
                                  if isinstance(value, torch.Tensor) and value.dim() else
                                  value.clone() if isinstance(value, torch.Tensor) else value)
                           for name, value in layout.items()}
    for param, entries in made.items():
        if entries:
            optimizer.state[param] = entries
    return "probed" if optimizer.state else "torch"


@contextlib.contextmanager
def _grads_aside(optimizer: torch.optim.Optimizer):
    """The optimizer's gradients set aside (None) and put back after: torch's get_state_dict makes an optimizer's
    state (its zero-gradient step, where make_optimizer_state leaves it to torch) only where no parameter has a
    gradient, and under DDP the runner's always have (train.grads_for_buckets: views of DDP's buckets, kept as
    they are)."""
    kept = [(p, p.grad) for group in optimizer.param_groups for p in group["params"]]
    for p, _ in kept:
        p.grad = None
    try:
        yield
    finally:
        for p, grad in kept:
            p.grad = grad


def _probe_state(optimizer: torch.optim.Optimizer, group: dict, like: torch.Tensor) -> dict | None:
    """The state one step of `optimizer`'s kind with `group`'s options makes for a parameter of `like`'s
    dtype, device and number of dimensions (2 x 3 x 4 ... : no two sizes alike) with a zero gradient; None
    when the step fails or the state holds anything but tensors of that shape, scalar tensors and numbers
    (for a scalar parameter every entry is one: each is copied, which is its layout too)."""
    shape = tuple(range(2, 2 + like.dim()))
    probe = torch.zeros(shape, dtype=like.dtype, device=like.device, requires_grad=True)
    probe.grad = torch.zeros_like(probe)
    twin = type(optimizer).__new__(type(optimizer))
    try:
        twin.__setstate__({"defaults": dict(optimizer.defaults), "state": collections.defaultdict(dict),
                           "param_groups": [{**group, "params": [probe]}]})
        twin.step()
    except Exception:   # an optimizer that needs a closure, or more than its state dict to step: torch's way
        return None
    layout = dict(twin.state.get(probe, {}))
    for value in layout.values():
        shaped = isinstance(value, torch.Tensor) and value.dim() and tuple(value.shape) == shape
        scalar = isinstance(value, torch.Tensor) and not value.dim() or isinstance(value, (int, float, bool))
        if not (shaped or scalar):
            return None
    return layout


def apply_state(state: dict, model, optimizer, scheduler, rank: int) -> int:
    """Put a loaded state into the live objects; returns the step to continue from."""
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    own = state.get(f"{PRIVATE_PREFIX}{rank}")
    if own is not None:   # absent when the checkpoint was saved by fewer processes than run now
        set_rng_state(own)
    return int(state["progress"]["step"])


def seed_rng(seed: int, rank: int, step: int) -> None:
    """A random state for a rank that had none in the checkpoint: a function of (seed, rank, step)."""
    value = (seed * 1_000_003 + step) * 4096 + rank
    random.seed(value)
    np.random.seed(value % 2**32)
    torch.manual_seed(value)   # every device's generator too


def state_sha256(model, optimizer) -> str:
    """A hash of the model and optimizer state: equal for equal training."""
    model_state, optim_state = get_state_dict(model, optimizer)
    digest = hashlib.sha256()
    _feed(digest, "model", model_state)
    _feed(digest, "optim", optim_state)
    return digest.hexdigest()


def _feed(digest, prefix: str, value) -> None:
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            _feed(digest, f"{prefix}.{key}", value[key])
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _feed(digest, f"{prefix}.{index}", item)
    elif isinstance(value, torch.Tensor):
        digest.update(prefix.encode())
        digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    else:
        digest.update(f"{prefix}={value!r}".encode())
