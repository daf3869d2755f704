"""Python's garbage collector in a worker's start: off until the first step is done, then what the start made
frozen out of every later collection.

A start makes over a million objects that live as long as the process: the modules of torch, diffusers and
the compiler, the model's modules, Dynamo's guards and graphs, the checkpoint's plans. Python's automatic
collection walks all of them again each time the objects made since the last one outnumber its thresholds,
and a start makes objects fast: on the 2-core machine importing torch, diffusers and the compiler took
3.98 s with it (1,356 collections) and 2.96 s without; DCP's planning of the SDXL UNet's 6,700 checkpoint
records 0.65 s against 0.11 s (345 collections). Nearly nothing such a collection finds is garbage: a full
collection after those imports finds 15,227 of 860,503 objects unreachable (`python3 scripts/bench_gc_start.py
--parts 3`; without --parts, whole starts).

So a worker pauses automatic collection at its first line (`pause`, before its imports: runner.worker),
freezes what its imports made once they are done (`freeze`: gc.freeze moves every object alive to a permanent
generation that no collection walks; the imports' few unreachable cycles stay with it), and when its first
step is done (`settle`) collects once, walking only what the build, the restore and the first step made,
so that a cycle that holds a tensor is freed, freezes the rest and turns automatic collection back on (or
leaves it to `gc_every`: runner.speed.GarbageCollection). From there a collection walks only what training
makes. torchrun's agent pauses for its own imports and freezes them before it starts its workers
(runner.torchrun).

COSTSIM_GC_START=0 leaves the collector as Python has it, throughout.
"""

from __future__ import annotations

import gc
import os
import time

from runner import environment

GC_START_ENV = "COSTSIM_GC_START"
ENABLED = environment.choice(GC_START_ENV, "1", ("1", "0")) == "1"

_paused_at: float | None = None   # when pause() turned automatic collection off, while it is off
_hooked = False


def pause() -> None:
    """Automatic collection off, until `settle` (or `resume`). A process forked meanwhile (a workload's data
    loader workers, made as its first batch is asked for) starts with it on: it is not this start."""
    global _paused_at, _hooked
    if ENABLED and gc.isenabled():
        if not _hooked:
            os.register_at_fork(after_in_child=_forked)
            _hooked = True
        gc.disable()
        _paused_at = time.perf_counter()


def _forked() -> None:
    global _paused_at
    if _paused_at is not None:
        gc.enable()
        _paused_at = None


def paused() -> bool:
    return _paused_at is not None


def freeze() -> None:
    """While paused: every object alive now out of later collections (what imports make lives as long as
    the process)."""
    if _paused_at is not None:
        gc.freeze()


def resume() -> None:
    """Freeze what exists and turn automatic collection back on, without a collection first (torchrun's
    agent, whose imports made nothing that is garbage worth a walk of them)."""
    global _paused_at
    if _paused_at is not None:
        gc.freeze()
        gc.enable()
        _paused_at = None


def settle(*, automatic: bool = True) -> dict | None:
    """After a start: one collection of what is not frozen, everything left frozen, and automatic collection
    back on where `automatic` (gc_every keeps it off). What it did, or None when nothing was paused."""
    global _paused_at
    if _paused_at is None:
        return None
    began = time.perf_counter()
    freed = gc.collect()
    collected_s = time.perf_counter() - began
    gc.freeze()
    if automatic:
        gc.enable()
    report = {"paused_s": round(began - _paused_at, 3), "collected_s": round(collected_s, 4), "freed": freed,
              "frozen": gc.get_freeze_count()}
    _paused_at = None
    return report
