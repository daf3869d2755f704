"""Backend `local`: this machine stands for both markets, spot capacity follows a replayed trace.

On-demand (and owned) capacity is always there. Spot capacity is the trace's: an instance started
while the trace has capacity is reclaimed when that available stretch ends. `notice_s` before it,
the backend gives the runner the spot notice (SIGTERM to `runner execute`, which passes it to its
workers: emergency checkpoint, exit); at the reclaim it kills whatever is left of the job, as a
cloud would. Each instance is one `runner execute` process, started in its own session with its
output in RUN/runner.log so that it outlives a controller that is killed; a controller started
again finds it by pid and process start time (never a second copy).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
from pathlib import Path

from costsim.control.backend import Status, runner_argv
from costsim.sim.market import Timeline, TraceTimeline
from costsim.spec import ON_DEMAND, OWNED, SPOT

_EPS = 1e-6


class TraceCapacity:
    """Spot capacity from a trace, with the simulator's own reading of it (costsim.sim.market)."""

    def __init__(self, ticks: list[int], gap_s: float):
        self.timeline: Timeline = TraceTimeline(ticks, gap_s)

    def available(self, t: float) -> bool:
        return self.timeline.available(t)

    def reclaim_at(self, t: float) -> float:
        """When an instance started at t (with capacity) is reclaimed."""
        return self.timeline.reclaim_time(t)

    def next_change(self, t: float) -> float:
        """The next time capacity appears or goes (inf when never)."""
        if self.available(t):
            return self.timeline.reclaim_time(t)
        return self.timeline.next_available(t)


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid,
    an identity that a reused pid does not share. None when there is no such live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):   # exited, not yet reaped
        return None
    return int(fields[19])


class Processes:
    """Each instance's job as a `runner execute` process of this machine."""

    def __init__(self, *, plan: Path, run_dir: Path, run_id: str, runner_args: list[str]):
        self.plan, self.run_dir, self.run_id, self.runner_args = plan, run_dir, run_id, runner_args
        self.log = run_dir / "runner.log"
        self._children: dict[int, subprocess.Popen] = {}

    def start(self, market: str) -> dict:
        with open(self.log, "ab") as log:
            child = subprocess.Popen(runner_argv(self.plan, self.run_dir, self.run_id, market, self.runner_args),
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        self._children[child.pid] = child
        return {"pid": child.pid, "proc_start": process_start_ticks(child.pid)}

    def exit_code(self, handle: dict) -> tuple[bool, int | None]:
        """(ended, exit status); an adopted job's status went to init: (True, None)."""
        child = self._children.get(handle["pid"])
        if child is None:
            return (not self.alive(handle)), None
        try:   # ended? Looked at without reaping: until it is reaped its pid, and so its group, stay its own
            ended = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:   # reaped already (by Popen itself)
            ended = True
        if not ended:
            return False, None
        self.kill(handle)   # nothing of the job outlives its instance (the runner leads its own process group)
        child.wait()
        del self._children[handle["pid"]]
        return True, child.returncode

    def alive(self, handle: dict) -> bool:
        """The same live process (pid and start time): a restarted controller adopts it."""
        start = process_start_ticks(handle["pid"])
        return start is not None and start == handle.get("proc_start")

    def notify(self, handle: dict) -> None:
        """The spot notice: SIGTERM to `runner execute`, which passes it to its workers."""
        if self.alive(handle):
            try:
                os.kill(handle["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass

    def kill(self, handle: dict) -> None:
        """SIGKILL the job's process group, but only while its leader is known to be the job's: our child
        not yet reaped, or the same live process (pid and start time). A group whose leader is gone may
        carry a reused number by now: killing it could kill another program."""
        child = self._children.get(handle["pid"])
        if (child is None or child.returncode is not None) and not self.alive(handle):
            return
        try:
            os.killpg(handle["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        for child in self._children.values():
            child.poll()


class LocalBackend:
    name = "local"

    def __init__(self, capacity: TraceCapacity | None, jobs, *, notice_s: float):
        self.capacity, self.jobs, self.notice_s = capacity, jobs, notice_s
        self.markets = self.markets_for(capacity)

    @staticmethod
    def markets_for(capacity: TraceCapacity | None) -> tuple[str, ...]:
        """Spot only with a trace to say when it can be had; on-demand and owned always."""
        return (SPOT, ON_DEMAND, OWNED) if capacity is not None else (ON_DEMAND, OWNED)

    # -- capacity ------------------------------------------------------------------------
    # The replayed trace says when capacity comes back, as the simulator's View does: the policy is
    # told `spot_available_at` and asked then, not at every change it could foresee.
    foresight = True

    def spot_available(self, t: float) -> bool:
        return self.capacity is not None and self.capacity.available(t)

    def spot_available_at(self, t: float) -> float:
        return self.capacity.timeline.next_available(t) if self.capacity is not None else math.inf

    def next_due(self, t: float, handle: dict | None) -> float:
        """The next time the backend has something to do or capacity changes."""
        due = [self.capacity.next_change(t)] if self.capacity is not None else []
        reclaim = handle.get("reclaim_at") if handle else None
        if reclaim is not None:
            due += [x for x in (reclaim - self.notice_s, reclaim) if x > t + _EPS]
        return min(due, default=math.inf)

    # -- instances -----------------------------------------------------------------------
    def start(self, market: str, t: float) -> dict:
        handle = self.jobs.start(market)
        if market == SPOT and self.capacity is not None:   # markets_for offers spot only with a trace
            handle["reclaim_at"] = self.capacity.reclaim_at(t)
        return handle

    def duties(self, t: float, handle: dict | None) -> None:
        """The market's side: the spot notice at reclaim - notice, the reclaim itself at its time."""
        if not handle or handle.get("reclaim_at") is None or not math.isfinite(handle["reclaim_at"]):
            return
        reclaim = handle["reclaim_at"]
        if t >= reclaim - self.notice_s - _EPS and "noticed" not in handle:
            handle["noticed"] = round(t, 3)
            self.jobs.notify(handle)
        if t >= reclaim - _EPS and "reclaimed" not in handle:
            handle["reclaimed"] = round(t, 3)
            self.jobs.kill(handle)

    def stop(self, handle: dict) -> None:
        """Ask the job to leave (the policy moved on): the same notice, so it checkpoints first."""
        self.jobs.notify(handle)

    def kill(self, handle: dict) -> None:
        self.jobs.kill(handle)

    def poll(self, handle: dict, t: float) -> Status:
        """Whether the instance is still held. A spot instance that had its notice is held until the
        reclaim, job or no job (as the simulator holds it, and the cloud bills it)."""
        if "job_gone" not in handle:
            ended, code = self.jobs.exit_code(handle)
            if not ended:
                return Status(ended=False)
            handle["job_gone"], handle["exit_code"] = round(t, 3), code
        reclaim = handle.get("reclaim_at")
        if "noticed" in handle and reclaim is not None:
            if t < reclaim - _EPS:
                return Status(ended=False)
            return Status(ended=True, exit_code=handle["exit_code"], end_s=reclaim, preempted=True)
        return Status(ended=True, exit_code=handle["exit_code"])

    def log_of(self, handle: dict) -> Path:
        return self.jobs.log

    def alive(self, handle: dict) -> bool:
        """Whether the instance's job still runs (a restarted controller keeps it)."""
        return "job_gone" not in handle and self.jobs.alive(handle)

    def close(self) -> None:
        self.jobs.close()
