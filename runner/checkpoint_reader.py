"""Reading a checkpoint safely and fast: a torch.distributed.checkpoint FileSystemReader whose metadata
unpickler admits only DCP's own classes and whose non-tensor entries load with `weights_only=True`,
reading each tensor straight from its file slice with a pool of threads.

Each tensor entry of a DCP file is one `torch.save` record (an uncompressed zip: a small pickle that
names the storage's dtype, size and strides, and the storage's bytes). `torch.load(weights_only=True)`
reads one in about a millisecond of interpreter time, holding the GIL: an SDXL training state has
about 6,700 of them, so the threads of the pool waited on each other for seconds. `_record` reads the
zip's directory and the pickle itself (an unpickler that admits a tensor's rebuild and its storage
types, nothing else) and the bytes then go straight into the target: a CPU tensor's own memory, or a
page-locked buffer per thread from which the copy to the GPU runs asynchronously on the thread's
stream. A record it does not recognise (another pickle, a compressed or ZIP64 archive, another byte
order) is read by `torch.load` as before.

It builds on private torch.distributed.checkpoint internals (storage_data, the load plan's items,
_get_metadata_path): the `runner` extra's torch floor (pyproject.toml) is the oldest version tested.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import struct
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
RECORDS = True         # read torch.save records with _record (False: torch.load each, the benchmark's baseline)
# _record reads a record's first and last this many bytes once and finds its zip directory, pickle and local
# headers in them (0: a read for each, the benchmark's baseline). Each read leaves the interpreter lock and takes
# it back; beside a thread that holds it (tracing, importing) each take waits up to the switch interval, 5 ms: on
# the 2-core machine a 6,700-record load beside such a thread took 33.9 s this way against 74.5 s (0.90 against
# 0.98 s alone; data/measurements/2026-12-04-cpu-record-reads).
RECORD_BLOCK_BYTES = 4096
# Which targets take the batched path (_Batch): "cuda" (GPU targets), "always" (CPU targets too: the tests'
# way to run it on a machine without a GPU) or "never" (every record on its own, as before 2026-12-05).
# COSTSIM_READ_BATCHED sets another (batched_mode()).
BATCHED = "cuda"
BATCHED_MODES = ("cuda", "always", "never")
# When a resume page-locks the batched read's buffers (reserve_buffers): "ahead" (the default: from the restore's
# start, beside sizing the state and planning the read) or "sized" (once the state is made). On the H200 the
# state's making took 1.2-1.7 s inside resumes against 0.25 s alone (scripts/bench_state_sizing.py;
# data/measurements/2026-12-05-h200-state-sizing): the driver may serialise the state's device allocations behind
# the page-locking. COSTSIM_READ_BUFFERS sets the other, to measure the two side by side (buffers_when()).
BUFFERS_WHEN = ("ahead", "sized")


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
    """FileSystemReader whose metadata load cannot run arbitrary code. `metadata`: what an earlier
    read_metadata() of this folder returned, used instead of reading it again (an SDXL checkpoint's is 2.5 MB
    of pickle, 6,800 entries: a quarter of a second to unpickle; data/measurements/2026-12-04-h200-fetch-zlib-ng
    has the command)."""

    def __init__(self, path, *args, metadata=None, prepared=None, **kwargs):
        super().__init__(path, *args, **kwargs)
        self._preloaded = metadata
        self._prepared = prepared   # called once what is left of the read holds the interpreter lock little
        self.timings: dict[str, float] = {}   # DCP's planning before the read; the batched path's parts
        self._made = time.perf_counter()

    def read_metadata(self, *args, **kwargs):
        metadata = self._preloaded
        if metadata is None:
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
        data/measurements/2026-11-30-h200-sdxl-reader.

        GPU targets go in batches (_Batch): first every record's fields are found and its target and its
        place in a page-locked buffer are set, then each batch is one read of its file range into the
        buffer and one copy call for all of its records. The second part takes the interpreter lock a few
        times a batch instead of several times a record, so work that holds the lock beside it (a resume's
        first forward, runner.warm_step) and the read do not wait on each other: `prepared`, given to the
        reader, is called between the two parts."""
        self.timings["planned_s"] = time.perf_counter() - self._made   # metadata and DCP's plans, from making
        jobs: dict[str, list] = {}
        for item in plan.items:
            info = self.storage_data[item.storage_index]
            if getattr(info, "transform_descriptors", None):   # written through an extension: DCP's own path
                self._ready()
                return super().read_data(plan, planner)
            jobs.setdefault(info.relative_path, []).append(item)
        batches = []   # each file's entries in offset order, in runs of at most READ_BATCH_BYTES of the file
        # (an entry longer than that alone)
        for relative_path, items in jobs.items():
            items.sort(key=lambda i: self.storage_data[i.storage_index].offset)
            batch: list = []
            for item in items:
                info = self.storage_data[item.storage_index]
                if batch:
                    first = self.storage_data[batch[0].storage_index]
                    if info.offset + info.length - first.offset > READ_BATCH_BYTES:
                        batches.append((relative_path, batch))
                        batch = []
                batch.append(item)
            if batch:
                batches.append((relative_path, batch))
        future: torch.futures.Future[None] = torch.futures.Future()
        future.set_result(None)
        if not batches:
            self._ready()
            return future
        mode = batched_mode()
        if mode == "cuda" and not torch.cuda.is_available():
            mode = "never"   # no GPU target to batch for
        threads = max(1, min(read_threads(), len(batches)))
        with ThreadPoolExecutor(max_workers=threads) as pool:
            if mode == "never":
                self._ready()
                results = [pool.submit(self._read_batch, path, items, planner) for path, items in batches]
            else:
                began = time.perf_counter()
                buffers, reserved_s = _reserved_buffers(threads, mode)
                buffers += pool.map(lambda _: _batch_buffer(mode), range(threads - len(buffers)))
                self.timings["buffers_s"] = time.perf_counter() - began
                if reserved_s is not None:
                    self.timings["reserved_s"] = reserved_s   # their page-locking, on its thread (reserve_buffers)

                def prepare(index: int) -> _Batch:   # batch i goes through lane i % threads's buffer
                    relative_path, items = batches[index]
                    return _Batch.prepare(self, relative_path, items, planner, buffers[index % threads], mode)
                prepared = list(pool.map(prepare, range(len(batches))))
                self.timings["prepare_s"] = time.perf_counter() - began
                self._ready()
                results = [pool.submit(_Batch.run_all, prepared[lane::threads], self, planner)
                           for lane in range(threads)]
            for done in results:
                done.result()
        return future

    def _ready(self) -> None:
        if self._prepared is not None:
            prepared, self._prepared = self._prepared, None
            prepared()

    def _read_batch(self, relative_path: str, items: list, planner) -> None:
        self._read_items(Path(self.path) / relative_path, items, planner)

    def _read_items(self, path: Path, items: list, planner) -> None:
        """Each entry on its own: a tensor record straight into its target or through a page-locked buffer."""
        staging = _Staging()
        try:
            with open(path, "rb", buffering=0) as handle:
                for item in items:
                    self._read_item(handle, item, planner, staging)
        finally:
            staging.finish()   # the copies in flight end before the thread's buffer serves another batch

    def _read_item(self, handle, item, planner, staging: _Staging) -> None:
        info = self.storage_data[item.storage_index]
        if item.type == LoadItemType.BYTE_IO:
            planner.load_bytes(item, io.BytesIO(_Slice(handle, info.offset, info.length).read()))
            return
        target = planner.resolve_tensor(item).detach()
        record = _record(handle.fileno(), info.offset, info.length) if RECORDS else None
        if record is None:   # not a record _record knows: torch's own reader
            tensor = torch.load(cast(IO[bytes], _Slice(handle, info.offset, info.length)), map_location="cpu",
                                weights_only=True)
        else:
            tensor = staging.read(handle.fileno(), record, target)
        tensor = _narrow(tensor, item.storage_offsets, item.lengths)
        if target.size() != tensor.size():
            raise RuntimeError(f"checkpoint entry {item.storage_index.fqn} has shape {tuple(tensor.size())}, "
                               f"the training state {tuple(target.size())}")
        if tensor.data_ptr() != target.data_ptr():   # not already read into the target's own memory
            staging.copy(target, tensor)
        planner.commit_tensor(item, target)


