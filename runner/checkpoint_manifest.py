"""A checkpoint's manifest: each file's size and CRC-32 per 64 MiB chunk, written by rank 0 before the
folder is renamed to step-N/, and checked before a step is loaded (a corrupt checkpoint is skipped,
never loaded). Checksums run on a pool of threads (zlib releases the GIL). No torch here."""

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
