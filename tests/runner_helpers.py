"""Helpers for runner tests: a tiny plan, and `runner execute` in a subprocess (torchrun needs one)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from costsim.contract.plan import Plan
from costsim.contract.telemetry import read_events


def free_port() -> int:
    """A port free on 127.0.0.1 a moment ago (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_plan(tmp_path: Path, *, interval_steps: int | None = 50, keep: int = 2, async_mode: bool = False,
              notice_save: str = "always") -> Path:
    """The planner's own plan for the tiny workload, with a checkpoint interval in steps for exact tests.
    A notice saves always by default: these tests check what a save at the notice does; the rule that
    decides it (auto) has its own tests, with figures that make its choice certain."""
    out = tmp_path / "plan.json"
    from costsim.cli import main
    try:
        main(["plan", "--workload", "tiny", "--trials", "10", "--out", str(out), "--format", "json"])
    except SystemExit as done:
        assert done.code in (0, None)
    plan = Plan.read(out)
    checkpoint = replace(plan.checkpoint, interval_steps=interval_steps or None, keep=keep, async_=async_mode,
                         notice_save=notice_save)
    return replace(plan, checkpoint=checkpoint).write(out)


def execute(plan: Path, run_dir: Path, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run_dir), *args],
                          capture_output=True, text=True, timeout=timeout)


def kill_runner(proc: subprocess.Popen, timeout: float = 30) -> None:
    """A node that vanished: SIGKILL to `runner execute`'s process group (started with start_new_session),
    then wait until every process under it is gone. torchrun starts its workers in sessions of their own;
    they go by their parent-death signal a moment after the agent, and until then a worker's upload or
    prune still reaches the store (a check of the store right after proc.wait() saw one land once)."""
    from runner.faults import children
    tree, todo = [], [proc.pid]
    while todo:
        tree += (found := [child for pid in todo for child in children(pid)])
        todo = found
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + timeout
    while alive := [pid for pid in tree if _running(pid)]:
        assert time.monotonic() < deadline, f"processes {alive} of runner pid {proc.pid} outlived its SIGKILL"
        time.sleep(0.02)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")   # a zombie left for a reaper has stopped running


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def events(run_dir: Path, name: str, rank: int | None = 0) -> list[dict]:
    return [e for e in read_events(run_dir) if e["event"] == name and (rank is None or e.get("rank") == rank)]


def clean_and_killed(plan: Path, tmp_path: Path, *args: str, kill: str, timeout: int = 240) -> tuple[Path, Path]:
    """The run straight through (RUN clean) and with `kill` injected (RUN drill, e.g. kill@6): both finish,
    the drill after one restart, with the same final state (a bit-exact resume). Returns the two folders."""
    clean, drill = tmp_path / "clean", tmp_path / "drill"
    for folder, injected in ((clean, ()), (drill, ("--inject-preemptions", kill))):
        result = execute(plan, folder, *args, *injected, timeout=timeout)
        assert result.returncode == 0, result.stderr[-3000:]
    assert summary(drill)["restarts"] == 1
    assert summary(clean)["final_state_sha256"] == summary(drill)["final_state_sha256"]
    return clean, drill


# Root can raise a process's CPU priority: a wall-clock drill's processes then run ahead of the other
# worker's tests instead of the other worker standing idle while it runs (tests/conftest.py's solo_gate).
DRILL_NICE = -10 if hasattr(os, "geteuid") and os.geteuid() == 0 else 0


def drill_priority() -> None:
    """preexec_fn for a `solo` drill's processes (the command, and through it the runner and its workers):
    as root, a raised CPU priority, so that the other worker's DDP runs take only what the drill leaves."""
    if DRILL_NICE:
        os.nice(DRILL_NICE)
