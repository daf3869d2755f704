"""The first micro-batch's forward, run once beside a resume's checkpoint read.

The first step of a compiled model in a new process pays what the next ones do not: Dynamo traces each
compiled frame again (its trace is not cached), the AOTAutograd and FX-graph caches are looked up and their
kernels loaded (the backward's with the forward's), the lazily imported compiler modules come in, cuBLAS and
cuDNN pick their algorithms, the caching allocator grows. On the H200 that was 4.5-6 s of a resume's 8-10 s
first step from a warm compile cache (data/measurements/2026-12-04-h200-first-step and -warm-step), all after
the 4-5 s checkpoint read, whose threads leave the GPU and much of the interpreter free.

So a compiled resume runs the forward of its first micro-batch on a thread from the moment the model is built
and wrapped, while the main thread sizes the optimizer's state and reads the checkpoint into the same tensors:
its result is garbage (the weights are written under it) and is dropped with its autograd graph, but what it
traced, looked up, loaded and allocated is in place for the first real step. Only the forward: a backward
through tensors that the read has since written fails autograd's version check (it did, on the H200), and the
forward's cache hits already load the backward's kernels. It must leave nothing the step would see: it touches
no gradient and no optimizer, the main thread joins it before the random state is restored, a model with
buffers gets none (its forward may update them, as batch norm's running statistics, under the read), and it
runs the module DDP wraps, never DDP's own forward (no collective on the thread while the read uses the process
group), inside DDP's marker of an active forward, so Dynamo compiles the frames as under DDP (its DDPOptimizer)
and finds them in the same cache entries. The batch it used is the first real micro-batch (the same indices),
handed to the first step so that the data is read once.

`COSTSIM_WARM_STEP=0` turns it off (then runner.prewarm imports the recorded modules beside the read instead).
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
# interpreter lock gets it within this. The read's threads take it briefly for each of a checkpoint's ~6,700
# records and leave it for their reads and copies; behind a thread that holds it for tracing, each of those
# takes waited up to 5 ms (the convoy effect): on the H200 the read took 6.5-10.8 s beside the warm step against
# 3.7-4.2 s without (data/measurements/2026-12-04-h200-warm-step/second)
SWITCH_INTERVAL_S = 0.0002


def enabled(env=os.environ) -> bool:
    return env.get(WARM_STEP_ENV, "1") != "0"


@dataclass
class WarmStep:
    """`run()` (any callable that takes no argument and returns the batch it used) on a daemon thread from
    `start()`; `join()` before anything else touches the model's gradients or the random state."""
    run: Callable[[], Any]
    batch: Any = None        # what run() returned: the first micro-batch, for the step to use
    error: str | None = None
    seconds: float = 0.0
    waited_s: float = 0.0    # how long the main thread waited for it after its own work (the read)
    _done: threading.Event = field(default_factory=threading.Event)
    _interval: float = 0.005   # the switch interval before start(), put back by join()

    def start(self) -> WarmStep:
        self._interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._interval, SWITCH_INTERVAL_S))
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
        started = time.monotonic()
        self._done.wait()
        self.waited_s = time.monotonic() - started
        sys.setswitchinterval(self._interval)
        return self

    def report(self) -> dict:
        out: dict = {"seconds": round(self.seconds, 3), "waited_s": round(self.waited_s, 3)}
        if self.error:
            out["error"] = self.error
        return out


def inside_ddp(ddp) -> contextlib.AbstractContextManager:
    """DDP's own marker of an active forward (what Dynamo reads to compile a frame as DDP's), without its
    forward's collectives; nothing for a model that DDP does not wrap."""
    marker = getattr(ddp, "_inside_ddp_forward", None)
    return marker() if marker is not None else contextlib.nullcontext()
