"""Host staging for asynchronous checkpoints: the training stall is one device-to-host copy.

The host buffers are mapped once, right after the first training step, when the optimizer's state exists,
and touched (zeroed) by a background thread, so that the first copy does not fault its pages in. A save
that comes before the thread is done (a notice at a life's second step) stops it and copies into the
buffers as they are: the pages it did not reach fault in as the copy writes them. Before, such a save
could not use the buffers at all, and a notice's save written from the device tensors took 24.2 s
against 13.8 s staged (an H100, data/measurements/2026-12-07-h100-graph-tree-index); staged with 31% of
the buffers faulted in, 23.8 s against 22.2 s for the same run's final save (another, slower H100), and
side by side in one process 18.97 s right after the mapping against 16.44 s fully faulted in (1.15x;
data/measurements/2026-12-07-h100-early-notice-staged).

They are pageable: page-locked (pinned) buffers make each copy faster (SDXL's 30.8 GB: a 0.58 s stall
against 2.59 s), but pinning them, even from a background thread, held the
GPU's work up: the step beside it took 35.7 s instead of 0.52, after every start of the process
(pageable: 0.68 s; data/measurements/2026-12-01-h200-save). Done inside the first save, as PyTorch's
own `async_save` staging does, it would be a stall of that length at that save. Each save copies the
state into the same buffers (one synchronisation) and hands the host copy to the background writer,
so training may change the device tensors while the write goes on. `HostStager(pin=True)` is kept for
the benchmark (scripts/bench_checkpoint.py --staging pinned). A blocking save (a notice's) uses the same
buffers tensor by tensor as it writes (StagingSavePlanner): nothing changes the device tensors meanwhile.
An async save streams (HostStager.streaming): its writer threads start at once and write each tensor as
soon as training's thread has copied it, so the write no longer begins after the whole copy (the stall,
2.0-3.0 s of SDXL's 30.8 GB on the H200 host); training still waits for the whole copy.

The buffers are views of one anonymous mapping advised to use huge pages (where the kernel's
transparent huge pages allow it), each view a storage of its own size: a process that leaves on a
notice hands 30.8 GB back to the kernel in 2 MB pages instead of 4 KB ones, which was most of a
worker's exit after its save (scripts/bench_exit.py). A tensor's storage is exactly its bytes, as DCP's
writer needs (it copies a tensor whose storage is larger than itself).
"""

from __future__ import annotations

import mmap
import threading
import time

import torch
from torch.distributed.checkpoint import DefaultSavePlanner
from torch.distributed.checkpoint._nested_dict import flatten_state_dict, unflatten_state_dict

HUGE_PAGE_BYTES = 2 << 20
ALIGN_BYTES = 4096   # each buffer starts on a page
PREFAULT_CHUNK_BYTES = 64 << 20   # how much the touching thread zeroes between looks at its stop flag


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN_BYTES) * ALIGN_BYTES


