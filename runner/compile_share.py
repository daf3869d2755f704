"""torch.compile's caches through the object store, for the job's next node (`runner execute
--share-compile-cache`, or COSTSIM_SHARE_COMPILE_CACHE=1 in the workers' environment).

A restart on the same node finds TorchInductor's caches in RUN/compile-cache (runner.workerenv.worker_env) and
its first step compiles nothing; a new node has an empty folder and compiles for 20-40 s. With sharing on
and an s3:// checkpoint store, rank 0 packs the cache folder into one tar after a life's first step, once
the step compiled something new (or the first resume wrote its list of the step's imports, runner.prewarm),
and uploads it in the background as COMPILE_PREFIX/<torch>-<device>.tar
beside the checkpoints; a node whose cache folder is empty fetches that tar (its local rank 0, in the
background while the model builds and the checkpoint loads) and unpacks it before the first step.

The cache is code: Inductor's generated kernels and wrappers, which the workers import and run. Sharing
is therefore opt-in, and only for a store prefix that no one but the job's own runners can write: whoever
can write it can put code in the job (as whoever can write RUN/compile-cache can). The tar is unpacked with
tarfile's `data` filter (no absolute paths, no `..`, no links out of the folder, no devices), each file
renamed into place, and a file the local cache already has is kept. No torch here.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

ENV = "COSTSIM_SHARE_COMPILE_CACHE"
COMPILE_PREFIX = "compile-cache"
_SKIPPED = re.compile(r"(\.lock$|\.tmp$|^tmp)")   # files a compile in progress may be writing


def enabled(env=os.environ) -> bool:
    return env.get(ENV, "") not in ("", "0")


def cache_key(torch_version: str, device_name: str) -> str:
    """The store key of the cache for this torch and this device (Inductor's own keys decide what hits)."""
    tag = re.sub(r"[^A-Za-z0-9._-]+", "_", f"torch-{torch_version}-{device_name}")
    return f"{COMPILE_PREFIX}/{tag}.tar"


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) if Path(folder).is_dir() else 0


def pack(folder: Path, target: Path) -> tuple[int, int]:
    """The cache `folder` as an uncompressed tar at `target` (names relative to it); (files, bytes)."""
    files = total = 0
    with tarfile.open(target, "w") as archive:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file() and not path.is_symlink() and not _SKIPPED.search(path.name):
                archive.add(path, arcname=str(path.relative_to(folder)), recursive=False)
                files, total = files + 1, total + path.stat().st_size
    return files, total


def unpack(archive_path: Path, folder: Path) -> int:
    """The tar at `archive_path` into the cache `folder`: unpacked beside it with the `data` filter, then each
    file renamed into place unless the folder has it already. Returns the files added."""
    if not hasattr(tarfile, "data_filter"):   # Python before 3.10.12 / 3.11.4: no safe extraction
        raise RuntimeError("this Python's tarfile has no extraction filters (3.10.12 or 3.11.4 and later have)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".compile-cache-fetch-", dir=folder.parent))
    added = 0
    try:
        with tarfile.open(archive_path, "r:") as archive:
            archive.extractall(staging, filter="data")
        for path in sorted(staging.rglob("*")):
            if not path.is_file():
                continue
            target = folder / path.relative_to(staging)
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
            added += 1
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return added


class CompileCacheShare:
    """One worker's side: fetch at the start (where the cache folder is empty), upload after the first step."""

    def __init__(self, store, folder: Path, key: str, *, on_event: Callable[..., None], warn: Callable[[str], None]):
        self.store, self.folder, self.key = store, Path(folder), key
        self.on_event, self.warn = on_event, warn
        self.bytes_at_start = folder_bytes(self.folder)
        self._fetcher: threading.Thread | None = None
        self._uploader: threading.Thread | None = None

    # -- a new node: fetch -------------------------------------------------------------------------
    def start_fetch(self) -> None:
        """Fetch and unpack the store's cache in the background, where this node's is empty."""
        if self.bytes_at_start == 0:
            self._fetcher = threading.Thread(target=self._fetch, name="compile-cache-fetch", daemon=True)
            self._fetcher.start()

    def wait_fetch(self) -> None:
        if self._fetcher is not None:
            self._fetcher.join()
            self._fetcher = None

    def _fetch(self) -> None:
        from runner.store import StoreError
        started = time.perf_counter()
        handle, name = tempfile.mkstemp(prefix=".compile-cache-", suffix=".tar", dir=self.folder.parent)
        os.close(handle)
        try:
            size = self.store.get_file(self.key, Path(name))
            if size is None:
                self.on_event("compile_cache", op="fetch", key=self.key, bytes=0, files=0,
                              duration_s=time.perf_counter() - started, reason="none in the store yet")
                return
            files = unpack(Path(name), self.folder)
            self.bytes_at_start = folder_bytes(self.folder)
            self.on_event("compile_cache", op="fetch", key=self.key, bytes=size, files=files,
                          duration_s=time.perf_counter() - started)
        except (StoreError, OSError, RuntimeError, tarfile.TarError) as exc:
            self.warn(f"compile cache {self.key} not fetched ({str(exc).splitlines()[0]}): this node compiles it")
            self.on_event("compile_cache", op="fetch", key=self.key, bytes=0, files=0,
                          duration_s=time.perf_counter() - started, reason=str(exc).splitlines()[0])
        finally:
            Path(name).unlink(missing_ok=True)

    # -- after a step that compiled: upload ----------------------------------------------------------
    def start_upload(self) -> None:
        """Upload the cache in the background if it grew in this life (once a life)."""
        if self._uploader is None and folder_bytes(self.folder) > self.bytes_at_start:
            self._uploader = threading.Thread(target=self._upload, name="compile-cache-upload", daemon=True)
            self._uploader.start()

    def wait_upload(self) -> None:
        if self._uploader is not None:
            self._uploader.join()

    def _upload(self) -> None:
        from runner.store import StoreError
        started = time.perf_counter()
        handle, name = tempfile.mkstemp(prefix=".compile-cache-", suffix=".tar", dir=self.folder.parent)
        os.close(handle)
        try:
            files, size = pack(self.folder, Path(name))
            self.store.put_file(Path(name), self.key)
            self.on_event("compile_cache", op="upload", key=self.key, bytes=size, files=files,
                          duration_s=time.perf_counter() - started)
        except (StoreError, OSError, tarfile.TarError) as exc:
            self.warn(f"compile cache not uploaded to {self.key} ({str(exc).splitlines()[0]}): the next node compiles")
        finally:
            Path(name).unlink(missing_ok=True)
