"""The resume's checkpoint check, started by the supervisor as it launches the workers (no torch here).

Before a resume, rank 0 checks the newest checkpoint: every file's CRC-32 against the manifest, 30.8 GB read
for the SDXL fine-tune's (2.1-2.8 s from the H200 host's page cache, more from a disk). Rank 0 starts it once
its process group is up, 2-6 s after `runner execute` (torchrun, the imports): with workers forked after
the imports, the start then waited 2.2 s for it at the agreement on the step. The supervisor starts the same
check as it launches torchrun, in a thread, and writes its verdicts into a file of the run folder that the
environment names to the workers (COSTSIM_RESUME_CHECK). Rank 0 reads it once the check has ended and takes
a verdict where the manifest it was made on is still the one on the disk (same inode, size and
modification time: a manifest is only ever replaced whole); anything else rank 0 checks itself.

With an object store (`--checkpoint-dir s3://...`), the same thread then fetches the store's newest checkpoint
where it is newer than the node's sound one, into memory (`prefetch`): rank 0 fetched it itself once its process
was up, about 6 s after `runner execute` on the H200, and its fetch held the interpreter's lock against the
build beside it. Rank 0 takes the fetched copy where it is still as the verdicts say; no room in memory or a
damaged copy it fetches or skips itself, as before (a damaged step once); a store that did not answer it takes
at the supervisor's word where the node has a checkpoint of its own, and asks again where it has none.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from runner import layout
from runner.checkpoint_manifest import MANIFEST, verify
from runner.diskspace import no_room_in_memory

ENV = "COSTSIM_RESUME_CHECK"   # the verdicts' file
PREFIX = ".resume-check-"      # its name in the run folder: PREFIX<random>.json
# COSTSIM_S3_PREFETCH=0: the supervisor checks the node's checkpoints but leaves a newer one in the store to rank 0
# (its fetch then begins with the worker, after torchrun's start and the imports: what scripts/gpu_sdxl_new_node.sh
# compares)
PREFETCH = os.environ.get("COSTSIM_S3_PREFETCH", "1") != "0"
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

    def __init__(self, root: Path | None, run_dir: Path, on_done: Callable[[dict], None] | None = None, *,
                 store=None, memory: Path | None = None):
        self.path = Path(run_dir) / f"{PREFIX}{uuid.uuid4().hex[:12]}.json"
        self.on_done = on_done
        self.store, self.memory = store, memory   # an S3Store and the node's memory folder: prefetch there
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
            if self.store is not None and self.memory is not None:
                local = next((v["step"] for v in doc["verdicts"] if v["problem"] is None), 0)
                try:
                    doc["fetched"] = prefetch(self.store, local, self.memory)
                except Exception as exc:   # the verdicts stand; rank 0 meets the store's problem itself
                    from runner.store import StoreUnavailable
                    down = isinstance(exc, StoreUnavailable)   # rank 0 then does not ask again beside a local copy
                    doc["fetched"] = {"error": str(exc) if down else f"{type(exc).__name__}: {exc}",
                                      "unavailable": down}
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

    def close(self, *, wait: bool = True) -> None:
        """The thread waited for and the verdicts' file removed; wait=False (a notice: the node is going)
        leaves a fetch under way to the process's exit, and the file to the next start (remove_stale)."""
        if self._thread is not None and wait:
            self._thread.join()
            self.path.unlink(missing_ok=True)


def prefetch(store, local: int, memory: Path) -> dict | None:
    """The store's newest checkpoint, where it is newer than step `local`, into the memory folder (emptied
    first: what an earlier life fetched and did not load), in this process (the supervisor's, idle beside
    torchrun): {step, folder, stamp, duration_s, bytes, location, threads}; {step, problem} where it failed
    its check (nothing kept); {step, skipped} where the memory has no room for it (rank 0 fetches it to the
    disk); None where the store has nothing newer. The store's errors propagate (rank 0 meets them again)."""
    from runner.store import FETCH_THREADS
    newer = [s for s in store.steps() if s > local]
    if not newer:
        return None
    step = newer[0]
    manifest, _ = store.get_json(f"step-{step}/{MANIFEST}")
    try:
        size = sum(int(entry["size"]) for entry in (manifest or {})["files"].values())
    except (KeyError, TypeError, ValueError, AttributeError):
        return {"step": step, "problem": "its manifest in the store is not readable"}
    shutil.rmtree(memory, ignore_errors=True)
    # the worker's own rule (Checkpointer._fetch_target), with room for an async job's staging buffers
    if (reason := no_room_in_memory(memory.parent, size, 2)) is not None:
        return {"step": step, "skipped": f"no room in memory: {reason}"}
    memory.mkdir(parents=True, exist_ok=True)
    partial, final = layout.partial_folder(memory, step), layout.step_folder(memory, step)
    started = time.perf_counter()
    try:
        problem = store.fetch(step, partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if problem is not None:
        shutil.rmtree(partial, ignore_errors=True)
        return {"step": step, "problem": problem}
    os.rename(partial, final)
    return {"step": step, "folder": str(final), "stamp": stamp(final),
            "duration_s": round(time.perf_counter() - started, 3),
            "bytes": layout.folder_bytes(final), "location": store.url,
            "threads": FETCH_THREADS}


class Verdicts:
    """The supervisor's verdicts as rank 0 reads them (`wait`): problem(step, folder) is None (sound), a
    problem, or UNKNOWN (not checked as the folder is now: rank 0 checks it)."""

    def __init__(self, root: Path, doc: dict | None):
        same_root = isinstance(doc, dict) and doc.get("root") == str(Path(root).resolve())
        self.by_step = {v["step"]: v for v in doc.get("verdicts", [])} if isinstance(doc, dict) and same_root else {}
        fetched = doc.get("fetched") if isinstance(doc, dict) and same_root else None
        self.fetched: dict = fetched if isinstance(fetched, dict) else {}

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

    def fetched_step(self, memory: Path | None) -> int | None:
        """The step the supervisor fetched into `memory`, where its copy is there as it was fetched; else None."""
        step, folder = self.fetched.get("step"), self.fetched.get("folder")
        if memory is None or not isinstance(step, int) or self.fetched.get("stamp") is None:
            return None
        if folder != str(layout.step_folder(memory, step)) or stamp(Path(folder)) != self.fetched["stamp"]:
            return None
        return step

    def problem(self, step: int, folder: Path):
        verdict = self.by_step.get(step)
        if not isinstance(verdict, dict) or verdict.get("stamp") is None or verdict["stamp"] != stamp(folder):
            return UNKNOWN
        return verdict["problem"]
