"""Reading a checkpoint safely and fast: a torch.distributed.checkpoint FileSystemReader whose metadata
unpickler admits only DCP's own classes and whose non-tensor entries load with `weights_only=True`,
reading each tensor straight from its file slice with a pool of threads.

It builds on private torch.distributed.checkpoint internals (storage_data, the load plan's items,
_get_metadata_path): the `runner` extra's torch floor (pyproject.toml) is the oldest version tested.
"""

from __future__ import annotations

import io
import os
import pickle
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, cast

import torch
from torch.distributed.checkpoint import FileSystemReader, default_planner
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.planner import LoadItemType

_DCP_CLASSES = {"Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
                "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING"}
READ_THREADS = 8       # reads in parallel per rank (at most its share of the cores)
READ_BATCH_BYTES = 256 << 20


class _MetadataUnpickler(pickle.Unpickler):
    """Admits DCP's metadata classes and torch's dtypes/layouts/Size, nothing else."""

    def find_class(self, module: str, name: str):
        if module == "torch.distributed.checkpoint.metadata" and name in _DCP_CLASSES:
            return getattr(dcp_metadata, name)
        if module == "torch.distributed.checkpoint.filesystem" and name == "_StorageInfo":
            from torch.distributed.checkpoint.filesystem import _StorageInfo
            return _StorageInfo
        if module == "torch" and (name == "Size" or isinstance(getattr(torch, name, None),
                                                               (torch.dtype, torch.layout, torch.memory_format))):
            return getattr(torch, name)
        if module == "torch.serialization" and name == "_get_layout":
            return torch.serialization._get_layout  # maps a layout's name to the layout, nothing more
        if module == "pathlib" and name in ("Path", "PosixPath", "PurePosixPath"):
            import pathlib  # DCP records the checkpoint path; a path object runs no code
            return getattr(pathlib, name)
        if module == "collections" and name == "OrderedDict":
            from collections import OrderedDict
            return OrderedDict
        raise pickle.UnpicklingError(f"checkpoint metadata refers to {module}.{name}, which is not allowed")


class SafeFileSystemReader(FileSystemReader):
    """FileSystemReader whose metadata load cannot run arbitrary code."""

    def read_metadata(self, *args, **kwargs):
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as stream:
            metadata = _MetadataUnpickler(stream).load()
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = dcp_metadata.StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata

    def read_data(self, plan, planner):
        """The requested entries, read by a pool of threads (DCP's own reader reads one file after
        another in one thread), each tensor straight from its file slice, in runs of about
        READ_BATCH_BYTES. `scripts/bench_load.py` measures it against DCP's; the figures are in
        data/measurements/2026-11-30-h200-sdxl-reader."""
        jobs: dict[str, list] = {}
        for item in plan.items:
            info = self.storage_data[item.storage_index]
            if getattr(info, "transform_descriptors", None):   # written through an extension: DCP's own path
                return super().read_data(plan, planner)
            jobs.setdefault(info.relative_path, []).append(item)
        batches = []   # each file's entries in offset order, cut into runs of about READ_BATCH_BYTES
        for relative_path, items in jobs.items():
            items.sort(key=lambda i: self.storage_data[i.storage_index].offset)
            batch, size = [], 0
            for item in items:
                batch.append(item)
                size += self.storage_data[item.storage_index].length
                if size >= READ_BATCH_BYTES:
                    batches.append((relative_path, batch))
                    batch, size = [], 0
            if batch:
                batches.append((relative_path, batch))
        with ThreadPoolExecutor(max_workers=max(1, min(read_threads(), len(batches)))) as pool:
            for done in [pool.submit(self._read_batch, path, items, planner) for path, items in batches]:
                done.result()
        future: torch.futures.Future[None] = torch.futures.Future()
        future.set_result(None)
        return future

    def _read_batch(self, relative_path: str, items: list, planner) -> None:
        with open(Path(self.path) / relative_path, "rb", buffering=0) as handle:
            for item in items:
                info = self.storage_data[item.storage_index]
                data = _Slice(handle, info.offset, info.length)   # read straight into the tensor's memory
                if item.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(item, io.BytesIO(data.read()))
                    continue
                tensor = torch.load(cast(IO[bytes], data), map_location="cpu", weights_only=True)   # a file-like slice
                tensor = _narrow(tensor, item.storage_offsets, item.lengths)
                target = planner.resolve_tensor(item).detach()
                if target.size() != tensor.size():
                    raise RuntimeError(f"checkpoint entry {item.storage_index.fqn} has shape {tuple(tensor.size())}, "
                                       f"the training state {tuple(target.size())}")
                target.copy_(tensor)
                planner.commit_tensor(item, target)


class _Slice(io.RawIOBase):
    """Bytes [offset, offset + length) of an open file, as a seekable file of their own."""

    def __init__(self, handle, offset: int, length: int):
        super().__init__()
        self._handle, self._offset, self._length = handle, offset, length
        self._handle.seek(offset)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._handle.tell() - self._offset

    def seek(self, position: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: self._offset, os.SEEK_CUR: self._handle.tell(),
                os.SEEK_END: self._offset + self._length}[whence]
        target = min(max(base + position, self._offset), self._offset + self._length)
        return self._handle.seek(target) - self._offset

    def readinto(self, buffer) -> int:
        left = self._length - self.tell()
        view = memoryview(buffer)
        return self._handle.readinto(view[:left] if len(view) > left else view) if left > 0 else 0


def read_threads() -> int:
    """READ_THREADS, but no more than this process's share of the host's cores (torchrun's local ranks)."""
    share = (os.cpu_count() or 1) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, min(READ_THREADS, share))


def _narrow(tensor: torch.Tensor, offsets, lengths) -> torch.Tensor:
    """The part of a stored tensor that a read asks for (all of it, unless the state is sharded)."""
    for dim, (start, length) in enumerate(zip(offsets, lengths)):
        if start != 0 or length != tensor.size(dim):
            tensor = tensor.narrow(dim, start, length)
    return tensor


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner, but non-tensor entries (step counts, learning rates, the scheduler's state)
    are unpickled with `weights_only=True`: a checkpoint file cannot name code to run."""

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        obj = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            # the helper DefaultLoadPlanner.load_bytes uses
            default_planner.set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj
