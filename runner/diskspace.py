"""Room on the node's disk for what must exist at once: the newest complete checkpoint, the one being
written, and at the end the export. Checked before a job starts and before each save and export;
`keep` makes room by removing the oldest checkpoints, never the newest complete one. No torch here."""

from __future__ import annotations

import errno
import shutil
import threading
from pathlib import Path


class DiskFullError(RuntimeError):
    """Not enough room for a save or an export (the message says where, how much, and what to change)."""


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem of `path` (or of its nearest existing parent)."""
    path = Path(path).resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem `path` is on ('tmpfs', 'ext4' ...), from /proc/self/mounts; None if unknown."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    target, best, kind = str(Path(path).resolve()), -1, None
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) > best:
            best, kind = len(point), fields[2]
    return kind


def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (what can be used without swapping), None if unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# PyTorch's zip writer (torch.save, under torch.distributed.checkpoint's file writers) reports a write
# that fell short as "[enforce fail at inline_container.cc:...] . unexpected pos N vs M": the errno is lost.
SHORT_WRITE = "unexpected pos"


def no_room_in_memory(base: Path, size: int, copies: int) -> str | None:
    """Why a checkpoint of `size` bytes cannot be fetched into the tmpfs `base` (None: it can): `base` must be a
    tmpfs with the checkpoint's size free (5% and 1 GiB to spare), and the node's available memory must hold
    `copies` of it (2 where an async job's host staging buffers, as large, come after) and 4 GiB more."""
    if filesystem_type(base) != "tmpfs":
        return f"{base} is not a memory filesystem (tmpfs)"
    if (free := free_bytes(base)) < size * 1.05 + (1 << 30):
        return f"{base} has {gb(free)} free, the checkpoint is about {gb(size)}"
    if (memory := available_memory()) is not None and memory < size * copies + (4 << 30):
        return f"{gb(memory)} of memory available, the checkpoint is about {gb(size)}"
    return None


def is_disk_full(exc: BaseException, folder: Path | None = None, needed: int = 0) -> bool:
    """An out-of-space error, however it was wrapped; with `folder`, also a short write by PyTorch's zip
    writer (SHORT_WRITE) while `folder` has less than `needed` bytes free (call it before removing what
    the failed write left: seen on a filled tmpfs, one rank ENOSPC, the other this)."""
    seen: BaseException | None = exc
    short = False
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(seen, DiskFullError) or "No space left on device" in str(seen):
            return True
        short = short or SHORT_WRITE in str(seen)
        seen = seen.__cause__ or seen.__context__
    return short and folder is not None and free_bytes(folder) < needed


def gb(value: float) -> str:
    return f"{value / 1e9:.2f} GB" if value >= 1e8 else f"{value / 1e6:.1f} MB"


def refuse(folder: Path, what: str, needed: int, free: int, advice: str) -> DiskFullError:
    return DiskFullError(f"{folder}: not enough disk for {what}: {gb(needed)} needed, {gb(free)} free; {advice}")


def quiet_disk_full_in_threads() -> None:
    """Writer threads (torch.distributed.checkpoint's file writers) that run out of space would print a
    traceback each; the save that started them reports the failure in one line, so theirs are kept quiet.
    Any other exception in a thread is printed as before."""
    default = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and is_disk_full(args.exc_value):
            return
        default(args)

    threading.excepthook = hook
