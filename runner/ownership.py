"""Each rank owns a share of the replicated training state: it stages, writes and reads that share only.

Under DDP every rank holds the same model and optimizer state (30.8 GB for the SDXL UNet's full
fine-tune). DCP de-duplicates what is written, but without this split every rank would still copy the
whole state to host memory for each async save (the training stall, and pinning that much host memory
at every process start) and read the whole checkpoint at every load (N ranks reading N copies from
the checkpoint storage). Instead the large tensors are divided among the ranks by size (largest first,
each to the least-loaded rank). A rank's view of the state holds its own large tensors, every small
leaf (DCP still de-duplicates those) and its rank-specific entries. Saving writes each rank's view:
the checkpoint has the same keys as a whole-state save, so any world size can load it. Loading reads
each rank's view, then every large tensor is broadcast from its owner over the process group (NVLink
or the cluster network: far faster than reading it again from storage).

Every rank must compute the same division: it depends only on the replicated entries' names, shapes
and dtypes, which DDP keeps identical on every rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

MIN_BYTES = 64 << 10   # smaller tensors are read and staged by every rank: a broadcast each is not worth it
Key = tuple   # a leaf's keys from the top of the state dict


def owners(state: dict, world_size: int, *, private: tuple[str, ...] = (), min_bytes: int = MIN_BYTES) -> dict[Key, int]:
    """The owning rank of each large replicated tensor, by path. Entries under a top-level key that
    starts with one of `private` (rank-specific state) are left out: each rank keeps its own."""
    sized = [(_nbytes(t), path) for path, t in _tensors(state, private) if _nbytes(t) >= min_bytes]
    if world_size <= 1:
        return {path: 0 for _, path in sized}
    load = [0] * world_size
    result = {}
    for size, path in sorted(sized, key=lambda item: (-item[0], tuple(map(str, item[1])))):   # longest-processing-time first
        rank = min(range(world_size), key=lambda r: (load[r], r))
        result[path] = rank
        load[rank] += size
    return result


def view(state: dict, owned_by: dict[Key, int], rank: int) -> dict:
    """`state` without the large tensors other ranks own (the same tensor objects, new dicts)."""
    return _view(state, owned_by, rank, ())


def merge(state: dict, loaded: dict) -> None:
    """Put what a load wrote into a view's dicts (non-tensor leaves) back into `state`."""
    for key, value in loaded.items():
        if isinstance(value, dict) and isinstance(state.get(key), dict):
            merge(state[key], value)
        else:
            state[key] = value


def broadcast(state: dict, owned_by: dict[Key, int]) -> None:
    """Every rank receives each large tensor from its owner, in place, on the default process group
    (NCCL for GPU tensors). Every rank walks the tensors in one order."""
    for path in sorted(owned_by, key=lambda p: tuple(map(str, p))):
        tensor = _get(state, path)
        dense = tensor if tensor.is_contiguous() else tensor.contiguous()   # e.g. channels-last weights
        dist.broadcast(dense, src=owned_by[path])
        if dense is not tensor:
            tensor.copy_(dense)


def owned_bytes(state: dict, owned_by: dict[Key, int], rank: int) -> int:
    """Bytes of the large tensors `rank` owns: what it stages, writes and reads."""
    return sum(_nbytes(_get(state, path)) for path, owner in owned_by.items() if owner == rank)


def _tensors(value, private: tuple[str, ...], path: Key = ()):
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if not path and isinstance(key, str) and private and key.startswith(private):
                continue
            yield from _tensors(item, private, path + (key,))


def _view(value, owned_by, rank, path):
    if isinstance(value, dict):
        return {key: _view(item, owned_by, rank, path + (key,)) for key, item in value.items()
                if owned_by.get(path + (key,), rank) == rank}
    return value


def _get(state: dict, path: Key):
    for key in path:
        state = state[key]
    return state


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
