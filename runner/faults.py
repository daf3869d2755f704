"""Preemption: the SIGTERM notice, and faults injected on purpose for drills and tests.

A schedule is a list of (kind, step): `kill` sends SIGKILL to a worker when it reaches the step
(no notice: work since the last checkpoint is lost); `term` sends SIGTERM to every worker of the
node, as the supervisor passes on a spot notice (an emergency checkpoint follows).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PREEMPTED_EXIT = 75   # EX_TEMPFAIL: stopped by a preemption notice after an emergency checkpoint
FATAL_EXIT = 78       # EX_CONFIG: a worker stopped for a reason restarting cannot mend (its `fatal` event says)
KINDS = ("kill", "term")


def leave(code: int) -> None:
    """Exit now with `code`, what is written flushed, without the interpreter's teardown: for a process
    whose work is done and durable (a worker after a notice's checkpoint, torchrun once its agent returned,
    the supervisor after a notice), where freeing torch's objects one by one only costs the notice time."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@dataclass(frozen=True, order=True)
class Fault:
    step: int
    kind: str

    def encode(self) -> str:
        return f"{self.kind}@{self.step}"


def parse_schedule(text: str, *, total_steps: int, seed: int) -> list[Fault]:
    """`N` (N kills at random steps, reproducible by seed) or `kill@30,term@60,45` (kill by default)."""
    text = text.strip()
    if text.isdigit():
        count = int(text)
        if count >= total_steps:
            raise ValueError(f"{count} preemptions do not fit in {total_steps} steps")
        steps = sorted(random.Random(seed).sample(range(1, total_steps), count))
        return [Fault(step, "kill") for step in steps]
    faults = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, _, step = item.rpartition("@") if "@" in item else ("kill", "", item)
        if kind not in KINDS or not step.isdigit() or not 0 < int(step) < total_steps:
            raise ValueError(f"bad fault {item!r}: expected N, or kill@STEP / term@STEP with 0 < STEP < {total_steps}")
        faults.append(Fault(int(step), kind))
    if len({f.step for f in faults}) != len(faults):
        raise ValueError("two faults at the same step")
    return sorted(faults)


def decode(text: str | None) -> Fault | None:
    if not text:
        return None
    kind, _, step = text.partition("@")
    return Fault(int(step), kind)


STUCK_EXIT = 128 + signal.SIGTERM   # as if SIGTERM had killed it: the worker could not act on it
STUCK_AFTER_S = 10.0


class NoticeFlag:
    """Set by SIGTERM; the training loop polls it at agreed steps.

    Python runs a signal handler only when the main thread comes back to Python. A worker whose peer
    died is blocked in a collective that never returns (torchrun then SIGTERMs it and waits before
    SIGKILL, a wait every in-place restart would pay). So the C-level handler also
    wakes a watcher thread (signal.set_wakeup_fd); if the Python handler has not run `stuck_after_s`
    later, the main thread is stuck in native code, no emergency checkpoint can be written, and the
    worker exits at once. A live worker's main thread is back in Python within a step or a
    checkpoint write's next chunk, far inside the margin.
    """

    def __init__(self, stuck_after_s: float = STUCK_AFTER_S) -> None:
        self.requested = False
        self.at: float | None = None   # when it came (time.monotonic)
        self._handled = threading.Event()
        signal.signal(signal.SIGTERM, self._handle)
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd)
        threading.Thread(target=self._watch, args=(read_fd, stuck_after_s), name="notice-watch", daemon=True).start()

    def _handle(self, signum, frame) -> None:
        if self.at is None:
            self.at = time.monotonic()
        self.requested = True
        self._handled.set()

    def _watch(self, read_fd: int, stuck_after_s: float) -> None:
        while signal.SIGTERM not in os.read(read_fd, 64):
            pass
        if not self._handled.wait(stuck_after_s):
            os.write(2, f"runner: worker {os.getpid()} got SIGTERM while blocked in native code for "
                        f"{stuck_after_s:.0f}s (a peer is gone?): exiting without a checkpoint\n".encode())
            os._exit(STUCK_EXIT)


DRILL_MARK = "runner: drill: injected"   # the one line an injected fault prints (runner.launch drops what follows)


def fire(fault: Fault, *, local_rank: int, local_world_size: int) -> None:
    """Carry out an injected fault on this node: `kill` its last worker, or `term`: the notice to
    every worker of this node (from local rank 0), as the supervisor passes on a real one. The worker
    that fires it says so in one line first: the peers' errors that follow a kill are its doing."""
    if fault.kind == "kill" and local_rank == local_world_size - 1:
        os.write(2, f"{DRILL_MARK} kill at step {fault.step} (local rank {local_rank}: SIGKILL, no checkpoint)\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.kind == "term" and local_rank == 0:
        os.write(2, f"{DRILL_MARK} notice at step {fault.step} (SIGTERM to every worker: emergency checkpoint)\n"
                 .encode())
        notify_workers(os.getppid())


def die_with_parent() -> None:
    """A worker goes when its torchrun agent goes. torchrun starts each worker in a session of its own, so
    a SIGKILL to the runner's process group (a reclaim, `costsim control` killing a job that would not
    leave, a test standing in for a node that vanished) reached the agent and not the workers, which
    trained on beside the next instance's, in its run folder. Linux's parent-death signal kills the
    worker with its agent; elsewhere this does nothing."""
    if sys.platform != "linux":
        return
    import ctypes
    agent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:   # PR_SET_PDEATHSIG
        return
    if os.getppid() != agent:   # the agent died before the signal was set: go now
        os._exit(STUCK_EXIT)


def children(pid: int) -> list[int]:
    """The direct children of a process (Linux /proc; empty where the kernel does not say)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def notify_workers(agent_pid: int) -> None:
    """The spot notice (SIGTERM) to each worker of a torchrun agent, not to the agent: torchrun
    answers a SIGTERM by signalling its workers itself and killing them a fixed time later, which
    can be shorter than an emergency checkpoint (SDXL's: data/measurements/2026-11-30-h200-sdxl-rescale).
    The workers write it and exit with PREEMPTED_EXIT; the agent then ends on its own. Before the
    workers exist (or where /proc does not list children) the agent gets it."""
    workers = children(agent_pid)
    for pid in workers:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    if not workers:
        os.kill(agent_pid, signal.SIGTERM)
