"""A precomputed SDXL dataset: latents and text embeddings in safetensors shards, read ahead of the GPU.

A dataset folder holds `*.safetensors` shards (any number of samples each), every shard with the
same four tensors (`runner prepare-sdxl` writes them from images and captions):

    latents   (N, 4, H/8, W/8)   the VAE's latents, already multiplied by its scaling factor
    text      (N, 77, 2048)      both text encoders' penultimate hidden states, concatenated
    pooled    (N, 1280)          the second text encoder's projected pooled output
    time_ids  (N, 6)             original size, crop top-left, target size (SDXL's micro-conditioning)

bf16 or fp32. The order is a pure function of the global sample index: sample i is row
`permutation(seed, epoch)[i mod n]` of the training rows, epoch = i div n, so a resumed run and a
run at another world size see the same samples at the same steps. A held-out slice (chosen once,
from the dataset alone) never trains: it is the validation set.

No CUDA here: `Prefetcher` runs the reads in background threads into pinned host memory, and the
workload copies to the GPU with non_blocking copies.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

FIELDS = ("latents", "text", "pooled", "time_ids")
DTYPES = ("BF16", "F32")   # as safetensors' headers name bf16 and fp32
HELD_OUT_SEED = 20_261_130   # the validation slice depends on the dataset only, never on a run's seed


class DatasetError(ValueError):
    """The dataset folder or a shard does not fit the model (the message names the shard and tensor)."""


def expected_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Each tensor's per-sample shape for a UNet config (diffusers UNet2DConditionModel)."""
    size = config.get("sample_size", 128)
    text_dim = config.get("cross_attention_dim", 2048)
    text_dim = text_dim[0] if isinstance(text_dim, list) else text_dim
    pooled = config.get("projection_class_embeddings_input_dim", 2816) - 6 * config.get("addition_time_embed_dim", 256)
    return {"latents": (config.get("in_channels", 4), size, size), "text": (77, text_dim), "pooled": (pooled,),
            "time_ids": (6,)}


class LatentShards:
    """The shards of a dataset folder, checked against the model's shapes; rows read by global row number."""

    def __init__(self, folder: str | Path, shapes: dict[str, tuple[int, ...]]):
        from safetensors import safe_open

        self.folder = Path(folder)
        checked = shard_rows(self.folder, shapes)
        self.handles, self.offsets, total = [], [], 0
        for path, rows in checked:
            try:
                self.handles.append(safe_open(str(path), framework="pt"))
            except Exception as exc:   # safetensors raises its own error types for a torn or foreign file
                raise DatasetError(f"data={folder}: shard {path.name}: not a readable safetensors file ({exc})") from None
            self.offsets.append(total)
            total += rows
        self.paths, self.rows = [path for path, _ in checked], total
        self.shapes = shapes
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.rows

    def read(self, rows: list[int], *, pin: bool = False) -> dict[str, torch.Tensor]:
        """The rows' tensors stacked (in each shard's dtype, as fp32 if shards differ), on the host."""
        parts: dict[str, list[torch.Tensor]] = {name: [] for name in FIELDS}
        with self._lock:   # one reader at a time per handle set: safe_open handles are not thread-safe
            for row in rows:
                shard = bisect.bisect_right(self.offsets, row) - 1
                local = row - self.offsets[shard]
                handle = self.handles[shard]
                for name in FIELDS:
                    parts[name].append(handle.get_slice(name)[local:local + 1])
        import torch

        out = {}
        for name, tensors in parts.items():
            dtype = tensors[0].dtype if all(t.dtype == tensors[0].dtype for t in tensors) else torch.float32
            stacked = torch.cat([t.to(dtype) for t in tensors])
            out[name] = stacked.pin_memory() if pin else stacked
        return out


