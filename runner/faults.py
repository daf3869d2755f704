"""Preemption: the SIGTERM notice, and faults injected on purpose for drills and tests.

A schedule is a list of (kind, step): `kill` sends SIGKILL to a worker when it reaches the step
(no notice: work since the last checkpoint is lost); `term` sends SIGTERM to the node's torchrun
agent, which forwards it to every worker as a spot notice would (an emergency checkpoint follows).
"""

from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass

PREEMPTED_EXIT = 75   # EX_TEMPFAIL: stopped by a preemption notice after an emergency checkpoint
KINDS = ("kill", "term")


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


class NoticeFlag:
    """Set by SIGTERM; the training loop polls it at agreed steps."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True


def fire(fault: Fault, *, local_rank: int, local_world_size: int) -> None:
    """Carry out an injected fault on this node: `kill` its last worker, or `term` its agent (from
    local rank 0), which forwards the notice to this node's workers."""
    if fault.kind == "kill" and local_rank == local_world_size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.kind == "term" and local_rank == 0:
        os.kill(os.getppid(), signal.SIGTERM)