_reserve_lock = threading.Lock()
_reserved: list = []   # [a thread allocating lanes' buffers, its list, [its start, its end]]: reserve_buffers()


def reserve_buffers() -> None:
    """Allocate the batched read's page-locked buffers, one per reading thread, on a thread from now, for the
    next read to take: a resume calls it before it sizes its state and plans the read, which then need not wait
    for the allocation (page-locking is a driver call per buffer), or once the state is made
    (COSTSIM_READ_BUFFERS=sized, buffers_when). Nothing without a GPU or the batched path."""
    if batched_mode() != "cuda" or not torch.cuda.is_available():
        return
    count, buffers, times = read_threads(), [], [time.perf_counter()]

    def allocate() -> None:
        try:
            for _ in range(count):
                buffer = _batch_buffer("cuda")
                if buffer is None:
                    return
                buffers.append(buffer)
        finally:
            times.append(time.perf_counter())
    with _reserve_lock:
        _reserved[:] = [threading.Thread(target=allocate, name="read-buffers", daemon=True), buffers, times]
        _reserved[0].start()


def _reserved_buffers(count: int, mode: str) -> tuple[list, float | None]:
    """Up to `count` of the buffers reserve_buffers() allocated (after it is done), each taken once, and how
    long their allocation took (None: none was reserved)."""
    with _reserve_lock:
        reserved, _reserved[:] = list(_reserved), []
    if not reserved or mode != "cuda":
        return [], None
    thread, buffers, times = reserved
    thread.join()
    return buffers[:count], times[-1] - times[0]


