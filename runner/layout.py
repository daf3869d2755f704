"""The run folder's layout, named in one place (no torch: the supervisor and calibrate read it too).

    RUN/plan.json            the job's plan, written once with its fingerprint (costsim.contract.job)
    RUN/current-plan.json    the plan as the latest `runner execute` carries it out (its workers read it)
    RUN/telemetry.jsonl      events, appended by every process
    RUN/summary.json         what the last `runner execute` on node 0 saw
    RUN/checkpoints/step-N/  a complete checkpoint of optimizer step N
    RUN/checkpoints/.step-N.tmp/   a save in progress (renamed to step-N/ once complete)
    RUN/final/               the trained model the workload exports at the end (RUN/final/unet for SDXL)

and, outside it, MEMORY/costsim-<hash of the checkpoint folder>/step-N/: a checkpoint fetched from an object
store into memory (a tmpfs, /dev/shm unless COSTSIM_FETCH_MEMORY_DIR names another; empty: on the disk),
held only until it is loaded.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Callable

from runner.checkpoint_manifest import fsync_dir

CHECKPOINTS = "checkpoints"
FINAL = "final"
_STEP = re.compile(r"^step-(\d+)$")
_PARTIAL = re.compile(r"^\.step-(\d+)\.tmp$")
_REMOVING = re.compile(r"^\.step-(\d+)\.removing$")


def step_folder(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step}"


def partial_folder(root: Path, step: int) -> Path:
    return Path(root) / f".step-{step}.tmp"


MEMORY_DIR_ENV = "COSTSIM_FETCH_MEMORY_DIR"


def memory_folder(root: Path, env=os.environ) -> Path | None:
    """Where checkpoints of the folder `root` are fetched into memory (the same path for every process of
    the node), or None when fetches go to the disk (COSTSIM_FETCH_MEMORY_DIR set empty)."""
    base = env.get(MEMORY_DIR_ENV, "/dev/shm")
    if not base:
        return None
    import hashlib
    key = hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:12]
    return Path(base) / f"costsim-{key}"


def step_of(name: str) -> int | None:
    """N for a `step-N` folder name, else None."""
    match = _STEP.match(name)
    return int(match.group(1)) if match else None


def partial_step_of(name: str) -> int | None:
    """N for a `.step-N.tmp` folder name, else None."""
    match = _PARTIAL.match(name)
    return int(match.group(1)) if match else None


def saved_steps(root: Path) -> list[int]:
    """The steps of the complete checkpoint folders under `root`, newest first."""
    found = [step for p in Path(root).glob("step-*") if (step := step_of(p.name)) is not None]
    return sorted(found, reverse=True)


def partial_folders(root: Path) -> list[Path]:
    return sorted(Path(root).glob(".step-*.tmp"))


def folder_bytes(folder: Path) -> int:
    """The bytes of a checkpoint folder's files (0 when there is none)."""
    folder = Path(folder)
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) if folder.exists() else 0


def removing_folder(root: Path, step: int) -> Path:
    """Where checkpoint `step` is moved (one rename) before its files are deleted: no longer a checkpoint."""
    return Path(root) / f".step-{step}.removing"


def removing_folders(root: Path) -> list[Path]:
    return sorted(Path(root).glob(".step-*.removing"))


def removing_step_of(name: str) -> int | None:
    """N for a `.step-N.removing` folder name, else None."""
    match = _REMOVING.match(name)
    return int(match.group(1)) if match else None


def write_folder_atomic(target: Path, write: Callable[[Path], None]) -> int:
    """`write(folder)` fills a temporary folder beside `target`; its files are fsynced and it is renamed
    to `target`, replacing an earlier one only once the new one is complete. Returns the bytes written."""
    target = Path(target)
    tmp, old = target.with_name(f".{target.name}.tmp"), target.with_name(f".{target.name}.old")
    for leftover in (tmp, old):
        shutil.rmtree(leftover, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    written = 0
    for folder, _, files in os.walk(tmp):
        for name in files:
            path = Path(folder) / name
            written += path.stat().st_size
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    fsync_dir(target.parent)
    return written
