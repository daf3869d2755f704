"""The modules a start's first step imports, imported beside the checkpoint's load instead.

The first step of a compiled model in a new process imports what torch imports lazily: Inductor's kernel
templates (their Jinja sources compiled at import), the quantisation passes that define custom ops, the
symbolic-shape machinery: on the H200, imports were about 2 s of the 7.4 s the first step after a resume
took beyond a steady one under the profiler (`scripts/profile_diff.py` over `COSTSIM_PROFILE_FIRST_STEP`'s
dumps, data/measurements/2026-12-04-h200-first-step). Which modules they are depends on the torch version and the
model, so they are recorded, not listed here: after the first step of a resumed start that imported them
itself (no prewarm ran) and compiled nothing (every AOTAutograd and FX-graph cache lookup hit), rank 0 writes
the modules it imported to IMPORTS_FILE in the run's compile cache (RUN/compile-cache, which
`--share-compile-cache` carries to the job's next node). A step that compiles (a fresh start's) imports far
more than a start from warm caches needs, so it records nothing. A later start
imports the list on a thread while the checkpoint is read (its reads and copies leave the interpreter free),
and the first step waits for that thread: two threads importing at once can meet in a circular import, so
the step's own tracing never runs beside it.

The file holds module names only, each checked against a dotted-name pattern; importing one runs that
installed module's own code, as the first step would have. (Whoever can write the compile cache can already
put code in the job: runner.compile_share.) `COSTSIM_PREWARM=0` turns it off.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib.machinery import PathFinder
from pathlib import Path

IMPORTS_FILE = "first-step-imports.txt"
PREWARM_ENV = "COSTSIM_PREWARM"
MAX_MODULES = 20_000   # a torch install has about 5,000 modules; a file longer than this is not ours
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def enabled(env=os.environ) -> bool:
    return env.get(PREWARM_ENV, "1") != "0"


def imports_file(env=os.environ) -> Path | None:
    """IMPORTS_FILE in the compile cache the workers use (TORCHINDUCTOR_CACHE_DIR), None without one."""
    root = env.get("TORCHINDUCTOR_CACHE_DIR")
    return Path(root) / IMPORTS_FILE if root else None


def read_names(path: Path) -> list[str]:
    """The file's module names; lines that are not dotted names are passed over. A missing or unreadable file
    is an empty list (the first start of a run has none)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in (raw.strip() for raw in lines[:MAX_MODULES]) if _NAME.fullmatch(line)]


def record(path: Path, before: set[str]) -> int:
    """Writes the modules imported since `before` (a snapshot of sys.modules' names) to `path`, atomically;
    the number of names written."""
    # in the order they were imported (sys.modules keeps it): some of torch's modules import only after others
    new = [name for name in list(sys.modules) if name not in before and _NAME.fullmatch(name)
           and not name.startswith("__")]
    findable: dict[str, bool] = {}

    def importable(name: str) -> bool:
        # compiled kernels are executed from the compile cache into modules of hashed names (some inside
        # torch's own packages) that no import system made: without a spec, they cannot be imported by name
        if getattr(sys.modules.get(name), "__spec__", None) is None:
            return False
        top = name.partition(".")[0]
        if top not in findable:   # on the import path (find_spec would answer from sys.modules: Triton's
            try:                  # cuda_utils is loaded from its cache folder under a top-level name)
                findable[top] = top in sys.builtin_module_names or PathFinder.find_spec(top) is not None
            except (ImportError, ValueError):
                findable[top] = False
        return findable[top]
    names = [name for name in new if importable(name)]
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
    os.replace(temporary, path)
    return len(names)


@dataclass
class Prewarm:
    """Imports names on a daemon thread; `wait()` before the first step; `report()` says what it did (for the
    telemetry, from the main thread)."""
    names: list[str]
    imported: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    waited_s: float = 0.0   # how long the first step waited for it
    _done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Prewarm:
        threading.Thread(target=self._run, name="prewarm-imports", daemon=True).start()
        return self

    def _run(self) -> None:
        started = time.monotonic()
        try:
            for name in self.names:
                if name in sys.modules:
                    continue
                try:
                    importlib.import_module(name)
                    self.imported += 1
                except Exception:   # noqa: BLE001 - a module of another version or platform; the step imports what it needs
                    self.failed.append(name)
        finally:
            self.seconds = time.monotonic() - started
            self._done.set()

    def wait(self) -> float:
        """Blocks until the imports are done (before the first step: see the module's note); the seconds
        waited."""
        started = time.monotonic()
        self._done.wait()
        self.waited_s = time.monotonic() - started
        return self.waited_s

    def report(self) -> dict:
        return {"modules": len(self.names), "imported": self.imported, "failed": len(self.failed),
                "failed_examples": self.failed[:5], "seconds": round(self.seconds, 3),
                "waited_s": round(self.waited_s, 3)}
