"""The first micro-batch's forward, run once beside a resume's checkpoint read.

The first step of a compiled model in a new process pays what the next ones do not: Dynamo traces each
compiled frame again (its trace is not cached), the AOTAutograd and FX-graph caches are looked up and their
kernels loaded (the backward's with the forward's), the lazily imported compiler modules come in, cuBLAS and
cuDNN pick their algorithms, the caching allocator grows. On the H200 that was 4.5-6 s of a resume's 8-10 s
first step from a warm compile cache (data/measurements/2026-12-04-h200-first-step and -warm-step), all after
the 4-5 s checkpoint read, whose threads leave the GPU and much of the interpreter free.

So a compiled resume runs the forward of its first micro-batch on a thread while the checkpoint is read into
the same tensors: its result is garbage (the weights are written under it) and is dropped with its autograd
graph, but what it traced, looked up, loaded and allocated is in place for the first real step. It starts
when the reader has found every record and set where its bytes go (runner.checkpoint_reader's `prepared`):
from there the read takes the interpreter lock a few times per 256 MB instead of several times per record.
The first try started it with the read and both slowed: they took the one lock in turns, each take of the
read's 6,700 records' waiting behind the tracing thread (the read 5.6-10.8 s beside it against 3.7-5.3 s
alone, and the forward longer than the first step's whole extra; data/measurements/2026-12-04-h200-warm-step).

Only the forward: a backward through tensors that the read has since written fails autograd's version check
(it did, on the H200), and the forward's cache hits already load the backward's kernels. It must leave
nothing the step would see: it touches no gradient and no optimizer, the main thread joins it before the
random state is restored, a model with buffers gets none (its forward may update them, as batch norm's running
statistics, under the read), and it runs the module DDP wraps, never DDP's own forward (no collective on the
thread while the read uses the process group), inside DDP's marker of an active forward, so Dynamo compiles
the frames as under DDP (its DDPOptimizer) and finds them in the same cache entries. The batch it used is the
first real micro-batch (the same indices), handed to the first step so that the data is read once.

Not under CUDA graphs (`runtime.compile_mode` reduce-overhead or max-autotune): Inductor's graph trees live per
thread, so a forward on this thread would not warm the step's (runner.prewarm runs instead, as below).
`COSTSIM_WARM_STEP=0` turns it off (then runner.prewarm imports the recorded modules beside the read instead);
`COSTSIM_WARM_STEP=early` starts it at the restore's start instead, beside sizing the optimizer's state and
planning the read (about 1.5 s on the H200, interpreter work that then shares the lock with it) and the reader's
per-record part (about 1 s): to be measured against the default.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WARM_STEP_ENV = "COSTSIM_WARM_STEP"
# The interpreter's switch interval while the warm step runs (Python's default 5 ms): a thread waiting for the
# interpreter lock gets it within this. Each take of the lock by the read's threads waits up to the interval
# behind a thread that holds it for tracing (the convoy effect): with a take per record, on the H200, the read
# took 6.5-10.8 s beside the warm step at 5 ms and 5.8-6.3 s at 0.2 ms against 3.7-4.2 s without
# (data/measurements/2026-12-04-h200-warm-step). The read now takes it a few times per 256 MB batch
# (runner.checkpoint_reader), each take still within the interval.
SWITCH_INTERVAL_S = 0.0002


class ShortSwitches:
    """The interpreter's switch interval at SWITCH_INTERVAL_S while any holder needs it (the warm step, the
    precompiled model's preload: runner.precompile), put back when the last one lets go."""

    def __init__(self):
        self._lock = threading.Lock()
        self._holders = 0
        self._before = 0.005

    def acquire(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._before = sys.getswitchinterval()
                sys.setswitchinterval(min(self._before, SWITCH_INTERVAL_S))
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                sys.setswitchinterval(self._before)


short_switches = ShortSwitches()


# COSTSIM_WARM_STEP's values: where the warm step starts, if at all
MODES = {"1": "read", "early": "restore", "0": "off"}


def mode(env=os.environ) -> str:
    """Where the warm step starts: "read" (the default: once the reader has placed every record), "restore"
    (`early`: from the restore's start, beside sizing the state and planning the read, which then share the
    interpreter lock with it) or "off"."""
    text = env.get(WARM_STEP_ENV, "1")
    if text not in MODES:
        from runner.speed import RuntimeConfigError
        raise RuntimeConfigError(f"{WARM_STEP_ENV}={text!r}: expected 1 (beside the read, the default), early (from "
                                 "the restore's start) or 0 (off)")
    return MODES[text]


def enabled(env=os.environ) -> bool:
    return mode(env) != "off"


@dataclass
class WarmStep:
    """`run()` (any callable that takes no argument and returns the batch it used) on a daemon thread from
    `start()`; `join()` before anything else touches the model's gradients or the random state."""
    run: Callable[[], Any]
    batch: Any = None        # what run() returned: the first micro-batch, for the step to use
    error: str | None = None
    seconds: float = 0.0
    waited_s: float = 0.0    # how long the main thread waited for it after its own work (the read)
    started_s: float | None = None   # when start() ran, from the WarmStep's making (None: never)
    started_at: str = ""             # from where: "restore" or "read" (the mode's point)
    _done: threading.Event = field(default_factory=threading.Event)
    _made: float = field(default_factory=time.monotonic)

    def start(self, at: str = "read") -> WarmStep:
        """Start it (once: a later call does nothing); `at`, the point it starts from, for the report."""
        if self.started_s is not None:
            return self
        self.started_s, self.started_at = time.monotonic() - self._made, at
        short_switches.acquire()   # let go by join()
        threading.Thread(target=self._run, name="warm-step", daemon=True).start()
        return self

    def _run(self) -> None:
        started = time.monotonic()
        try:
            self.batch = self.run()
        except Exception as exc:   # noqa: BLE001 - the real first step does it all again, and reports its own error
            self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        finally:
            self.seconds = time.monotonic() - started
            self._done.set()

    def join(self) -> WarmStep:
        """Wait for it to end (at once when it never started: the read failed before it could)."""
        if self.started_s is None:
            return self
        started = time.monotonic()
        self._done.wait()
        self.waited_s = time.monotonic() - started
        short_switches.release()
        return self

    def report(self) -> dict:
        if self.started_s is None:
            return {"started": False}
        out: dict = {"started_at": self.started_at, "started_after_s": round(self.started_s, 3),
                     "seconds": round(self.seconds, 3),
                     "waited_s": round(self.waited_s, 3)}
        if self.error:
            out["error"] = self.error
        return out


def inside_ddp(ddp) -> contextlib.AbstractContextManager:
    """DDP's own marker of an active forward (what Dynamo reads to compile a frame as DDP's), without its
    forward's collectives; nothing for a model that DDP does not wrap."""
    marker = getattr(ddp, "_inside_ddp_forward", None)
    return marker() if marker is not None else contextlib.nullcontext()
