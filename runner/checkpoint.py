"""Checkpoints: `step-N/` folders written with torch.distributed.checkpoint, atomically, verified.

- Every rank writes its share (runner.ownership divides the large replicated tensors among the ranks,
  DCP de-duplicates the small ones) into a hidden
  temporary folder; rank 0 then records each file's size and CRC-32 in `manifest.json`, fsyncs and
  renames the folder to `step-N/`. A step exists only once that rename happened: a save cut short
  leaves a temporary folder that is never loaded (and is cleaned at the next start).
- Async mode: the training stall is the staging copy to host memory (runner.staging: buffers
  allocated once, in the background); a background thread writes that copy with DCP, each tensor as
  soon as it has been copied (streaming, COSTSIM_ASYNC_STAGING), and the next save waits for the
  previous one. A blocking save (the spot notice's, the final one) also goes through those buffers
  once they are allocated: each tensor copied as its writer reaches it (pipelined), DCP's writer
  threads write from host memory, instead of DCP copying each tensor off the GPU as it writes it
  (SDXL's 30.8 GB on one H200: 21.6 s against 38.3 s, the disk's raw bound 17.9 s;
  data/measurements/2026-12-01-h200-save).
- Each rank stages, writes and reads only its share of the replicated state (runner.ownership); after
  a load each large tensor is broadcast from the rank that read it. The files are read by a pool of
  threads (runner.checkpoint_reader).
- Load: rank 0 picks the newest step whose files match their manifest, skipping (and reporting)
  corrupt or partial ones (runner.checkpoint_manifest); every rank loads its share of it. Checksums are per 64 MiB chunk,
  computed by a pool of threads (zlib releases the GIL), and rank 0 starts checking as soon as the worker starts, so
  that the check overlaps building the model instead of adding to the restart. The DCP metadata
  pickle is read with an unpickler that admits only DCP's own metadata classes; tensors and every
  other entry with `weights_only=True` (DCP's own planner unpickles non-tensor entries with
  `weights_only=False`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultSavePlanner, FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from costsim.contract.jsonfiles import write_atomic
from runner import layout, ownership, resume_check
from runner.checkpoint_manifest import (
    CHECK_THREADS,
    CHUNK_BYTES,
    CORES,
    MANIFEST,
    FollowingStream,
    file_checksums,
    fsync_dir,
    resolved,
    verify,
)
from runner.checkpoint_reader import SafeFileSystemReader, SafeLoadPlanner
from runner.diskspace import DiskFullError, free_bytes, gb, is_disk_full, no_room_in_memory, refuse
from runner.speed import RuntimeConfigError
from runner.staging import HostStager
from runner.state import PRIVATE_PREFIX
from runner.store import FETCH_THREADS, S3Store, StoreUnavailable


class SharedStorageError(RuntimeError):
    """A node cannot see the checkpoint folder that rank 0 writes to."""


WRITE_THREADS = 4      # files written in parallel per rank
# The manifest's CRCs: computed while the checkpoint is written (FollowingFileSystem) or read back after it.
# COSTSIM_CRC_WHILE_WRITING=blocking (the default): while writing for the saves training waits for (a notice's,
# the final one), read back after for the async writes beside training; =1 while writing for every save; =0
# read back after for every save. On the H200 a blocking save of SDXL's 30.8 GB took 18.82 and 18.98 s
# while writing against 20.56 and 19.78 s read back after (one process, in the order A B B A), and a notice's
# save in a real life 19.10 s against 21.10 s (data/measurements/2026-12-03-h200-notice-abandon); beside
# training the async write was slower while writing (27.3 s against 15.8 s, other machines, 2026-12-03-h200-commit).
CRC_MODES = ("0", "1", "blocking")
STAGING_MODES = ("pipelined", "first")
# An async save's staging: "streaming" (its writer threads write each tensor as soon as it is copied, while the
# rest is still being copied: runner.staging.StreamingStage) or "first" (the whole copy, then the write, as before
# 2026-12-03's afternoon). COSTSIM_ASYNC_STAGING chooses (scripts/bench_checkpoint.py --async-compare times both).
ASYNC_STAGING_MODES = ("streaming", "first")
CRC_WHILE_WRITING = os.environ.get("COSTSIM_CRC_WHILE_WRITING", "blocking")
ASYNC_STAGING = os.environ.get("COSTSIM_ASYNC_STAGING", "streaming")
# COSTSIM_REMOVE_AHEAD=0: the checkpoints a save must remove for room go at that save, not ahead of it
# (Checkpointer.make_room_ahead; kept to measure the two side by side)
REMOVE_AHEAD = os.environ.get("COSTSIM_REMOVE_AHEAD", "1") != "0"
AHEAD, LEFTOVER = "room for the next checkpoint, made ahead", "left half removed by an earlier life"   # the reasons
STORE_BACKOFF_S, STORE_BACKOFF_MAX_S = 15.0, 300.0   # an object store that dropped out: when to try it again


class FollowingFileSystem(FileSystem):
    """DCP's local file system, with each file's chunk CRC-32s computed by a pool of threads while the
    writer threads are still writing it (checkpoint_manifest.FollowingStream), so that the commit need not
    read the whole checkpoint back after the write (1.7-2.3 s of SDXL's 30.8 GB on the H200 host); when,
    CRC_WHILE_WRITING says. `take(folder)` hands over the sums of what was written there."""

    def __init__(self) -> None:
        super().__init__()
        self._sums: dict[Path, tuple[list | None, int]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=min(CHECK_THREADS, os.cpu_count() or 1),
                                        thread_name_prefix="checkpoint-crc")

    @contextlib.contextmanager
    def create_stream(self, path, mode: str):
        if "w" not in mode:
            with super().create_stream(path, mode) as reading:
                yield reading
            return
        path = Path(path)

        def done(sums, size: int) -> None:
            with self._lock:
                self._sums[path] = (sums, size)

        with path.open(mode) as raw:
            stream = FollowingStream(raw, path, self._pool, done)
            try:
                yield stream
            except BaseException:
                stream.distrust()   # a write that failed: nothing of it is trusted
                raise
            finally:
                stream.close()

    def rename(self, path, new_path) -> None:   # DCP writes .metadata under a temporary name, then renames it
        super().rename(path, new_path)
        with self._lock:
            if Path(path) in self._sums:
                sums, size = self._sums.pop(Path(path))
                self._sums[Path(new_path)] = (None, size)   # its chunks were read under the old name: read again

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    def take(self, folder: Path) -> dict[str, tuple[list[int] | None, int]]:
        """The CRCs of the files written under `folder` ({name: (CRCs or None, bytes)}), forgotten here."""
        with self._lock:
            mine = {p: v for p, v in self._sums.items() if p.parent == folder}
            for p in mine:
                del self._sums[p]
        return {p.name: (resolved(sums), size) for p, (sums, size) in mine.items()}


class Checkpointer:
    """Save and load training state under `root`; rank 0 owns the folder's bookkeeping."""

    def __init__(self, root: Path, *, keep: int, async_mode: bool, rank: int,
                 on_event: Callable[..., None], warn: Callable[[str], None], store: S3Store | None = None,
                 estimate_bytes: int = 0, run_dir: Path | None = None, remove_ahead: bool = REMOVE_AHEAD):
        self.root, self.keep, self.async_mode, self.rank = Path(root), max(keep, 1), async_mode, rank
        self.remove_ahead = remove_ahead
        # With a store the local folder is a cache of the newest complete checkpoint; `keep` is the store's.
        self.store, self.local_keep = store, 1 if store is not None else max(keep, 1)
        self.estimate_bytes = int(estimate_bytes)   # a checkpoint's size until one is written (the plan's)
        self.run_dir = run_dir   # with a store, its telemetry goes up beside each checkpoint
        self.world_size = dist.get_world_size() if dist.is_initialized() else 1
        self.on_event, self.warn = on_event, warn
        self._worker: threading.Thread | None = None
        self._metadata_cache: tuple[tuple, object] | None = None   # (folder and its metadata file's stat, metadata)
        self._writing: tuple[int, float] | None = None   # the async write in flight: (step, its perf_counter start)
        self._hurried = False   # training waits for the write in flight: its commit reads back on every core
        self._error: BaseException | None = None
        # what this process's saves took: a blocking save's whole duration, an async save's write
        self.measured_s: dict[str, float] = {}
        self._store_failures, self._store_retry_at = 0, 0.0   # consecutive failed uploads; no try before then
        # One writer for every save (DCP resets it to each checkpoint_id); in async mode the state is
        # first copied into host buffers allocated after the first step and reused after.
        self._writer = FileSystemWriter(str(self.root), thread_count=WRITE_THREADS)
        self._crcs: FollowingFileSystem | None = None
        self.set_crc_mode(CRC_WHILE_WRITING)
        self._stager = HostStager() if async_mode else None
        self._staging = "pipelined"   # a blocking save's staging (set_staging)
        self.set_async_staging(ASYNC_STAGING)
        # DCP's collectives get their own gloo group, so the async writer never shares one with training.
        self._group = dist.new_group(backend="gloo") if dist.is_initialized() else None
        self._check_shared()
        self._sound: set[int] = set()   # local steps known intact: verified here, or written by this process
        self._remover: threading.Thread | None = None   # rank 0: removing ahead what a save would (make_room_ahead)
        self._leftovers: list[tuple[int | None, int, Path, str]] = []   # `.step-N.removing` found at the start
        self._room_lock = threading.Lock()   # the training thread and the async writer both start removals ahead
        # a checkpoint fetched from the store goes into memory when every rank is on this host (they all read it)
        on_one_host = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size)) == self.world_size
        self._memory = layout.memory_folder(self.root) if store is not None and on_one_host else None
        self._choice: int | BaseException | None = None
        self.checked_by: list[str] = []   # who checked each local checkpoint rank 0 looked at, newest first
        self._chooser: threading.Thread | None = None
        if rank == 0:
            self._chooser = threading.Thread(target=self._choose_in_background, name="checkpoint-check", daemon=True)
            self._chooser.start()

    def _choose_in_background(self) -> None:
        try:
            self._choice = self.choose()
        except BaseException as exc:   # re-raised in agree_on_step
            self._choice = exc

    def _check_shared(self) -> None:
        """Every rank must see the folder rank 0 writes: on several nodes it has to be shared storage."""
        if self._group is None or dist.get_world_size() == 1:
            return
        token = self.root / ".shared-check"
        nonce = torch.randint(0, 2**62, (1,), dtype=torch.int64) if self.rank == 0 else torch.zeros(1, dtype=torch.int64)
        dist.broadcast(nonce, src=0, group=self._group)
        if self.rank == 0:
            write_atomic(token, str(int(nonce.item())))
        dist.barrier(group=self._group)
        try:
            seen = token.read_text().strip() == str(int(nonce.item()))
        except OSError:
            seen = False
        blind = torch.tensor([0 if seen else self.rank + 1], dtype=torch.int64)
        dist.all_reduce(blind, op=dist.ReduceOp.MAX, group=self._group)
        if int(blind.item()):
            import socket
            raise SharedStorageError(f"rank {int(blind.item()) - 1} cannot see {self.root} written by rank 0 "
                                     f"(this host: {socket.gethostname()}): the checkpoint folder must be shared "
                                     "storage (NFS, a mounted bucket) or the same path on one machine")

    # -- discovery ------------------------------------------------------------------------------
    def steps(self) -> list[int]:
        """Step numbers of the finished checkpoint folders, newest first."""
        return layout.saved_steps(self.root)

    def folder(self, step: int) -> Path:
        """Checkpoint `step`'s folder: the local one, or its copy in memory while a fetched one waits to load."""
        if self._memory is not None and (held := layout.step_folder(self._memory, step)).is_dir():
            return held
        return layout.step_folder(self.root, step)

    def _drop_memory(self, *, background: bool = False, keep: int | None = None) -> None:
        """The fetched copies in memory go (rank 0); in the background after a load: freeing 30.8 GB of a
        tmpfs took about 3 s, before the first step. `keep`: all but that step's copy (the supervisor's fetch)."""
        if self.rank == 0 and self._memory is not None and self._memory.exists():
            if keep is not None:
                for path in self._memory.iterdir():
                    if path.name != layout.step_folder(self._memory, keep).name:
                        shutil.rmtree(path, ignore_errors=True)
            elif background:
                threading.Thread(target=shutil.rmtree, args=(self._memory,), kwargs={"ignore_errors": True},
                                 name="checkpoint-drop", daemon=True).start()
            else:
                shutil.rmtree(self._memory, ignore_errors=True)

    def choose(self) -> int:
        """Newest valid step (0 when none), from the local folder or, newer, from the store (fetched into
        the local folder or memory first); skipped ones are reported. Rank 0 only."""
        # the supervisor's check, begun at the launch; with a store it may have fetched into memory too
        checked = resume_check.Verdicts.wait(self.root)
        fetched = checked.fetched_step(self._memory)
        self._drop_memory(keep=fetched)   # what an earlier life fetched and did not load
        for partial in layout.partial_folders(self.root):
            self.warn(f"removing partial checkpoint {partial.name} (a save that did not finish)")
            self.on_event("checkpoint_skipped", step=layout.partial_step_of(partial.name), reason="partial")
            shutil.rmtree(partial, ignore_errors=True)
        # removals an earlier life left unfinished: deleted with the removals ahead, or first thing at a save
        self._leftovers = [(layout.removing_step_of(p.name), layout.folder_bytes(p), p, LEFTOVER)
                           for p in layout.removing_folders(self.root)]
        local = 0
        for step in self.steps():
            problem = checked.problem(step, self.folder(step))
            self.checked_by.append("supervisor" if problem is not resume_check.UNKNOWN else "rank 0")
            if problem is resume_check.UNKNOWN:   # not checked there, or changed since
                problem = verify(self.folder(step))
            if problem is None:
                local = step
                self._sound.add(step)
                break
            self.warn(f"skipping checkpoint step-{step}: {problem}")
            self.on_event("checkpoint_skipped", step=step, reason=problem)
        if self.store is None:
            return local
        if fetched is not None and fetched > local:   # checked against its manifest as it arrived
            self._sound.add(fetched)
            self._drop_older(self.steps(), fetched)
            return fetched
        damaged = None   # the step the supervisor fetched and found damaged: not fetched again
        if (problem := checked.fetched.get("problem")) is not None:
            damaged = checked.fetched.get("step")
            self.warn(f"skipping checkpoint step-{damaged} of {self.store.url}: {problem}")
            self.on_event("checkpoint_skipped", step=damaged, reason=f"store: {problem}")
        try:
            if local and checked.fetched.get("unavailable"):   # the supervisor's listing failed moments ago
                raise StoreUnavailable(str(checked.fetched.get("error")))
            for step in (s for s in self.store.steps() if s > local and s != damaged):
                if self._fetch(step):
                    return step
        except StoreUnavailable as exc:
            if not local:   # starting over beside the store's checkpoints would train the job again from 0
                raise StoreUnavailable(f"{exc}; this node has no checkpoint of its own: not starting the job over "
                                       "from step 0; run again when the store answers") from None
            self.warn(f"{exc}: resuming from this node's checkpoint step-{local}")
            self.on_event("store_unavailable", op="resume", step=local, reason=str(exc))
        return local

    def _fetch(self, step: int) -> bool:
        """Checkpoint `step` from the store (S3Store.fetch: parallel ranged reads, each range checked against
        the manifest's CRC-32 as it arrives) into memory where it fits (a tmpfs folder, `_memory`; every rank
        reads it there, and it is dropped once loaded: the next save puts a copy on the disk again), else
        into a partial folder beside the local ones, renamed into place once intact. The older local copies
        go after that, never before: a damaged fetch leaves the local checkpoint as it was. A disk with no
        room for both keeps the local one (the fetch is dropped, said in a line)."""
        store = self.store
        assert store is not None
        started = time.perf_counter()
        into = self._fetch_target(step)
        partial = layout.partial_folder(into, step)
        try:
            problem = store.fetch(step, partial, apart=True)   # beside the start's build: a process of its own
        except StoreUnavailable:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        except OSError as exc:
            shutil.rmtree(partial, ignore_errors=True)
            if into != self.root and is_disk_full(exc):
                self.warn(f"no room in memory ({into.parent}) for checkpoint step-{step}: fetching it to the disk")
                self._memory = None
                return self._fetch(step)
            if not is_disk_full(exc, self.root, self.checkpoint_bytes()):
                raise
            kept = self.steps()
            self.warn(f"no room to fetch checkpoint step-{step} from {store.url} beside the local "
                      + (f"step-{kept[0]}: resuming from that" if kept else "folder"))
            self.on_event("checkpoint_skipped", step=step, reason="store: no room on this disk to fetch it")
            return False
        if problem is not None:
            self.warn(f"skipping checkpoint step-{step} of {store.url}: {problem}")
            self.on_event("checkpoint_skipped", step=step, reason=f"store: {problem}")
            shutil.rmtree(partial, ignore_errors=True)
            return False
        older = self.steps()
        final = layout.step_folder(into, step)
        shutil.rmtree(final, ignore_errors=True)   # a damaged copy of the same step, already skipped
        os.rename(partial, final)
        fsync_dir(into)
        self._sound.add(step)
        fetched_s = time.perf_counter() - started
        self._drop_older(older, step)
        self.on_event("checkpoint_fetch", step=step, duration_s=fetched_s, bytes=layout.folder_bytes(final),
                      location=store.url, into="memory" if into != self.root else "disk", threads=FETCH_THREADS)
        return True

    def _drop_older(self, older: list[int], step: int) -> None:
        """The verified newer checkpoint `step` is in place: the `older` local copies make room now."""
        for old in older:
            if old != step:
                shutil.rmtree(layout.step_folder(self.root, old), ignore_errors=True)

    def _fetch_target(self, step: int) -> Path:
        """Where a fetch of `step` goes: the memory folder when it is a tmpfs with room for the checkpoint and
        the node's memory has it to spare (beyond the host staging buffers, as large), else the local folder."""
        if self._memory is None:
            return self.root
        reason = no_room_in_memory(self._memory.parent, self.checkpoint_bytes(), 2 if self.async_mode else 1)
        if reason is not None:
            self.warn(f"fetching checkpoint step-{step} to the disk, not into memory: {reason} "
                      f"({layout.MEMORY_DIR_ENV} names another tmpfs)")
            return self.root
        self._memory.mkdir(parents=True, exist_ok=True)
        return self._memory

    # -- load -----------------------------------------------------------------------------------
    def has_entry(self, step: int, key: str) -> bool:
        """Whether checkpoint `step` holds the top-level entry `key` (its metadata names every
        entry; a job saved at another world size holds other ranks' private entries)."""
        entries = self._metadata(self.folder(step)).state_dict_metadata
        return any(name == key or name.startswith(f"{key}.") for name in entries)

    def _metadata(self, folder: Path):
        """The DCP metadata of the checkpoint in `folder`, read once for a resume's questions and its load
        (three reads of the same 2.5 MB pickle before), again only if its file changed since."""
        reader = SafeFileSystemReader(str(folder))
        info = os.stat(reader._get_metadata_path())
        key = (str(folder), info.st_ino, info.st_size, info.st_mtime_ns)
        if self._metadata_cache is None or self._metadata_cache[0] != key:
            self._metadata_cache = (key, reader.read_metadata())
        return self._metadata_cache[1]

    def agree_on_step(self) -> int:
        """Rank 0 chooses (the check started with the worker); every rank learns the choice."""
        chosen = 0
        if self.rank == 0:
            if self._chooser is not None:
                self._chooser.join()
            if isinstance(self._choice, BaseException):
                raise self._choice
            chosen = self._choice or 0
        choice = torch.tensor([chosen], dtype=torch.int64)
        if dist.is_initialized():
            dist.broadcast(choice, src=0, group=self._group)
        return int(choice.item())

    def load(self, step: int, state: dict, prepared: Callable[[], object] | None = None,
             sized_s: float | None = None, sized_optimizer_s: float | None = None) -> None:
        """Load `step` into `state` in place: each rank reads its share, then receives the others'.
        `prepared`: called once the read's remaining work holds the interpreter lock little
        (runner.checkpoint_reader), for work to run beside it; `sized_s`: the caller's making of `state`, and
        `sized_optimizer_s` its optimizer's part, for the record."""
        started = time.perf_counter()
        folder = self.folder(step)
        owned, mine = self._share(state)
        reader = SafeFileSystemReader(str(folder), metadata=self._metadata(folder), prepared=prepared)
        self._metadata_cache = None   # loaded: not asked again
        dcp.load(mine, storage_reader=reader, planner=SafeLoadPlanner(), process_group=self._group)
        ownership.merge(state, mine)
        read_s = time.perf_counter() - started
        if self.world_size > 1:
            ownership.broadcast(state, owned)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        sized = {name: round(value, 3) for name, value in (("sized_s", sized_s), ("sized_optimizer_s", sized_optimizer_s))
                 if value is not None}
        self.on_event("checkpoint_load", step=step, duration_s=time.perf_counter() - started, read_s=read_s,
                      **sized, **{k: round(v, 3) for k, v in reader.timings.items()},
                      bytes=layout.folder_bytes(folder), owned_bytes=ownership.owned_bytes(state, owned, self.rank))
        if self._memory is not None and folder.parent == self._memory:   # every rank has read it: memory back
            if self._group is not None and self.world_size > 1:
                dist.barrier(group=self._group)
            self._drop_memory(background=True)

    def _share(self, state: dict) -> tuple[dict, dict]:
        """Which rank owns each large replicated tensor, and this rank's view of `state`."""
        owned = ownership.owners(state, self.world_size, private=(PRIVATE_PREFIX,))
        return owned, ownership.view(state, owned, self.rank)

    # -- save -----------------------------------------------------------------------------------
    def save(self, step: int, state: dict, *, blocking: bool = False, reason: str = "interval",
             stage: bool = True) -> None:
        """Checkpoint `state` as step `step`; blocking (sync) or behind a staging stall (async). Room for
        it is made first (costsim `keep`: the oldest go, never the newest complete one), else DiskFullError.
        A blocking save writes from the host staging buffers when they are allocated (async mode) and
        `stage` is true; stage=False writes from the device tensors (the benchmark's baseline)."""
        self.wait(hurry=blocking)
        self._hurried = False
        self.make_room(self.checkpoint_bytes(), f"checkpoint step-{step}")
        tmp = layout.partial_folder(self.root, step)
        started = time.perf_counter()
        state = self._share(state)[1]
        staged = self._stager is not None and (not blocking or (stage and self._stager.ready()))
        follow = not (staged and not blocking)   # under "blocking": every save but an async write beside training
        if self._crc_mode == "blocking" and (self._crcs is not None) != follow:
            self.follow_crcs(follow)   # the same on every rank: each saves alike
        planner: DefaultSavePlanner | None = None
        stream = None
        if staged and blocking and self._staging == "pipelined":   # each tensor copied as its writer reaches it
            assert self._stager is not None
            planner = self._stager.planner(state)
        elif staged and not blocking and self._async_staging == "streaming":   # written as it is copied
            assert self._stager is not None
            stream = self._stager.streaming(state)
        if staged and stream is None and planner is None:
            assert self._stager is not None
            state = self._stager.stage(state)   # one copy into the host buffers
        # how much of the buffers the touching thread had faulted in when this save claimed them (the rest faults in
        # as the copy writes it: a save at a life's second step)
        prefaulted = self._stager.prefaulted() if staged and self._stager is not None else None
        if staged and not blocking:   # async mode: training goes on while a thread writes the copy
            if stream is not None:
                state, planner = stream.staged, stream.planner
            stall_s = time.perf_counter() - started
            stall = stream.stall_s if stream is not None else (lambda: stall_s)
            self._worker = threading.Thread(target=self._complete,
                                            args=(state, step, tmp, started, stall, reason, planner,
                                                  "streaming" if stream is not None else "first", prefaulted),
                                            name=f"checkpoint-{step}", daemon=True)
            self._writing = (step, started)
            self._worker.start()
            if stream is not None:
                try:
                    stream.fill(started)   # training waits for the copy, not for the write
                except BaseException:
                    self._worker.join()   # the writer fails with it (its error is this one): not left writing
                    self._worker = self._writing = self._error = None
                    raise
        else:
            try:
                dcp.save(state, checkpoint_id=str(tmp), storage_writer=self._writer, planner=planner,
                         process_group=self._group)
            except BaseException as exc:
                raise self._failed_save(exc, step, tmp) from exc
            stall_s = time.perf_counter() - started
            self._finish(step, tmp, started, stall_s, reason, staged=staged, staging=self._staging,
                         prefaulted=prefaulted)

    def in_flight(self) -> tuple[int, float] | None:
        """The async write under way: (its step, seconds it has run); None when none is."""
        if self._worker is None or not self._worker.is_alive() or self._writing is None:
            return None
        return self._writing[0], time.perf_counter() - self._writing[1]

    def set_write_threads(self, count: int) -> None:
        """How many files each rank writes in parallel (DCP's writer threads; WRITE_THREADS by default)."""
        self._writer.thread_count = max(1, int(count))

    def checkpoint_bytes(self) -> int:
        """What the next save will take: the newest complete checkpoint's size, else the plan's estimate."""
        newest = self.steps()
        return layout.folder_bytes(self.folder(newest[0])) if newest else self.estimate_bytes

    def make_room(self, needed: int, what: str, *, collective: bool = True) -> None:
        """Free space for `needed` bytes beside the newest intact checkpoint, removing older ones (oldest
        first) where that is enough; every rank learns the outcome (DiskFullError on all). Only what is
        older than a checkpoint known to be intact (verified, or written by this process) is removed.
        collective=False is for work that rank 0 does alone (the export): no other rank takes part."""
        ok = 1
        if self.rank == 0:
            self.wait_removals()   # what was being removed ahead frees its space first
            leftovers, self._leftovers = self._leftovers, []
            self._remove(leftovers)   # and what an earlier life left half removed, if nothing removed it ahead
        if self.rank == 0 and needed > 0:
            steps = self.steps()
            if free_bytes(self.root) < needed:
                steps = self._removable(steps)
            while free_bytes(self.root) < needed and len(steps) > 1:
                oldest = steps.pop()
                self.warn(f"removing checkpoint step-{oldest} to make room for {what} (the newest is kept)")
                started, size = time.perf_counter(), layout.folder_bytes(self.folder(oldest))
                shutil.rmtree(self.folder(oldest), ignore_errors=True)
                self.measured_s["remove"] = time.perf_counter() - started
                self.on_event("checkpoint_removed", step=oldest, duration_s=self.measured_s["remove"], bytes=size,
                              reason=f"room for {what}")
            ok = int(free_bytes(self.root) >= needed)
        flag = torch.tensor([ok], dtype=torch.int64)
        if collective and self._group is not None and self.world_size > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self._group)
        if not int(flag.item()):
            free = free_bytes(self.root)
            raise refuse(self.root, what, needed, free, "keep fewer checkpoints (plan.json checkpoint.keep), "
                         "or put them on a larger disk or an object store (runner execute --checkpoint-dir)")

    def make_room_ahead(self) -> None:
        """Rank 0: start removing now, on a thread, the checkpoints that the next save would have to remove to
        make room (the oldest, beside a newest one known intact), so that no save waits for them: deleting
        a 30.8 GB checkpoint took 6-10 s on the H200 hosts' disk, inside the save, a notice's too
        (data/measurements/2026-12-04-h200-remove-ahead). The same checkpoints go as at the save, only sooner:
        after a save has landed, or once a start's first step is done. Each is first renamed out of the
        checkpoints (`.step-N.removing`, one rename), so that no listing sees half of one; what a life left half
        removed goes first (or at the first save, when nothing is removed ahead)."""
        if self.rank != 0 or not self.remove_ahead:
            return
        with self._room_lock:
            if self._remover is None or not self._remover.is_alive():
                self._start_removals()

    def _start_removals(self) -> None:
        moved, self._leftovers = self._leftovers, []   # what an earlier life left half removed goes first
        steps = self.steps()
        victims: list[tuple[int, int]] = []
        if steps and steps[0] in self._sound:   # only beside a newest checkpoint known intact
            needed = self.checkpoint_bytes()
            free = free_bytes(self.root) + sum(size for _, size, _, _ in moved)
            for old in reversed(steps[1:]):   # the oldest first
                if free >= needed:
                    break
                size = layout.folder_bytes(self.folder(old))
                victims.append((old, size))
                free += size
            if free < needed:   # not enough even so: the save says so (make_room)
                victims = []
        for old, size in victims:
            target = layout.removing_folder(self.root, old)
            try:
                os.replace(self.folder(old), target)
            except OSError:   # in memory (a fetched copy on another filesystem), or gone: left to the save
                break
            self.warn(f"removing checkpoint step-{old} now to make room for the next one (the newest is kept)")
            moved.append((old, size, target, AHEAD))
        if moved:
            self._remover = threading.Thread(target=self._remove, args=(moved,), name="checkpoint-remove",
                                             daemon=True)
            self._remover.start()

    def _remove(self, moved: list[tuple[int | None, int, Path, str]]) -> None:
        for old, size, target, reason in moved:
            started = time.perf_counter()
            shutil.rmtree(target, ignore_errors=True)
            self.measured_s["remove"] = time.perf_counter() - started
            self.on_event("checkpoint_removed", step=old, duration_s=self.measured_s["remove"], bytes=size,
                          reason=reason)

    def wait_removals(self) -> None:
        """Block until the removals started ahead (make_room_ahead) are done."""
        with self._room_lock:
            if self._remover is not None:
                self._remover.join()
                self._remover = None

    def removals_before_next_save(self) -> int:
        """How many checkpoints a save started now would first remove to make room (after the write in
        flight, if any, has landed and taken its space): a notice's rule counts their removal."""
        size = self.checkpoint_bytes()
        in_flight = self.in_flight() is not None
        free = free_bytes(self.root) - (size if in_flight else 0)   # as if none of the write were on the disk yet
        steps = self.steps()
        removable = steps if in_flight else steps[1:]   # the newest stays: the one in flight once it lands
        count = 0
        if self._remover is not None and self._remover.is_alive():   # one being removed ahead: at most one more
            free += size
            count += 1
        if self._leftovers:   # an earlier life's half-removed ones: the save deletes them first
            free += sum(left for _, left, _, _ in self._leftovers)
            count += len(self._leftovers)
        for old in reversed(removable):   # the oldest go first
            if free >= size:
                break
            free += layout.folder_bytes(self.folder(old))
            count += 1
        return count

    def _removable(self, steps: list[int]) -> list[int]:
        """`steps` (newest first) from the newest intact one on: what may make room (all but its first)."""
        for index, step in enumerate(steps):
            if step not in self._sound:
                problem = verify(self.folder(step))
                if problem is not None:
                    self.warn(f"checkpoint step-{step} is damaged ({problem}): an older one is kept in its place")
                    continue
                self._sound.add(step)
            return steps[index:]
        return []

    def _failed_save(self, exc: BaseException, step: int, tmp: Path) -> BaseException:
        """A save that failed leaves nothing behind; out of space, it is a DiskFullError (not restarted) on
        every rank. DCP raises a failed save on all ranks (its collective shares the failure), so the ranks
        can agree here: a rank whose view is PyTorch's short write, checked after another rank had already
        removed its part and freed the space, used to raise the raw error beside the other's one line."""
        full = self._on_any_rank(is_disk_full(exc, self.root, self.checkpoint_bytes()))
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            newest = self.steps()
            kept = (f"the last complete checkpoint (step-{newest[0]}) is kept" if newest
                    else "no checkpoint is complete yet")
            return DiskFullError(
                f"{self.root}: not enough disk for checkpoint step-{step}: the disk filled while it was written "
                f"({gb(free_bytes(self.root))} free once it was removed; about {gb(self.checkpoint_bytes())} a "
                f"checkpoint was expected); {kept}; keep fewer, or use a larger disk or an object store "
                "(runner execute --checkpoint-dir)")
        return exc

    def _on_any_rank(self, flag: bool) -> bool:
        if self._group is None or self.world_size == 1:
            return flag
        shared = torch.tensor([int(flag)], dtype=torch.int64)
        dist.all_reduce(shared, op=dist.ReduceOp.MAX, group=self._group)
        return bool(shared.item())

    def prepare(self, state: dict) -> None:
        """Async mode: start allocating the host staging buffers now, off the training path."""
        if self._stager is not None:
            self._stager.prepare(self._share(state)[1])

    def wait_staging(self) -> None:
        """Async mode: block until the host staging buffers are allocated (benchmarks time this)."""
        if self._stager is not None:
            self._stager.wait_allocated()

    def _complete(self, staged, step, tmp, started, stall: Callable[[], float], reason, planner, staging,
                  prefaulted: float | None) -> None:
        try:
            dcp.save(staged, checkpoint_id=str(tmp), storage_writer=self._writer, planner=planner,
                     process_group=self._group)
            self._finish(step, tmp, started, stall(), reason, staged=True, staging=staging, prefaulted=prefaulted)
        except BaseException as exc:  # surfaced by wait() in the training thread
            self._error = self._failed_save(exc, step, tmp)

    def _finish(self, step: int, tmp: Path, started: float, stall_s: float, reason: str, *, staged: bool,
                staging: str, prefaulted: float | None = None) -> None:
        upload_s = commit_s = read_back = threads = None
        known = self._gather_sums(tmp)
        if self.rank == 0:
            committing = time.perf_counter()
            read_back, threads = self._commit(step, tmp, known)
            commit_s = time.perf_counter() - committing
            if self.store is not None:   # complete in the store only once its manifest is there (uploaded last)
                upload_s = self._upload(step, last=reason != "interval")
            self._prune()
            if reason == "interval" and not self._hurried:   # training goes on: room for the next save, made now
                self.make_room_ahead()
        duration_s = time.perf_counter() - started
        self.measured_s["save" if blocking_of(reason, self.async_mode) else "write"] = duration_s
        self.on_event("checkpoint_save", step=step, duration_s=duration_s, stall_s=stall_s,
                      bytes=layout.folder_bytes(self.folder(step)) if self.rank == 0 else None,
                      mode="sync" if blocking_of(reason, self.async_mode) else "async", reason=reason,
                      upload_s=upload_s, location=self.store.url if self.store is not None else None,
                      staged=staged, staging=staging if staged else None, commit_s=commit_s,
                      write_threads=self._writer.thread_count, commit_read_bytes=read_back,
                      commit_threads=threads if read_back else None,
                      prefaulted=None if prefaulted is None else round(prefaulted, 4))

    def set_staging(self, mode: str) -> None:
        """How a blocking save uses the staging buffers: "pipelined" (each tensor copied as its writer reaches
        it, the default) or "first" (the whole state copied, then written: as async saves do, and blocking
        ones did before 2026-12-03); scripts/bench_checkpoint.py compares the two."""
        if mode not in STAGING_MODES:
            raise ValueError(f"staging {mode!r}: allowed {', '.join(STAGING_MODES)}")
        self._staging = mode

    def set_async_staging(self, mode: str) -> None:
        """How an async save stages (ASYNC_STAGING_MODES, as COSTSIM_ASYNC_STAGING): "streaming" (written as it
        is copied, the default) or "first" (the whole copy, then the write)."""
        if mode not in ASYNC_STAGING_MODES:
            raise RuntimeConfigError(f"COSTSIM_ASYNC_STAGING={mode!r}: allowed {', '.join(ASYNC_STAGING_MODES)}")
        self._async_staging = mode

    def set_crc_mode(self, mode: str) -> None:
        """When the manifest's CRCs are computed while writing (CRC_MODES, as COSTSIM_CRC_WHILE_WRITING):
        "1" every save, "0" none (read back at the commit), "blocking" the saves training waits for."""
        if mode not in CRC_MODES:
            raise RuntimeConfigError(f"COSTSIM_CRC_WHILE_WRITING={mode!r}: allowed {', '.join(CRC_MODES)}")
        self._crc_mode = mode
        self.follow_crcs(mode == "1")

    def follow_crcs(self, on: bool) -> None:
        """The next saves' CRCs read back chunk by chunk while the writers write (on), or all after the
        write, at the commit (off); save() switches it per save under "blocking"."""
        if self._crcs is not None:
            self._crcs.close()
        self._crcs = FollowingFileSystem() if on else None
        self._writer.fs = self._crcs or FileSystem()   # DCP's writer opens every file through its `fs`

    def _gather_sums(self, tmp: Path) -> dict[str, tuple[list[int] | None, int]]:
        """Every rank's CRCs of the files it wrote into `tmp`, on rank 0 (others: {}). DCP's save
        raised on every rank or on none, so each rank that gets here takes part."""
        mine = self._crcs.take(tmp) if self._crcs is not None else {}
        if self._group is None or self.world_size == 1:
            return mine
        gathered: list[dict | None] = [None] * self.world_size if self.rank == 0 else []
        dist.gather_object(mine, gathered if self.rank == 0 else None, dst=0, group=self._group)
        known: dict[str, tuple[list[int] | None, int]] = {}
        for part in gathered:
            known.update(part or {})
        return known

    def _upload(self, step: int, *, last: bool) -> float | None:
        """Checkpoint `step` into the store, then the store's keep-k; its duration, or None when the store
        is out (the local copy is the newest then, and stays: the local cache always keeps its newest).
        A store that dropped out is tried again after a backoff (15 s, doubling to 5 min) at the next
        periodic save, and at once for a life's last save (the final one, a notice's)."""
        store = self.store
        assert store is not None
        if not last and time.monotonic() < self._store_retry_at:
            return None
        uploading = time.perf_counter()
        try:
            store.upload(self.folder(step), step)
            upload_s = time.perf_counter() - uploading
            removed = store.prune(self.keep)
        except StoreUnavailable as exc:
            self._store_failures += 1
            retry_s = min(STORE_BACKOFF_S * 2 ** (self._store_failures - 1), STORE_BACKOFF_MAX_S)
            self._store_retry_at = time.monotonic() + retry_s
            if last:
                self.warn(f"{exc}: checkpoint step-{step}, this life's last, is on this node only ({self.root})")
            elif self._store_failures == 1:
                self.warn(f"{exc}: training goes on, checkpoint step-{step} is on this node only; trying the store "
                          "again at later saves")
            self.on_event("store_unavailable", op="upload", step=step, reason=str(exc), retry_in_s=round(retry_s, 1),
                          failures=self._store_failures)
            return None
        if self._store_failures:
            self.warn(f"{store.url} answers again: checkpoint step-{step} uploaded after {self._store_failures} "
                      "failed attempt(s)")
            self._store_failures, self._store_retry_at = 0, 0.0
        for gone in removed:
            self.warn(f"removed checkpoint step-{gone} from {store.url} (keep {self.keep})")
        if self.run_dir is not None:   # the life so far, for the job's next node (contract.telemetry.read_job_events)
            try:
                store.upload_telemetry(self.run_dir)
            except StoreUnavailable as exc:
                self.warn(str(exc))
        return upload_s

    def _commit(self, step: int, tmp: Path, known: dict[str, tuple[list[int] | None, int]]) -> tuple[int, int]:
        """The manifest (each file's size and chunk CRCs: summed as written where known, else read back),
        then the rename that makes the step exist. Returns the bytes read back and the threads that read them."""
        paths = [p for p in sorted(tmp.iterdir()) if p.is_file()]
        sizes = {p: p.stat().st_size for p in paths}
        sums: dict[Path, list[int]] = {}
        for p in paths:
            summed, size = known.get(p.name, (None, -1))
            if summed is not None and size == sizes[p]:
                sums[p] = summed
        unknown = [p for p in paths if p not in sums]
        threads = CORES if self._hurried else min(CHECK_THREADS, CORES)
        sums.update(file_checksums(unknown, threads=threads))
        files = {p.name: {"size": sizes[p], "crc32_chunks": sums[p]} for p in paths}
        write_atomic(tmp / MANIFEST, json.dumps({"step": step, "chunk_bytes": CHUNK_BYTES, "files": files,
                                                 "created": time.time()}, indent=1))
        fsync_dir(tmp)
        final = self.folder(step)
        if final.exists():   # a damaged earlier save of the same step: replace it
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(self.root)
        self._sound.add(step)
        return sum(sizes[p] for p in unknown), threads

    def _prune(self) -> None:
        """keep-k, counted from the newest intact checkpoint (the one just written)."""
        for step in self._removable(self.steps())[self.local_keep:]:
            shutil.rmtree(self.folder(step), ignore_errors=True)

    def hurry(self) -> None:
        """Training has stopped to wait for the async write in flight (a notice, a blocking save): its commit,
        if it has not begun, reads back the CRCs it did not sum on every core (CORES) rather than on the
        CHECK_THREADS it takes beside training."""
        self._hurried = True

    def wait(self, *, hurry: bool = False) -> None:
        """Block until the previous async save is complete (`hurry`: see hurry()); re-raise its error if it
        failed."""
        if hurry and self._worker is not None:
            self.hurry()
        if self._worker is not None:
            self._worker.join()
            self._worker = None
            self._writing = None
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, DiskFullError):
                raise error
            raise RuntimeError(f"asynchronous checkpoint failed: {error}") from error

    def close(self, *, finish_removals: bool = True) -> None:
        """Waits for the write in flight; and for the removals started ahead unless the process is leaving on a
        notice (finish_removals=False): what they leave the next start removes (make_room_ahead, make_room)."""
        self.wait()
        if finish_removals:
            self.wait_removals()
        self._drop_memory()
        if self._crcs is not None:
            self._crcs.close()


def blocking_of(reason: str, async_mode: bool) -> bool:
    """Whether a save for `reason` blocks training: every save but an async mode's periodic one."""
    return not (async_mode and reason == "interval")


