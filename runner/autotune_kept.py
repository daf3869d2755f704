"""Triton's autotuning timings kept by the runner, so that a restart does not time every kernel's candidates again
(on by default; COSTSIM_KEPT_AUTOTUNE=0 times them at every start as torch does).

Inductor's Triton kernels that have more than one candidate configuration time them all at their first call
(`CachingAutotuner.benchmark_all_configs`) and keep the fastest. Torch keeps that choice beside the kernel
(`<hash>.best_config`) and looks it up at the next start; for the kernels of a precompiled model, loaded statically
from the file's bundle, the lookup misses for some at every start: on an H100 18 kernel objects of the SDXL UNet's
were timed again at every start, fresh or resumed, 1.1-1.4 s of each first step
(data/measurements/2026-12-07-h100-inductor-bytecode: the kept choices were saved for the configurations the kernel
was made with, and the static kernel asks with the ones it carries, which `_dynamic_scale_rblock` had added to).
With the timings kept here that time is gone from every start (0.00 s against 1.09-1.32 s), and the final losses
agree as between any two runs (data/measurements/2026-12-08-h100-kept-autotune).

`install` wraps `CachingAutotuner.benchmark_all_configs`: a kernel's timings are kept in `<compile cache>/autotune/`
under a key of the kernel's file name (torch names it by a hash of its source), its candidates, the GPU's name and
torch's and Triton's versions, as JSON in runner.precompile's checked format (a SHA-256 a read checks first; written
atomically). A kernel that finds timings for exactly its candidates gets them back instead of timing them, and
torch's autotuner then picks the fastest of them as it would have: the same choice as the start that timed them. A
damaged file, other candidates, another GPU or another torch time the kernel again (and keep the new timings); two
candidates that print alike are never kept (the timings could not be told apart). What the wrapper cannot work out
(a torch whose autotuner looks otherwise) it leaves to torch's own timing. Kept timings leave what torch's timing
leaves besides them: the arguments a kernel accumulates into zeroed, the coordinate-descent tuner's cache filled
(`_as_if_timed`). Torch 2.13 also closes the losing candidates' launchers while it times them; kept timings leave
them loaded (their modules, not GPU memory).

The timings are data, not code: numbers keyed by the candidates' printed configuration; a file that does not parse
as such is damaged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

ENV = "COSTSIM_KEPT_AUTOTUNE"
FOLDER = "autotune"


def enabled(env=os.environ) -> bool:
    from runner.speed import env_switch  # runner.speed imports this module
    return env_switch(env, ENV, "1", "keep Triton's autotuning timings for the next start, the default",
                      "time every kernel's candidates at every start as torch does")


def default_folder(env=os.environ) -> Path:
    """COMPILE_CACHE/autotune, beside runner.precompile's folder in the run's compile cache."""
    from runner.precompile import default_folder as precompiled
    return precompiled(env).parent / FOLDER


class Keeper:
    """The timings kept in `folder` for kernels on `device` (its name, with torch's and Triton's versions: the key's
    part that says which hardware and compiler timed them), and what it did this process."""

    def __init__(self, folder: Path, device: str):
        self.folder = Path(folder)
        self.device = device
        self.lock = threading.Lock()
        self.counts = {"kept": 0, "timed": 0, "damaged": 0, "unkeyed": 0, "unwritten": 0}
        self.seconds = 0.0   # spent in the wrapper: reading kept timings, or timing and writing them

    def wrap(self, original: Callable) -> Callable:
        """`original` (an autotuner's benchmark_all_configs) with the kept timings in front of it."""
        @functools.wraps(original)
        def benchmark_all_configs(autotuner, *args, **kwargs):
            started = time.perf_counter()
            path, labels = self._place(autotuner)
            if path is None:   # nothing to key it by: torch's own timing, not kept
                timings = original(autotuner, *args, **kwargs)
                self._count("unkeyed", started)
                return timings
            kept = _read(path, labels)   # {label: ms}; None if none kept; False if damaged or for others
            if kept:
                timings = {launcher: kept[label] for launcher, label in zip(autotuner.launchers, labels)}
                _as_if_timed(autotuner, timings, args, kwargs)
                self._count("kept", started)
                return timings
            timings = original(autotuner, *args, **kwargs)
            outcome = "timed" if kept is None else "damaged"
            numbers = {label: timings.get(launcher) for launcher, label in zip(autotuner.launchers, labels)}
            if not _write(path, numbers):
                outcome = "unwritten"
            self._count(outcome, started)
            return timings
        return benchmark_all_configs

    def report(self) -> dict:
        with self.lock:
            return {"kept_autotune": {**self.counts, "seconds": round(self.seconds, 3)}}

    def _place(self, autotuner) -> tuple[Path | None, list[str]]:
        """Where this kernel's timings are kept, and its candidates' labels (their printed configurations); no
        path when the kernel has no file name or two candidates print alike."""
        filename = getattr(autotuner, "filename", None)
        launchers = getattr(autotuner, "launchers", None)
        if not filename or not launchers:
            return None, []
        labels = [str(getattr(launcher, "config", "")) for launcher in launchers]
        if len(set(labels)) != len(labels) or "" in labels:
            return None, labels
        key = hashlib.sha256("\0".join([os.path.basename(filename), self.device, *sorted(labels)]).encode())
        return self.folder / f"{key.hexdigest()[:32]}.json", labels

    def _count(self, outcome: str, started: float) -> None:
        with self.lock:
            self.counts[outcome] += 1
            self.seconds += time.perf_counter() - started


def _as_if_timed(autotuner, timings: dict, args: tuple, kwargs: dict) -> None:
    """What torch's timing leaves behind besides the timings, done for kept ones: the arguments a kernel must find
    zeroed (it accumulates into them: the timing ran it) zeroed, as torch's timing ends; the timings given to the
    coordinate-descent tuner's cache, as torch gives them (where it tunes on from the chosen candidate)."""
    reset = getattr(autotuner, "reset_to_zero_args", None)
    if callable(reset):
        reset(*args, **kwargs)
    remember = getattr(getattr(autotuner, "coordesc_tuner", None), "cache_benchmark_result", None)
    if callable(remember):
        for launcher, ms in timings.items():
            remember(launcher.config, ms)


_installed: Keeper | None = None
_install_lock = threading.Lock()


def install(folder: Path) -> bool:
    """Wrap torch's autotuner with the timings kept in `folder` (once a process: a later call changes nothing);
    whether it is on."""
    global _installed
    try:
        from torch._inductor.runtime import triton_heuristics
    except ImportError:   # a torch without Inductor
        return False
    autotuner = getattr(triton_heuristics, "CachingAutotuner", None)
    original = getattr(autotuner, "benchmark_all_configs", None)
    if autotuner is None or not callable(original):
        return False
    with _install_lock:
        if _installed is None:
            _installed = Keeper(folder, device_key())
            autotuner.benchmark_all_configs = _installed.wrap(original)
    return True


def report() -> dict:
    """For the compile event: kernels whose kept timings were used, timed (none kept), damaged, unkeyed (torch's
    own), unwritten, and the seconds spent; {} when it is off."""
    return _installed.report() if _installed is not None else {}


def device_key() -> str:
    """The GPU's name with torch's, CUDA's and Triton's versions: timings from other hardware or another compiler
    are not reused."""
    import torch
    try:
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no-gpu"
    except RuntimeError:
        name = "unknown"
    try:
        triton_version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton_version = "none"
    return f"{name}|torch {torch.__version__}|cuda {torch.version.cuda}|triton {triton_version}"


def _read(path: Path, labels: list[str]):
    """The timings kept at `path`, one number for each of `labels`; None if none are kept; False if the file is
    damaged or kept for other candidates."""
    from runner.precompile import read_kept
    payload = read_kept(path)
    if not isinstance(payload, bytes):   # none kept (None), or damaged (False)
        return payload
    try:
        kept = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return False
    if not isinstance(kept, dict) or sorted(kept) != sorted(labels):
        return False
    if not all(_is_number(kept[label]) for label in labels):
        return False
    return {label: float(kept[label]) for label in labels}


def _write(path: Path, timings: dict) -> bool:
    """Keep `timings` ({label: ms}); False when they are not all numbers (nothing is kept) or the file cannot be
    written (a full or read-only disk: this start runs all the same, the next times again)."""
    from runner.precompile import keep
    if not all(_is_number(ms) and not math.isnan(ms) for ms in timings.values()):
        return False
    return keep(path, json.dumps(timings, sort_keys=True).encode())


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