def buffers_when() -> str:
    """When a resume reserves the read's buffers: "ahead" (BUFFERS_WHEN's first, the default) or
    COSTSIM_READ_BUFFERS's value."""
    text = os.environ.get("COSTSIM_READ_BUFFERS", BUFFERS_WHEN[0])
    if text not in BUFFERS_WHEN:
        from runner.speed import RuntimeConfigError
        raise RuntimeConfigError(f"COSTSIM_READ_BUFFERS={text!r}: expected one of {', '.join(BUFFERS_WHEN)}")
    return text


def _pinned(nbytes: int) -> torch.Tensor | None:
    """A page-locked byte buffer, or None when the driver will not lock that much."""
    try:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    except RuntimeError:
        return None


def _batch_buffer(mode: str) -> torch.Tensor | None:
    """One lane's buffer for the batched path: page-locked for GPU targets (None when it cannot be had: the
    records then go on their own), pageable for CPU targets ("always")."""
    return _pinned(READ_BATCH_BYTES) if mode == "cuda" else torch.empty(READ_BATCH_BYTES, dtype=torch.uint8)


def _takes_whole(record: _Record, item, target: torch.Tensor, mode: str, room: int) -> bool:
    """Whether a batch can copy `record`'s bytes as they are into `target`: the whole stored tensor is asked
    for, plain, of the target's dtype and size, into contiguous memory on the mode's device, and no larger
    than a lane's buffer (`room`: a record alone in its batch may be)."""
    return (all(o == 0 for o in item.storage_offsets) and tuple(item.lengths) == record.size and record.plain()
            and target.dtype == record.dtype and tuple(target.size()) == record.size and target.is_contiguous()
            and target.device.type == ("cuda" if mode == "cuda" else "cpu") and record.nbytes <= room)


