"""A checkpoint's manifest: each file's size and CRC-32 per 64 MiB chunk, written by rank 0 before the
folder is renamed to step-N/, and checked before a step is loaded (a corrupt checkpoint is skipped,
never loaded). Checksums run on a pool of threads (zlib releases the GIL), each chunk as soon as the writer
has written it (FollowingStream: the commit waits only for the last ones). No torch here.

The CRC-32 is zlib's (the same polynomial and values), computed by zlib-ng where it is installed (the `runner`
extra): it folds with the CPU's carry-less multiply, where the zlib that CPython links (1.2/1.3) looks bytes up in
tables: over 16 threads 90 against 12.7 GB/s on the 2-core development machine, 104 against 19.4 GB/s on the H200
host (scripts/bench_store_read.py's `crc` and `crc-zlib`; data/measurements/2026-12-04-h200-fetch-zlib-ng).
Without zlib-ng the stdlib's gives the same sums, slower."""

from __future__ import annotations

import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

try:
    from zlib_ng.zlib_ng import crc32
except ImportError:   # pragma: no cover - the runner extra installs it
    from zlib import crc32

MANIFEST = "manifest.json"
CHUNK_BYTES = 64 << 20
CHECK_THREADS = 8   # a read-back beside training (an async write's commit) and a check before a load
# the cores this process may run on: a read-back that training waits for (a notice waiting on the async write in
# flight) takes them all, training being stopped
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _crc32_range(path: Path, start: int, length: int) -> int:
    value = 0
    with open(path, "rb") as handle:
        handle.seek(start)
        while length > 0 and (block := handle.read(min(8 << 20, length))):
            value = crc32(block, value)
            length -= len(block)
    return value


def file_checksums(paths: list[Path], chunk: int = CHUNK_BYTES, threads: int | None = None) -> dict[Path, list[int]]:
    """CRC-32 of every `chunk` bytes of every file, computed by `threads` threads (CHECK_THREADS, at most one a
    core, by default)."""
    jobs = [(p, start) for p in paths for start in range(0, max(p.stat().st_size, 1), chunk)]
    with ThreadPoolExecutor(max_workers=threads or min(CHECK_THREADS, CORES)) as pool:
        values = list(pool.map(lambda job: _crc32_range(job[0], job[1], chunk), jobs))
    result: dict[Path, list[int]] = {p: [] for p in paths}
    for (path, _), value in zip(jobs, values):
        result[path].append(value)
    return result


class FollowingStream:
    """A file opened for writing whose chunk CRC-32s are computed while it is still being written: each time
    the writer completes a `chunk`, a pool thread reads that chunk back (from the page cache, just written)
    and sums it, beside the rest of the write, instead of all of them after it at the commit. Only
    sequential writes are followed: a seek (or any other call that could move the position) marks the sums
    unknown, and the commit reads that file back instead. `done` receives (the chunks' futures in order, or
    None when unknown; the bytes written) at close."""

    def __init__(self, raw, path: Path, pool: ThreadPoolExecutor, done, chunk: int = CHUNK_BYTES):
        self._raw, self._path, self._pool, self._done, self._chunk = raw, Path(path), pool, done, chunk
        self._sums: list[Future] | None = []
        self._position = 0

    def write(self, data) -> int:
        written = self._raw.write(data)
        written = memoryview(data).nbytes if written is None else written
        before, self._position = self._position, self._position + written
        if self._sums is not None and self._position // self._chunk > before // self._chunk:
            self._raw.flush()   # the completed chunks are in the file before a pool thread reads them
            for index in range(before // self._chunk, self._position // self._chunk):
                self._follow(index * self._chunk, self._chunk)
        return written

    def _follow(self, start: int, length: int) -> None:
        assert self._sums is not None
        self._sums.append(self._pool.submit(_crc32_range, self._path, start, length))

    def tell(self) -> int:
        return self._raw.tell()

    def flush(self) -> None:
        self._raw.flush()

    def fileno(self) -> int:
        return self._raw.fileno()

    def writable(self) -> bool:
        return True

    def distrust(self) -> None:
        self._sums = None

    def __getattr__(self, name):   # seek, truncate, writelines, ...: forwarded, and the sums no longer trusted
        self._sums = None
        return getattr(self._raw, name)

    def close(self) -> None:
        if self._raw.closed:
            return
        self._raw.close()
        if self._sums is not None:
            tail = self._position % self._chunk
            if tail or not self._sums:   # the last, short chunk (an empty file: one CRC)
                self._follow(self._position - tail, tail)
        self._done(self._sums, self._position)


def resolved(sums: list[Future] | None) -> list[int] | None:
    """A FollowingStream's sums once computed; None if unknown or if reading a chunk back failed."""
    try:
        return None if sums is None else [future.result() for future in sums]
    except OSError:
        return None


def verify(folder: Path) -> str | None:
    """None if the checkpoint is complete and intact, else why not."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
        chunk = int(manifest.get("chunk_bytes", CHUNK_BYTES))
    except (OSError, ValueError, KeyError, TypeError):
        return "no readable manifest (partial or damaged)"
    if ".metadata" not in files:
        return "manifest lists no DCP metadata"
    for name, expected in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != expected.get("size"):
            return f"{name} has {path.stat().st_size} bytes, expected {expected.get('size')}"
    chunked = [name for name, expected in files.items() if "crc32_chunks" in expected]
    sums = file_checksums([folder / name for name in chunked], chunk)
    for name, expected in files.items():
        if name in chunked:
            intact = sums[folder / name] == expected["crc32_chunks"]
        else:   # a manifest of an earlier runner version: one CRC-32 over the whole file
            intact = _crc32_range(folder / name, 0, expected.get("size", 0)) == expected.get("crc32")
        if not intact:
            return f"{name} fails its CRC-32 check"
    return None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