class HostArena:
    """Zeroed host tensors carved from one mapping on huge pages: `take(size, dtype)` hands out the next.
    With prefault=False the pages are faulted in later by prefault(), or by whatever writes them first."""

    def __init__(self, nbytes: int, prefault: bool = True):
        self._mapping = mmap.mmap(-1, nbytes + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self._mapping.madvise(mmap.MADV_HUGEPAGE)
            except OSError:   # a kernel without transparent huge pages: small pages, as before
                pass
        self._view = memoryview(self._mapping)
        address = torch.frombuffer(self._view[:1], dtype=torch.uint8).data_ptr()
        self._next = -address % HUGE_PAGE_BYTES   # the first buffer on a huge page's start
        self._end = self._next + nbytes
        self._start = self._touched = self._next
        if prefault:
            self.prefault()

    def prefault(self, stop: threading.Event | None = None) -> bool:
        """Fault the pages in, a chunk at a time, until all are or `stop` is set; whether all are. Fresh pages read
        as zeros, so writing zeros changes no buffer's value, but it must end before any buffer is written: a
        chunk zeroed after a copy would wipe it (HostStager stops it and waits first)."""
        while self._touched < self._end:
            if stop is not None and stop.is_set():
                return False
            end = min(self._touched + PREFAULT_CHUNK_BYTES, self._end)
            torch.frombuffer(self._view[self._touched:end], dtype=torch.uint8).zero_()
            self._touched = end
        return True

    def prefaulted(self) -> float:
        """The share of the arena's bytes faulted in by prefault()."""
        size = self._end - self._start
        return 1.0 if size == 0 else (self._touched - self._start) / size

    def take(self, size: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        nbytes = size.numel() * dtype.itemsize
        if nbytes == 0:
            return torch.zeros(size, dtype=dtype)
        if self._next + nbytes > self._end:
            raise ValueError(f"the arena has {self._end - self._next} bytes left, not {nbytes}")
        tensor = torch.frombuffer(self._view[self._next:self._next + nbytes], dtype=dtype).view(size)
        self._next += _aligned(nbytes)
        return tensor


def host_buffers(value, pin: bool = False, arena: HostArena | None = None):
    """Host tensors shaped like `value`'s tensors, in the same structure: zeroed views of one huge-page
    arena (`arena`, one sized by arena_bytes(value), or a fresh one faulted in now), or (`pin`) page-locked
    tensors for the CUDA ones."""
    if arena is None and not pin:
        arena = HostArena(arena_bytes(value))
    return _allocate(value, pin, arena)


def arena_bytes(value) -> int:
    """The bytes of an arena that holds a buffer for each of `value`'s tensors."""
    return sum(_aligned(t.numel() * t.element_size()) for t in _tensors(value))


def _allocate(value, pin: bool, arena: HostArena | None):
    """Host tensors shaped like `value`'s (sizes and dtypes are fixed: reading them from another thread is safe)."""
    if isinstance(value, torch.Tensor):
        if pin and value.device.type == "cuda":
            return torch.empty(value.size(), dtype=value.dtype, device="cpu", pin_memory=True)
        if arena is None:
            return torch.zeros(value.size(), dtype=value.dtype, device="cpu")
        return arena.take(value.size(), value.dtype)
    if isinstance(value, dict):
        return {k: _allocate(v, pin, arena) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_allocate(v, pin, arena) for v in value)
    return None


def _copy(value, buffer):
    if isinstance(value, torch.Tensor):
        if buffer is None or buffer.size() != value.size() or buffer.dtype != value.dtype:
            return value.detach().to("cpu", copy=True)   # the structure changed: a fresh copy, still correct
        buffer.copy_(value.detach(), non_blocking=value.device.type == "cuda")
        return buffer
    if isinstance(value, dict):
        buffer = buffer if isinstance(buffer, dict) else {}
        return {k: _copy(v, buffer.get(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        buffer = buffer if isinstance(buffer, (list, tuple)) and len(buffer) == len(value) else [None] * len(value)
        return type(value)(_copy(v, b) for v, b in zip(value, buffer))
    return value


class HostStager:
    """Host buffers for one training state's structure, faulted in (or, pinned, allocated) in the background,
    reused."""

    def __init__(self, pin: bool = False):
        self.pin = pin          # page-locked buffers on GPUs: faster copies, a long stall to allocate (above)
        self._buffers = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()   # a copy is about to use the buffers: the touching thread ends
        self._arena: HostArena | None = None

    def prepare(self, state: dict) -> None:
        """Map buffers shaped like `state` now (once) and fault them in on a thread; training goes on meanwhile.
        Pinned buffers are allocated on the thread (pinning is the slow part)."""
        if self._thread is not None or self._buffers is not None:
            return
        if self.pin:
            self._thread = threading.Thread(target=self._allocate_in_background, args=(state,),
                                            name="checkpoint-staging-alloc", daemon=True)
        else:
            self._arena = HostArena(arena_bytes(state), prefault=False)
            self._buffers = host_buffers(state, arena=self._arena)
            self._thread = threading.Thread(target=self._prefault_in_background, args=(self._arena,),
                                            name="checkpoint-staging-prefault", daemon=True)
        self._thread.start()

    def _allocate_in_background(self, state) -> None:
        try:
            self._buffers = host_buffers(state, self.pin)
        except BaseException as exc:   # re-raised by wait_allocated()
            self._error = exc

    def _prefault_in_background(self, arena: HostArena) -> None:
        try:
            arena.prefault(self._stop)
        except BaseException as exc:   # re-raised by wait_allocated()
            self._error = exc

    def ready(self) -> bool:
        """Whether a copy may use the buffers now: mapped (their pages faulted in or not: a copy stops the
        touching thread), or, pinned, allocated (without waiting for an allocation still running)."""
        if self._buffers is None or self._error is not None:
            return False
        return not self.pin or self._thread is None or not self._thread.is_alive()

    def prefaulted(self) -> float | None:
        """The share of the buffers' bytes faulted in ahead of the copies (None: not mapped as one arena)."""
        return None if self._arena is None else self._arena.prefaulted()

    def _claim(self, state: dict) -> None:
        """The buffers, for a copy: mapped now if prepare() was not called; a touching thread still going stopped
        and waited for (its zeros would land on the copy's data), a pinned allocation waited for."""
        if self._thread is None and self._buffers is None:
            self._buffers = host_buffers(state, self.pin)
        self._stop.set()
        self.wait_allocated()

    def stage(self, state: dict) -> dict:
        """A host copy of `state` in the (reused) buffers; returns once the copy is complete."""
        self._claim(state)
        staged = _copy(state, self._buffers)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return staged

    def planner(self, state: dict) -> StagingSavePlanner:
        """A blocking save's planner that stages each tensor as its writer reaches it (StagingSavePlanner)."""
        self._claim(state)
        if not isinstance(self._buffers, dict):
            raise RuntimeError("the staging buffers are not a state dict's")
        return StagingSavePlanner(self._buffers)

    def streaming(self, state: dict) -> StreamingStage | None:
        """An async save's staging that its writer threads follow (StreamingStage); None where a tensor of
        `state` has no buffer of its shape and dtype (the structure changed: stage() copies it whole)."""
        self._claim(state)
        if not isinstance(self._buffers, dict):
            return None
        flat, mapping = flatten_state_dict(state)
        buffers = flatten_state_dict(self._buffers)[0]
        pairs = []
        for key, value in flat.items():
            if isinstance(value, torch.Tensor):
                buffer = buffers.get(key)
                if not (isinstance(buffer, torch.Tensor) and buffer.size() == value.size()
                        and buffer.dtype == value.dtype):
                    return None
                pairs.append((key, value, buffer))
        staged = unflatten_state_dict({k: buffers[k] if isinstance(v, torch.Tensor) else v for k, v in flat.items()},
                                      mapping)
        return StreamingStage(staged, pairs)

    def wait_allocated(self) -> None:
        """Block until the background thread (if any) is done: the buffers faulted in (unless a copy stopped it)
        or allocated; re-raise its error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"allocating checkpoint staging buffers failed: {error}") from error


class StagingSavePlanner(DefaultSavePlanner):
    """A blocking save whose staging goes on while it writes: DCP's writer threads ask for each tensor just
    before writing it (resolve_data, one item after another in each thread), and get it copied then into its
    host buffer, so one thread's device-to-host copy overlaps the others' writes instead of the whole state
    being copied first (30.8 GB: 2.4-3.0 s on the H200 host before the first byte was written). The buffers
    are the async saves' (pre-faulted, on huge pages): the copy writes memory that is already there, where
    DCP's own copy of a device tensor allocates fresh memory for each. Only for saves that training waits
    for: the device tensors must not change until the save returns."""

    def __init__(self, buffers: dict):
        super().__init__()
        # keyed as DCP's planner flattens the state (its own function); a tensor whose key or shape does not
        # match is written as DCP writes a device tensor, slower but the same bytes
        self._buffers = flatten_state_dict(buffers)[0]

    def resolve_data(self, write_item):
        data = super().resolve_data(write_item)
        if isinstance(data, torch.Tensor):
            buffer = self._buffers.get(write_item.index.fqn)
            if (isinstance(buffer, torch.Tensor) and buffer is not data and buffer.size() == data.size()
                    and buffer.dtype == data.dtype):
                buffer.copy_(data.detach())   # synchronous: the writer writes it next
                return buffer
        return data



class StreamingStage:
    """An async save's copy into the host buffers, tensor by tensor, that its writer threads follow: `staged`
    (the state's structure on the buffers) goes to DCP with `planner`, whose resolve_data waits until the
    tensor asked for has been copied; `fill()`, on training's thread, copies the largest tensors first (each
    writer thread writes its share largest first: DCP's FileSystemWriter) and returns once every copy is
    complete, when the device tensors may change again."""

    def __init__(self, staged: dict, pairs: list[tuple[str, torch.Tensor, torch.Tensor]]):
        self.staged = staged
        self._pairs = sorted(pairs, key=lambda pair: pair[1].numel() * pair[1].element_size(), reverse=True)
        self.planner = StreamingSavePlanner([key for key, _, _ in pairs])
        self._filled = threading.Event()
        self._stall_s: float | None = None

    def fill(self, started: float) -> float:
        """Copy every tensor into its buffer, each handed to the writers as it lands; the stall (seconds from
        `started`, a perf_counter, to the last copy's completion). A copy that fails fails the writers too."""
        try:
            for key, value, buffer in self._pairs:
                cuda = value.device.type == "cuda"
                buffer.copy_(value.detach(), non_blocking=cuda)
                event = None
                if cuda:
                    event = torch.cuda.Event()
                    event.record()
                self.planner.ready(key, event)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        except BaseException as exc:
            self.planner.fail(exc)
            raise
        finally:
            self._stall_s = time.perf_counter() - started
            self._filled.set()
        return self._stall_s

    def stall_s(self) -> float:
        """The stall, once fill() has returned (the writer's thread asks when the write is done)."""
        self._filled.wait()
        assert self._stall_s is not None
        return self._stall_s


class StreamingSavePlanner(DefaultSavePlanner):
    """An async save's planner (StreamingStage): a writer thread asking for a tensor waits until training's
    thread has copied it into its host buffer."""

    def __init__(self, keys: list[str]):
        super().__init__()
        self._ready = {key: threading.Event() for key in keys}
        self._events: dict[str, torch.cuda.Event] = {}
        self._failed: BaseException | None = None

    def ready(self, key: str, event: torch.cuda.Event | None = None) -> None:
        if event is not None:
            self._events[key] = event
        self._ready[key].set()

    def fail(self, exc: BaseException) -> None:
        self._failed = exc
        for ready in self._ready.values():
            ready.set()

    def resolve_data(self, write_item):
        data = super().resolve_data(write_item)
        ready = self._ready.get(write_item.index.fqn)
        if isinstance(data, torch.Tensor) and ready is not None:
            ready.wait()
            if self._failed is not None:
                raise RuntimeError(f"staging the checkpoint failed: {self._failed}") from self._failed
            event = self._events.get(write_item.index.fqn)
            if event is not None:
                event.synchronize()
        return data