@dataclass
class _Batch:
    """A run of one file's records whose bytes go into a lane's buffer with one read, and from it into their
    targets with one `_foreach_copy_` (a byte copy: the records' bytes need not be aligned in the file).
    A record that cannot (not a plain tensor of the target's dtype, size and layout, a read of part of
    it, a target on another device) is read on its own (`rest`); non-tensor entries are read while
    preparing."""
    path: Path
    buffer: torch.Tensor | None
    start: int = 0                 # the file range the buffer takes, [start, end)
    end: int = 0
    targets: list = field(default_factory=list)   # each record's target, as bytes
    sources: list = field(default_factory=list)   # its bytes in the buffer
    done: list = field(default_factory=list)      # (item, target) to commit once copied
    rest: list = field(default_factory=list)

    @classmethod
    def prepare(cls, reader: SafeFileSystemReader, relative_path: str, items: list, planner,
                buffer: torch.Tensor | None, mode: str) -> _Batch:
        batch = cls(Path(reader.path) / relative_path, buffer)
        places = []
        with open(batch.path, "rb", buffering=0) as handle:
            for item in items:
                info = reader.storage_data[item.storage_index]
                if item.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(item, io.BytesIO(_Slice(handle, info.offset, info.length).read()))
                    continue
                target = planner.resolve_tensor(item).detach()
                record = _record(handle.fileno(), info.offset, info.length) if RECORDS and buffer is not None else None
                if record is None or buffer is None or not _takes_whole(record, item, target, mode, buffer.numel()):
                    batch.rest.append(item)
                    continue
                if record.nbytes:
                    places.append((record.data, record.nbytes, target))
                batch.done.append((item, target))
        if places:
            batch.start = min(at for at, _, _ in places)
            batch.end = max(at + n for at, n, _ in places)
            buffer = cast(torch.Tensor, buffer)
            for at, nbytes, target in places:
                batch.targets.append(target.reshape(-1).view(torch.uint8))
                batch.sources.append(buffer[at - batch.start:at - batch.start + nbytes])
        return batch

    @staticmethod
    def run_all(batches: list[_Batch], reader: SafeFileSystemReader, planner) -> None:
        """One lane: its batches in turn through its buffer, each batch's copies finished before the buffer
        takes the next; then the records that go on their own."""
        device = next((b.targets[0].device for b in batches if b.targets and b.targets[0].is_cuda), None)
        stream = None
        if device is not None:   # the copies run on a stream of the lane's, after what was queued for the targets
            stream = torch.cuda.Stream(device=device)
            stream.wait_stream(torch.cuda.current_stream(device))
        try:
            for batch in batches:
                if not batch.targets:
                    continue
                if stream is not None:
                    stream.synchronize()   # the buffer's last copies are done
                assert batch.buffer is not None
                with open(batch.path, "rb", buffering=0) as handle:
                    _pread_into(handle.fileno(), _bytes_of(batch.buffer[:batch.end - batch.start]), batch.start)
                with torch.no_grad(), (torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()):
                    torch._foreach_copy_(batch.targets, batch.sources, non_blocking=stream is not None)
        finally:
            if stream is not None:
                stream.synchronize()
        for batch in batches:
            for item, target in batch.done:
                planner.commit_tensor(item, target)
            if batch.rest:
                reader._read_items(batch.path, batch.rest, planner)


@dataclass(frozen=True)
class _Record:
    """Where a torch.save record's tensor is: its storage's bytes at `data` (absolute, in the file), and how
    the tensor views them."""
    dtype: torch.dtype
    storage_numel: int
    storage_offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    data: int
    inline: bytes | None = field(default=None, repr=False, compare=False)   # the bytes, when _record read them

    @property
    def nbytes(self) -> int:
        return self.storage_numel * self.dtype.itemsize

    def plain(self) -> bool:
        """Whether the tensor is its whole storage, contiguous (it can be read straight into a tensor's memory)."""
        expected, stride = [], 1
        for dim in reversed(self.size):   # row-major strides (a dimension of 1 or 0 may have any)
            expected.append(stride)
            stride *= dim
        return (self.storage_offset == 0 and stride == self.storage_numel
                and all(s == e or n <= 1 for s, e, n in zip(self.stride, reversed(expected), self.size)))


