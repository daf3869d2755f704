"""Capacity in SimPy: owned GPUs (a Container with a FIFO queue) and cloud nodes under a scaling policy.

Every pool records what it bills as (start, end) node intervals; costing reads them afterwards.
A job asks a pool for `nodes` nodes (or GPUs, for owned capacity), runs, and gives them back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import simpy


@dataclass(slots=True)
class Ledger:
    """Billed node intervals and busy node-seconds of one pool."""

    intervals: list[tuple[float, float]] = field(default_factory=list)
    busy_node_s: float = 0.0

    def billed_node_s(self, until_s: float) -> float:
        return sum(min(end, until_s) - start for start, end in self.intervals if start < until_s)


class OwnedPool:
    """Owned GPUs: jobs queue first-come first-served for whole GPUs."""

    def __init__(self, env: simpy.Environment, gpus: int):
        self.env, self.gpus = env, gpus
        self.free = simpy.Container(env, capacity=gpus, init=gpus)
        self.running: list[tuple[float, int]] = []    # (expected end, gpus) of jobs in service
        self.queued: list[tuple[int, float]] = []      # (gpus, duration) of jobs waiting, in order
        self.busy_gpu_s = 0.0

    def predicted_start(self, gpus: int) -> float:
        """When a job asking now would start, from known ends of running and queued jobs (FIFO)."""
        free, now = self.free.level, self.env.now
        ends = sorted(self.running)
        for need, duration in self.queued + [(gpus, 0.0)]:
            while free < need and ends:
                end, released = ends.pop(0)
                now, free = max(now, end), free + released
            if free < need:
                return math.inf
            if (need, duration) == (gpus, 0.0):
                return now
            free -= need
            ends = sorted(ends + [(now + duration, need)])
        return now

    def run(self, gpus: int, duration_s: float):
        entry = (gpus, duration_s)
        self.queued.append(entry)
        yield self.free.get(gpus)
        self.queued.remove(entry)
        started = self.env.now
        record = (started + duration_s, gpus)
        self.running.append(record)
        yield self.env.timeout(duration_s)
        self.running.remove(record)
        self.busy_gpu_s += gpus * duration_s
        yield self.free.put(gpus)
        return started


class AlwaysOnPool:
    """A fixed number of cloud nodes billed for the whole horizon; jobs queue for them."""

    def __init__(self, env: simpy.Environment, nodes: int, horizon_s: float):
        self.env, self.ledger = env, Ledger([(0.0, horizon_s)] * nodes)
        self.free = simpy.Container(env, capacity=nodes, init=nodes)

    def run(self, nodes: int, duration_s: float):
        yield self.free.get(nodes)
        started = self.env.now
        yield self.env.timeout(duration_s)
        self.ledger.busy_node_s += nodes * duration_s
        yield self.free.put(nodes)
        return started


class ElasticPool:
    """Cloud nodes started on demand (after a provisioning delay, billed from the request) and
    stopped `idle_timeout_s` after their last job. `max_nodes` caps nodes in service; jobs beyond it
    wait in order (queue-depth scaling: nodes are added only while jobs wait)."""

    def __init__(self, env: simpy.Environment, *, provision_s: float, idle_timeout_s: float,
                 max_nodes: int | None = None):
        self.env, self.provision_s, self.idle_timeout_s = env, provision_s, idle_timeout_s
        self.slots = simpy.Container(env, capacity=max_nodes, init=max_nodes) if max_nodes else None
        self.warm: list[dict] = []     # idle nodes: {"start": billed from, "idle_since": t}
        self.ledger = Ledger()

    def run(self, nodes: int, duration_s: float):
        if self.slots is not None:
            yield self.slots.get(nodes)
        reused = [self.warm.pop() for _ in range(min(nodes, len(self.warm)))]
        fresh = [{"start": self.env.now} for _ in range(nodes - len(reused))]
        if fresh and self.provision_s > 0:
            yield self.env.timeout(self.provision_s)
        started = self.env.now
        yield self.env.timeout(duration_s)
        self.ledger.busy_node_s += nodes * duration_s
        for node in reused + fresh:
            node["idle_since"] = self.env.now
            self.warm.append(node)
            self.env.process(self._reap(node))
        if self.slots is not None:
            yield self.slots.put(nodes)
        return started

    def _reap(self, node: dict):
        idle_since = node["idle_since"]
        yield self.env.timeout(self.idle_timeout_s)
        if node in self.warm and node["idle_since"] == idle_since:   # still idle since then: stop it
            self.warm.remove(node)
            self.ledger.intervals.append((node["start"], self.env.now))

    def close(self, horizon_s: float) -> None:
        """Nodes still warm at the end are billed until they would have stopped (or the horizon)."""
        for node in self.warm:
            self.ledger.intervals.append((node["start"], min(node["idle_since"] + self.idle_timeout_s, horizon_s)))
        self.warm.clear()


class SchedulePool:
    """`nodes` cloud nodes up inside daily windows [open, close) (cron-like), billed then; a job
    arriving outside waits for the next opening; a job running past the close keeps its nodes."""

    def __init__(self, env: simpy.Environment, *, nodes: int, windows: tuple[tuple[float, float], ...],
                 period_s: float = 86400.0):
        self.env, self.nodes, self.windows, self.period_s = env, nodes, windows, period_s
        self.free = simpy.Container(env, capacity=nodes, init=nodes)
        self.ledger = Ledger()
        self.overrun_until: dict[int, float] = {}   # window occurrence -> last job end

    def occurrence(self, t: float) -> tuple[int, float, float] | None:
        """(id, open, close) of the window containing t, or None."""
        day, within = divmod(t, self.period_s)
        for index, (open_s, close_s) in enumerate(self.windows):
            if open_s <= within < close_s:
                return int(day) * len(self.windows) + index, day * self.period_s + open_s, day * self.period_s + close_s
        return None

    def next_open(self, t: float) -> float:
        day, within = divmod(t, self.period_s)
        later = [o for o, _ in self.windows if o > within]
        return day * self.period_s + (min(later) if later else self.period_s + min(o for o, _ in self.windows))

    def run(self, nodes: int, duration_s: float):
        while True:
            if self.occurrence(self.env.now) is None:
                yield self.env.timeout(self.next_open(self.env.now) - self.env.now)
            yield self.free.get(nodes)
            window = self.occurrence(self.env.now)
            if window is not None:
                break
            yield self.free.put(nodes)   # the window closed while waiting: wait for the next one
        started = self.env.now
        yield self.env.timeout(duration_s)
        self.overrun_until[window[0]] = max(self.overrun_until.get(window[0], 0.0), self.env.now)
        self.ledger.busy_node_s += nodes * duration_s
        yield self.free.put(nodes)
        return started

    def close(self, horizon_s: float) -> None:
        """Bill every window occurrence within the horizon, extended by jobs that ran past it."""
        t = 0.0
        while True:
            t = self.next_open(t - 1e-9) if self.occurrence(t) is None else t
            if t >= horizon_s:
                return
            occurrence = self.occurrence(t)
            if occurrence is None:   # next_open found no window before the horizon
                return
            window_id, open_s, close_s = occurrence
            end = max(close_s, self.overrun_until.get(window_id, 0.0))
            self.ledger.intervals += [(open_s, min(end, horizon_s))] * self.nodes
            t = close_s
