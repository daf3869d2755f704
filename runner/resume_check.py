"""The resume's checkpoint check, started by the supervisor as it launches the workers (no torch here).

Before a resume, rank 0 checks the newest checkpoint: every file's CRC-32 against the manifest, 30.8 GB read
for the SDXL fine-tune's (2.1-2.8 s from the H200 host's page cache, more from a disk). Rank 0 starts it once
its process group is up, 2-6 s after `runner execute` (torchrun, the imports): with workers forked after
the imports, the start then waited 2.2 s for it at the agreement on the step. The supervisor starts the same
check as it launches torchrun, in a thread, and writes its verdicts into a file of the run folder that the
environment names to the workers (COSTSIM_RESUME_CHECK). Rank 0 reads it once the check has ended and takes
a verdict where the manifest it was made on is still the one on the disk (same inode, size and
modification time: a manifest is only ever replaced whole); anything else rank 0 checks itself.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from runner import layout
from runner.checkpoint_manifest import MANIFEST, verify

ENV = "COSTSIM_RESUME_CHECK"   # the verdicts' file
PREFIX = ".resume-check-"      # its name in the run folder: PREFIX<random>.json
UNKNOWN = object()   # Verdicts.problem's answer for a checkpoint the supervisor did not check as it is now


def stamp(folder: Path) -> list[int] | None:
    """What identifies the manifest of a checkpoint folder: its inode, size and modification time (ns)."""
    try:
        st = (Path(folder) / MANIFEST).stat()
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def newest_sound(root: Path) -> list[dict]:
    """The complete checkpoints under `root`, newest first, each verified until one is sound: [{step, stamp,
    problem (None: sound)}] (what rank 0's own check would find, in its order)."""
    verdicts = []
    for step in layout.saved_steps(root):
        folder = layout.step_folder(root, step)
        before = stamp(folder)
        problem = verify(folder)
        if stamp(folder) != before:   # replaced while it was read: say nothing of it
            break
        verdicts.append({"step": step, "stamp": before, "problem": problem})
        if problem is None:
            break
    return verdicts


def remove_stale(run_dir: Path) -> None:
    """Verdicts' files a runner killed outright left behind (one runner holds a run folder at a time: none is
    in use when the next starts)."""
    for path in Path(run_dir).glob(PREFIX + "*.json"):
        path.unlink(missing_ok=True)


class Precheck:
    """The supervisor's check of the checkpoints under `root` for one launch, in a thread. The verdicts' file
    is made and locked (flock) before the launch, written while locked, and unlocked when the check ends
    however it ends (the kernel unlocks it if the supervisor dies): rank 0 reads it once it can lock it
    itself, and never waits for a check that is over. `env`: the variable for the workers ({} where no file
    could be made, or `root` is None: rank 0 then checks for itself); `on_done(doc)` is told the verdicts
    after the unlock; `close()` waits for the thread and removes the file."""

    def __init__(self, root: Path | None, run_dir: Path, on_done: Callable[[dict], None] | None = None):
        self.path = Path(run_dir) / f"{PREFIX}{uuid.uuid4().hex[:12]}.json"
        self.on_done = on_done
        self.env: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        if root is None:   # nothing to check here
            return
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError:   # rank 0 checks for itself
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.env = {ENV: str(self.path)}
        self._thread = threading.Thread(target=self._run, args=(Path(root), fd), name="resume-check", daemon=True)
        self._thread.start()

    def _run(self, root: Path, fd: int) -> None:
        started = time.perf_counter()
        doc: dict = {}
        try:
            doc = {"root": str(root.resolve()), "verdicts": newest_sound(root)}
        except Exception as exc:   # rank 0 then checks for itself, and meets the problem there
            doc = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            doc["duration_s"] = round(time.perf_counter() - started, 3)
            try:
                os.write(fd, json.dumps(doc).encode())
            except OSError:   # a full disk: a short or empty file, which rank 0 reads as no verdicts
                pass
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        if self.on_done is not None:
            self.on_done(doc)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self.path.unlink(missing_ok=True)


class Verdicts:
    """The supervisor's verdicts as rank 0 reads them (`wait`): problem(step, folder) is None (sound), a
    problem, or UNKNOWN (not checked as the folder is now: rank 0 checks it)."""

    def __init__(self, root: Path, doc: dict | None):
        same_root = isinstance(doc, dict) and doc.get("root") == str(Path(root).resolve())
        self.by_step = {v["step"]: v for v in doc.get("verdicts", [])} if isinstance(doc, dict) and same_root else {}

    @classmethod
    def wait(cls, root: Path, env=os.environ) -> Verdicts:
        """The verdicts in the file the environment names, once the supervisor's check has ended; none
        where there is no such file or it does not hold them whole."""
        path = env.get(ENV)
        if not path:
            return cls(root, None)
        try:
            with open(path, "rb") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_SH)   # the check has ended once the supervisor unlocks
                doc = json.loads(handle.read())
        except (OSError, ValueError):
            return cls(root, None)
        return cls(root, doc)

    def problem(self, step: int, folder: Path):
        verdict = self.by_step.get(step)
        if not isinstance(verdict, dict) or verdict.get("stamp") is None or verdict["stamp"] != stamp(folder):
            return UNKNOWN
        return verdict["problem"]