_STORAGE_DTYPES = {name: dtype for dtype, name in torch.storage._dtype_to_storage_type_map().items()
                   if not name.startswith("Q")}   # e.g. FloatStorage -> torch.float32 (a legacy storage class name)
_DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in _STORAGE_DTYPES.values()} | {
    name: getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, name)}
_EOCD, _CENTRAL, _LOCAL = b"PK\x05\x06", b"PK\x01\x02", b"PK\x03\x04"


class _NotPlain(Exception):
    """A record that is not one plain tensor: torch.load reads it."""


@dataclass(frozen=True)
class _StorageRef:
    dtype: torch.dtype | None   # None: an UntypedStorage (v3 records name the dtype beside it)
    key: str
    numel: int


class _TensorUnpickler(pickle.Unpickler):
    """The pickle of one tensor, as torch.save writes it: a rebuild of a storage (v2: a typed storage class;
    v3: an untyped storage and a dtype), with no hooks. Anything else is _NotPlain; nothing is called."""

    def find_class(self, module: str, name: str):
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor_v3"):
            return _rebuilt_v2 if name.endswith("v2") else _rebuilt_v3
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        if module == "torch" and name in _DTYPES:
            return _DTYPES[name]
        if module == "torch.storage" and name == "UntypedStorage":
            return None
        raise _NotPlain(f"{module}.{name}")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[4], int)):
            raise _NotPlain("storage reference")
        kind = pid[1]
        if kind is not None and not isinstance(kind, torch.dtype):
            raise _NotPlain("storage type")
        return _StorageRef(kind, str(pid[2]), pid[4])


@dataclass(frozen=True)
class _Rebuilt:
    storage: _StorageRef
    dtype: torch.dtype
    numel: int
    offset: object
    size: tuple
    stride: tuple


def _rebuilt_v2(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None) -> _Rebuilt:
    if not isinstance(storage, _StorageRef) or storage.dtype is None or hooks or metadata:
        raise _NotPlain("tensor")
    return _Rebuilt(storage, storage.dtype, storage.numel, offset, tuple(size), tuple(stride))