def shard_rows(folder: Path, shapes: dict[str, tuple[int, ...]]) -> list[tuple[Path, int]]:
    """Every shard of a dataset folder and its rows, checked against the model's shapes from the safetensors
    headers alone (safetensors' own reading of them, through its numpy side): no tensor is read and torch is
    not imported (`runner execute` checks before any process starts). DatasetError names the shard, the
    tensor and what is allowed."""
    from safetensors import safe_open

    if not folder.is_dir():
        raise DatasetError(f"data={folder}: no such folder (a dataset is a folder of .safetensors shards; "
                           "runner prepare-sdxl makes one)")
    paths = sorted(folder.glob("*.safetensors"))
    if not paths:
        raise DatasetError(f"data={folder}: no .safetensors shards in it")
    checked = []
    for path in paths:
        try:
            handle = safe_open(str(path), framework="numpy")
        except Exception as exc:   # safetensors raises its own error types for a torn or foreign file
            raise DatasetError(f"data={folder}: shard {path.name}: not a readable safetensors file ({exc})") from None
        checked.append((path, _check_shard(path, handle, shapes)))
    return checked


def _check_shard(path: Path, handle, shapes: dict[str, tuple[int, ...]]) -> int:
    names = set(handle.keys())
    missing = [name for name in FIELDS if name not in names]
    if missing:
        raise DatasetError(f"shard {path}: no tensor {', '.join(map(repr, missing))}; a shard holds "
                           f"{', '.join(FIELDS)}")
    rows = None
    for name in FIELDS:
        piece = handle.get_slice(name)
        shape, dtype = tuple(piece.get_shape()), piece.get_dtype()
        if dtype not in DTYPES:
            raise DatasetError(f"shard {path}: tensor {name!r} is {dtype}; allowed: bf16, fp32")
        want = shapes[name]
        if shape[1:] != want or len(shape) != len(want) + 1:
            raise DatasetError(f"shard {path}: tensor {name!r} has shape {shape}; the model needs "
                               f"(N, {', '.join(map(str, want))})")
        if rows is not None and shape[0] != rows:
            raise DatasetError(f"shard {path}: tensor {name!r} has {shape[0]} rows, 'latents' has {rows}")
        rows = shape[0]
    if not rows:
        raise DatasetError(f"shard {path}: no samples")
    return rows


def check_held_out(rows: int, held_out: int) -> None:
    if not 0 <= held_out < rows:
        raise DatasetError(f"val_samples={held_out}: the dataset has {rows} samples; hold out fewer")


class Order:
    """Which row each global sample index reads: a seeded permutation of the training rows per epoch."""

    def __init__(self, rows: int, seed: int, held_out: int):
        import torch

        check_held_out(rows, held_out)
        choice = torch.randperm(rows, generator=torch.Generator().manual_seed(HELD_OUT_SEED))
        self.validation = sorted(choice[:held_out].tolist())
        self.training = torch.tensor(sorted(choice[held_out:].tolist()), dtype=torch.int64)
        self.seed = seed
        self._epochs: OrderedDict[int, torch.Tensor] = OrderedDict()

    def rows(self, indices: range) -> list[int]:
        n = len(self.training)
        return [int(self._permutation(i // n)[i % n]) for i in indices]

    def _permutation(self, epoch: int) -> torch.Tensor:
        if epoch not in self._epochs:
            import torch


            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._epochs[epoch] = self.training[torch.randperm(len(self.training), generator=g)]
            while len(self._epochs) > 2:   # a step's samples span at most two epochs
                self._epochs.popitem(last=False)
        return self._epochs[epoch]


class Prefetcher:
    """Reads ahead: after each request it starts reading the next `depth` requests the trainer will
    make (`following` says which), in background threads. A request that was not foreseen is read at
    once. Results are keyed by the sample range, so a wrong guess costs time, never a wrong batch."""

    def __init__(self, load: Callable[[range], dict], following: Callable[[range], range], depth: int = 4,
                 threads: int = 2):
        self.load, self.following, self.depth = load, following, depth
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="data")
        self._pending: dict[tuple[int, int], Future] = {}

    def get(self, indices: range) -> dict:
        key = (indices.start, indices.stop)
        future = self._pending.pop(key, None)
        for stale in [k for k in self._pending if k[0] < key[0]]:   # passed by (a resume elsewhere)
            self._pending.pop(stale).cancel()
        ahead = indices
        for _ in range(self.depth):
            ahead = self.following(ahead)
            ahead_key = (ahead.start, ahead.stop)
            if ahead_key not in self._pending:
                self._pending[ahead_key] = self._pool.submit(self.load, ahead)
        return future.result() if future is not None else self.load(indices)

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pool.shutdown(wait=True)
