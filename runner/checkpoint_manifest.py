"""A checkpoint's manifest: each file's size and CRC-32 per 64 MiB chunk, written by rank 0 before the
folder is renamed to step-N/, and checked before a step is loaded (a corrupt checkpoint is skipped,
never loaded). Checksums run on a pool of threads (zlib releases the GIL), or are summed as the writer
writes (SummingStream: no read-back at the commit). No torch here."""

from __future__ import annotations

import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MANIFEST = "manifest.json"
CHUNK_BYTES = 64 << 20
CHECK_THREADS = 8


def _crc32_range(path: Path, start: int, length: int) -> int:
    value = 0
    with open(path, "rb") as handle:
        handle.seek(start)
        while length > 0 and (block := handle.read(min(8 << 20, length))):
            value = zlib.crc32(block, value)
            length -= len(block)
    return value


def file_checksums(paths: list[Path], chunk: int = CHUNK_BYTES) -> dict[Path, list[int]]:
    """CRC-32 of every `chunk` bytes of every file, computed in parallel."""
    jobs = [(p, start) for p in paths for start in range(0, max(p.stat().st_size, 1), chunk)]
    with ThreadPoolExecutor(max_workers=min(CHECK_THREADS, os.cpu_count() or 1)) as pool:
        values = list(pool.map(lambda job: _crc32_range(job[0], job[1], chunk), jobs))
    result: dict[Path, list[int]] = {p: [] for p in paths}
    for (path, _), value in zip(jobs, values):
        result[path].append(value)
    return result


class SummingStream:
    """A file opened for writing that sums CRC-32 per `chunk` bytes of what goes through `write`, so that
    the manifest needs no read-back of a file just written. Only sequential writes are summed: a seek
    (or any other call that could move the position) marks the sums unknown, and the commit reads that
    file back instead. `done` receives (the sums, or None when unknown; the bytes written) at close."""

    def __init__(self, raw, done, chunk: int = CHUNK_BYTES):
        self._raw, self._done, self._chunk = raw, done, chunk
        self._sums: list[int] | None = []
        self._value, self._filled, self._position = 0, 0, 0   # the open chunk's CRC and bytes; the file's bytes

    def write(self, data) -> int:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        written = self._raw.write(view)
        written = len(view) if written is None else written
        self._position += written
        if self._sums is not None:
            self._sum(view[:written])
        return written

    def _sum(self, view: memoryview) -> None:
        while len(view):
            take = min(len(view), self._chunk - self._filled)
            self._value = zlib.crc32(view[:take], self._value)
            self._filled += take
            view = view[take:]
            if self._filled == self._chunk:
                assert self._sums is not None
                self._sums.append(self._value)
                self._value, self._filled = 0, 0

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
        sums = self._sums
        if sums is not None and (self._filled or not sums):   # the last, short chunk (an empty file: one CRC)
            sums = [*sums, self._value]
        self._done(sums, self._position)


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