def _rebuilt_v3(storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None) -> _Rebuilt:
    if not isinstance(storage, _StorageRef) or storage.dtype is not None or hooks or metadata \
            or not isinstance(dtype, torch.dtype) or storage.numel % dtype.itemsize:
        raise _NotPlain("tensor")
    return _Rebuilt(storage, dtype, storage.numel // dtype.itemsize, offset, tuple(size), tuple(stride))


class _RecordBytes:
    """A record's bytes [start, start + size) (from the record's own start), served from its first and last
    RECORD_BLOCK_BYTES where they lie inside them (a torch.save record's headers, pickle and directory do,
    around its storage's bytes), else read."""

    def __init__(self, fd: int, offset: int, length: int):
        self.fd, self.offset, self.length = fd, offset, length
        block = min(length, RECORD_BLOCK_BYTES)
        self.tail_start = length - block
        self.head = self.tail = b""
        if block:
            self.head = os.pread(fd, block, offset)
            self.tail = self.head if self.tail_start == 0 else os.pread(fd, block, offset + self.tail_start)

    def read(self, start: int, size: int) -> bytes:
        held = self.held(start, size)
        return held if held is not None else os.pread(self.fd, size, self.offset + start)

    def held(self, start: int, size: int) -> bytes | None:
        """The bytes, when the blocks already read hold them all (a file cut short gave shorter blocks)."""
        if start + size <= len(self.head):
            return self.head[start:start + size]
        if start >= self.tail_start and start + size <= self.tail_start + len(self.tail):
            return self.tail[start - self.tail_start:start - self.tail_start + size]
        return None


def _record(fd: int, offset: int, length: int) -> _Record | None:
    """The tensor of the torch.save record at file bytes [offset, offset + length), or None when the record is
    not one plain tensor in an uncompressed little-endian archive (torch.load reads it then)."""
    if sys.byteorder != "little":
        return None
    record = _RecordBytes(fd, offset, length)
    tail_size = min(length, 4096)
    tail = record.read(length - tail_size, tail_size)
    end = tail.rfind(_EOCD)
    if end < 0 or len(tail) < end + 22:
        return None
    count, size, start = struct.unpack_from("<HII", tail, end + 10)
    if start == 0xFFFFFFFF or start + size > length:
        return None   # ZIP64 (a record over 4 GB): torch.load
    directory = record.read(start, size)
    entries, position = {}, 0
    for _ in range(count):
        if directory[position:position + 4] != _CENTRAL:
            return None
        method, csize, usize, nlen, elen, clen = struct.unpack_from("<H8xIIHHH", directory, position + 10)
        local = struct.unpack_from("<I", directory, position + 42)[0]
        name = directory[position + 46:position + 46 + nlen].decode("utf-8", "replace")
        entries[name.split("/", 1)[-1]] = (method, csize, usize, local)
        position += 46 + nlen + elen + clen

    def body(name: str) -> tuple[int, int] | None:   # (start within the record, size) of an uncompressed entry
        if name not in entries or entries[name][0] != 0 or entries[name][1] != entries[name][2]:
            return None
        _, csize, _, local = entries[name]
        header = record.read(local, 30) if local + 30 <= length else b""
        if header[:4] != _LOCAL:
            return None
        nlen, elen = struct.unpack_from("<HH", header, 26)
        start = local + 30 + nlen + elen
        return (start, csize) if start + csize <= length else None   # inside the record's own bytes only

    pickled, order = body("data.pkl"), body("byteorder")
    if pickled is None:
        return None
    if order is not None and record.read(*order) != b"little":
        return None
    try:
        tensor = _TensorUnpickler(io.BytesIO(record.read(*pickled))).load()
    except (_NotPlain, pickle.UnpicklingError, TypeError, ValueError, EOFError):
        return None
    if not isinstance(tensor, _Rebuilt):   # e.g. a dict or a list of tensors
        return None
    data = body(f"data/{tensor.storage.key}")
    if data is None or data[1] != tensor.numel * tensor.dtype.itemsize \
            or sum(name.startswith("data/") for name in entries) != 1:
        return None   # the size does not match, or the record holds more than one storage
    if not _fits(tensor.numel, tensor.offset, tensor.size, tensor.stride):
        return None
    return _Record(tensor.dtype, tensor.numel, cast(int, tensor.offset), tensor.size, tensor.stride, offset + data[0],
                   inline=record.held(*data))   # a small tensor's bytes come with its headers


def _fits(numel: int, offset, size: tuple, stride: tuple) -> bool:
    """Whether a view (offset, size, stride) of a storage of `numel` elements stays inside it."""
    if not (isinstance(offset, int) and offset >= 0 and len(size) == len(stride)
            and all(isinstance(n, int) and n >= 0 for n in size + stride)):
        return False
    if 0 in size:
        return True
    return offset + sum((n - 1) * s for n, s in zip(size, stride)) < numel


def _view(raw: torch.Tensor, record: _Record) -> torch.Tensor:
    """The record's tensor over `raw`, its storage's bytes (a slice of a larger buffer, at any 64-byte
    aligned place: as_strided counts its offset from the start of the buffer's storage, not the slice's)."""
    if not record.nbytes:
        return torch.empty(record.size, dtype=record.dtype)
    storage = raw.view(record.dtype)
    return storage.as_strided(record.size, record.stride, storage.storage_offset() + record.storage_offset)


def _fill(fd: int, view: memoryview, record: _Record) -> None:
    """Fill `view` with the record's storage bytes: those _record already holds, else read."""
    if record.inline is not None:
        view[:] = record.inline
    else:
        _pread_into(fd, view, record.data)


def _pread_into(fd: int, view: memoryview, offset: int) -> None:
    """Fill `view` with the file's bytes from `offset` (a read returns at most about 2 GB)."""
    done = 0
    while done < len(view):
        count = os.preadv(fd, [view[done:]], offset + done)
        if count <= 0:
            raise EOFError(f"checkpoint file ends {len(view) - done} bytes early")
        done += count


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """A writable view of a contiguous CPU tensor's bytes."""
    return memoryview(cast(bytearray, tensor.reshape(-1).view(torch.uint8).numpy()))


PINNED_BYTES = 256 << 20   # a thread's page-locked buffer for copies to a GPU (a batch, READ_BATCH_BYTES)


class _Staging:
    """One reading thread's way of putting records into targets. A CPU target whose layout matches gets the
    bytes read straight into its memory; a GPU target gets them through this thread's page-locked buffer
    and an asynchronous copy on this thread's stream (the buffer is reused once the stream has caught up).
    Without CUDA, or when a buffer cannot be pinned, a GPU target is copied from pageable memory."""

    _local = threading.local()

    def __init__(self) -> None:
        self.used = 0
        self.stream: torch.cuda.Stream | None = None

    def read(self, fd: int, record: _Record, target: torch.Tensor) -> torch.Tensor:
        if target.device.type == "cpu" and record.plain() and target.dtype == record.dtype \
                and target.is_contiguous() and tuple(target.size()) == record.size:
            _fill(fd, _bytes_of(target), record)
            return target
        buffer = self._buffer(record.nbytes) if target.device.type == "cuda" else None
        if buffer is None:
            raw = torch.empty(record.nbytes, dtype=torch.uint8)
        else:
            raw = buffer[self.used:self.used + record.nbytes]
            self.used += -(-record.nbytes // 64) * 64   # the next record's bytes start 64-byte aligned
        _fill(fd, _bytes_of(raw), record)
        return _view(raw, record)

    def copy(self, target: torch.Tensor, tensor: torch.Tensor) -> None:
        if target.device.type == "cuda" and tensor.is_pinned():
            if self.stream is None:
                self.stream = torch.cuda.Stream(device=target.device)
                self.stream.wait_stream(torch.cuda.current_stream(target.device))
            with torch.cuda.stream(self.stream):
                target.copy_(tensor, non_blocking=True)
        else:
            target.copy_(tensor)

    def _buffer(self, nbytes: int) -> torch.Tensor | None:
        """Room for `nbytes` in this thread's pinned buffer (after waiting for its copies when it is full)."""
        if not torch.cuda.is_available() or nbytes > PINNED_BYTES:
            return None
        buffer = getattr(self._local, "pinned", None)
        if buffer is None:
            buffer = self._local.pinned = _pinned(PINNED_BYTES)
            if buffer is None:
                return None
        if self.used + nbytes > PINNED_BYTES:
            self.finish()
        return buffer

    def finish(self) -> None:
        """Wait for the copies in flight; the buffer is free again."""
        if self.stream is not None:
            self.stream.synchronize()
        self.used = 0


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
    """READ_THREADS (COSTSIM_READ_THREADS sets another, for benchmarks), but no more than this process's share
    of the host's cores (torchrun's local ranks)."""
    text = os.environ.get("COSTSIM_READ_THREADS", str(READ_THREADS))
    if not text.strip().isdigit() or int(text) < 1:
        from runner.speed import RuntimeConfigError
        raise RuntimeConfigError(f"COSTSIM_READ_THREADS={text!r}: expected a whole number of threads >= 1")
    share = (os.cpu_count() or 1) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, min(int(text), share))


def batched_mode() -> str:
    """BATCHED, or COSTSIM_READ_BATCHED's value."""
    text = os.environ.get("COSTSIM_READ_BATCHED", BATCHED)
    if text not in BATCHED_MODES:
        from runner.speed import RuntimeConfigError
        raise RuntimeConfigError(f"COSTSIM_READ_BATCHED={text!r}: expected one of {', '.join(BATCHED_MODES)}")
    return text


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
