"""Host staging for asynchronous checkpoints: the training stall is one device-to-host copy.

The host buffers are allocated once, by a background thread started right after the first training
step, when the optimizer's state exists, and touched there (zeroed), so that the first copy does not
fault its pages in. They are pageable: page-locked (pinned) buffers make each copy faster (SDXL's
30.8 GB: a 0.58 s stall against 2.59 s), but pinning them, even from a background thread, held the
GPU's work up: the step beside it took 35.7 s instead of 0.52, after every start of the process
(pageable: 0.68 s; data/measurements/2026-12-01-h200-save). Done inside the first save, as PyTorch's
own `async_save` staging does, it would be a stall of that length at that save. Each save copies the
state into the same buffers (one synchronisation) and hands the host copy to the background writer,
so training may change the device tensors while the write goes on. `HostStager(pin=True)` is kept for
the benchmark (scripts/bench_checkpoint.py --staging pinned).
"""

from __future__ import annotations

import threading

import torch


def _allocate(value, pin: bool):
    """Host tensors shaped like `value`'s (sizes and dtypes are fixed: reading them from another thread is safe)."""
    if isinstance(value, torch.Tensor):
        if pin and value.device.type == "cuda":
            return torch.empty(value.size(), dtype=value.dtype, device="cpu", pin_memory=True)
        return torch.zeros(value.size(), dtype=value.dtype, device="cpu")   # touched here, not at the first copy
    if isinstance(value, dict):
        return {k: _allocate(v, pin) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_allocate(v, pin) for v in value)
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
    """Host buffers for one training state's structure, allocated in the background, reused."""

    def __init__(self, pin: bool = False):
        self.pin = pin          # page-locked buffers on GPUs: faster copies, a long stall to allocate (above)
        self._buffers = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def prepare(self, state: dict) -> None:
        """Start allocating buffers shaped like `state` (once); training goes on meanwhile."""
        if self._thread is not None or self._buffers is not None:
            return
        self._thread = threading.Thread(target=self._allocate_in_background, args=(state,),
                                        name="checkpoint-staging-alloc", daemon=True)
        self._thread.start()

    def _allocate_in_background(self, state) -> None:
        try:
            self._buffers = _allocate(state, self.pin)
        except BaseException as exc:   # re-raised by wait_allocated()
            self._error = exc

    def ready(self) -> bool:
        """Whether buffers are allocated (without waiting for a background allocation still running)."""
        return self._buffers is not None and (self._thread is None or not self._thread.is_alive()) \
            and self._error is None

    def stage(self, state: dict) -> dict:
        """A host copy of `state` in the (reused) buffers; returns once the copy is complete."""
        if self._thread is None and self._buffers is None:
            self._buffers = _allocate(state, self.pin)
        self.wait_allocated()
        staged = _copy(state, self._buffers)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return staged

    def wait_allocated(self) -> None:
        """Block until a background allocation (if any) is done; re-raise its error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"allocating checkpoint staging buffers failed: {error}") from error

