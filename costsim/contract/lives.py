"""A job is every life it lives: each `runner execute` on a run folder (fresh, or resumed after a notice,
a kill, a failure, a move), read from the folder's telemetry.

A life begins with node 0's supervisor `instance` event and ends with its `exit` event; one that left no
exit (the node vanished, a SIGKILL) is still a life, ended at its last event. Within a life the supervisor
may relaunch the workers (an in-process restart after a worker failure or an injected fault). Every start
of training (a life's first, or a relaunch) resumes from the step its `start` event names; the steps it
trains up to the furthest step any earlier start reached are trained again: the work the job lost.

`runner report`, summary.json and `costsim calibrate` count a job by these rules (no torch, scipy or yaml).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

VANISHED = "vanished"   # a life with no exit event (nor notice): its node went away, or it was killed


@dataclass
class Life:
    """One `runner execute` of the job, as its telemetry recorded it (epoch seconds)."""

    number: int                      # 1, 2, ... in the folder's order
    started_t: float                 # node 0's `instance` event
    ended_t: float                   # its `exit`, or its last event when it left none
    ended: str = VANISHED            # the exit's `ended` (costsim.contract.telemetry.INSTANCE_ENDS), or VANISHED
    market: str | None = None
    host: str | None = None
    nodes: int = 1                   # nodes whose supervisors started it
    world_size: int | None = None    # the workers' world size (its last start's)
    resumed_from: int = 0            # the step its first start resumed from (0: a fresh start)
    reached: int = 0                 # the furthest step it trained
    trained: int = 0                 # steps it trained
    trained_again: int = 0           # of those, steps an earlier start had already trained (lost work)
    relaunches: int = 0              # its supervisor's in-process restarts
    first_step_t: float | None = None   # when its first trained step ended

    @property
    def wall_s(self) -> float:
        return max(0.0, self.ended_t - self.started_t)

    @property
    def started(self) -> str:
        return "fresh" if self.resumed_from == 0 and self.number == 1 else f"resumed from step {self.resumed_from}"

    def as_dict(self) -> dict:
        return {**asdict(self), "wall_s": round(self.wall_s, 3), "started": self.started}


@dataclass
class Job:
    """The lives of one run folder and what they add up to."""

    lives: list[Life] = field(default_factory=list)

    @property
    def restarts(self) -> int:
        """Every start after the first: the lives after the first, and each life's in-process relaunches."""
        return max(0, len(self.lives) - 1) + sum(life.relaunches for life in self.lives)

    @property
    def lost_steps(self) -> int:
        return sum(life.trained_again for life in self.lives)

    @property
    def ends(self) -> dict[str, int]:
        """How the lives ended, by kind: finished, preempted-notice, moved, cancelled, failed, vanished."""
        return dict(Counter(life.ended for life in self.lives))

    @property
    def wall_s(self) -> float:
        return sum(life.wall_s for life in self.lives)

    @property
    def gpu_hours(self) -> float:
        """Each life's wall time on its world size (its GPUs, or processes on a CPU)."""
        return sum(life.wall_s * (life.world_size or 1) for life in self.lives) / 3600.0

    def totals(self) -> dict:
        return {"lives": len(self.lives), "restarts": self.restarts, "lost_steps": self.lost_steps,
                "ends": self.ends, "wall_s": round(self.wall_s, 3), "gpu_hours": round(self.gpu_hours, 6)}


def split_lives(events: list[dict]) -> list[list[dict]]:
    """The events of each life, in file order: a life begins at node 0's supervisor `instance` event (events
    before any, from an older runner, are a life of their own)."""
    found: list[list[dict]] = []
    for e in events:
        if not found or (e["event"] == "instance" and e.get("rank") is None and not e.get("node") and found[-1]):
            found.append([])
        found[-1].append(e)
    return found


def lives(events: list[dict]) -> Job:
    """The job's lives from a run folder's telemetry, in file order (costsim.contract.telemetry.read_events)."""
    job = Job()
    current: Life | None = None
    frontier = 0          # the furthest step any start before the current one reached
    attempt_reach = 0     # the furthest step the current start reached
    for e in events:
        kind, supervisor = e["event"], e.get("rank") is None
        node = e.get("node", 0) or 0
        if kind == "instance" and supervisor:
            if node != 0 and current is not None:   # another node joining this life
                current.nodes += 1
                continue
            frontier = max(frontier, attempt_reach)
            current = Life(number=len(job.lives) + 1, started_t=e["t"], ended_t=e["t"], market=e.get("market"),
                           host=e.get("host"))
            job.lives.append(current)
            continue
        if current is None:   # events before any `instance` (a folder of an older runner): one life from them
            current = Life(number=1, started_t=e["t"], ended_t=e["t"])
            job.lives.append(current)
        current.ended_t = max(current.ended_t, e["t"])
        if kind in ("exit", "notice") and supervisor and node == 0:   # a notice's word stands where no exit came
            current.ended = e.get("ended") or current.ended
        elif kind == "restart" and supervisor and node == 0:
            current.relaunches += 1
        elif kind == "start" and e.get("rank") == 0:
            frontier = max(frontier, attempt_reach)
            attempt_reach = int(e.get("step", 0))
            if current.reached == 0 and current.trained == 0:
                current.resumed_from = attempt_reach
        elif kind == "preempted" and e.get("rank") == 0 and e.get("step") is not None:
            # the worker's own word of the step it reached (flushed before it dies; its last step events,
            # buffered, may never reach the file)
            attempt_reach = max(attempt_reach, int(e["step"]))
            current.reached = max(current.reached, int(e["step"]))
        elif kind == "step" and e.get("rank", 0) == 0:
            step = int(e["step"])
            current.trained += 1
            current.trained_again += step <= frontier
            current.reached = max(current.reached, step)
            attempt_reach = max(attempt_reach, step)
            if current.first_step_t is None:
                current.first_step_t = e["t"]
            if e.get("world_size"):
                current.world_size = int(e["world_size"])
    return job
