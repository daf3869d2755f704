"""What the controller asks of a backend (local: costsim.control.local; slurm: costsim.control.slurm).

A backend sells instances on markets and says what capacity there is; it knows nothing of policies.
Times are trace seconds; a `handle` is the backend's own record of an instance (kept in the
journal, so a restarted controller can find the instance again).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from costsim.errors import InputError


@dataclass(frozen=True)
class Status:
    """An instance as the backend sees it now."""

    ended: bool
    exit_code: int | None = None
    end_s: float | None = None     # when it ended, if the backend knows better than "now"
    preempted: bool = False        # the market took it back (not the job's own doing)
    withdrawn: bool = False        # a request that never ran (nothing billed)


class Backend(Protocol):
    name: str
    markets: tuple[str, ...]
    foresight: bool   # whether spot_available_at can say when capacity comes back (a replayed trace)

    def spot_available(self, t: float) -> bool: ...
    def spot_available_at(self, t: float) -> float: ...
    def next_due(self, t: float, handle: dict | None) -> float: ...
    def duties(self, t: float, handle: dict | None) -> None: ...
    def start(self, market: str, t: float) -> dict: ...
    def poll(self, handle: dict, t: float) -> Status: ...
    def stop(self, handle: dict) -> None: ...
    def kill(self, handle: dict) -> None: ...
    def alive(self, handle: dict) -> bool: ...
    def log_of(self, handle: dict) -> Path: ...
    def close(self) -> None: ...


def runner_argv(plan: Path, run_dir: Path, run_id: str, market: str, runner_args: list[str]) -> list[str]:
    """`runner execute` for one instance: the plan, the run folder and the market, then the checked
    runner options the user gave `costsim control` (never a shell string)."""
    return [sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run_dir), "--run-id", run_id,
            "--market", market, *runner_args]


def check_runner(plan: Path, run_dir: Path, run_id: str, market: str, runner_args: list[str]) -> None:
    """What `runner execute` would refuse (the plan's GPUs on this host, its options, the batch split,
    the run folder's job), found before the first instance is bought: `runner execute --check`, whose
    one-line error becomes ours. No torch here: the runner imports it in its own process."""
    argv = runner_argv(plan, run_dir, run_id, market, runner_args) + ["--check"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        reason = lines[-1].removeprefix("error: ") if lines else f"exit {result.returncode}"
        raise InputError(str(plan), "runner", f"runner execute would refuse this job here: {reason}")
