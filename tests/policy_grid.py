"""The deadline-safety grid: Can't Be Late's 1,000 real windows under every corner of a grid of
overheads (tests/test_policy_safety.py asserts on it; scripts/policy_safety.py prints it).

The job is the drill's (12.9 h of work, saves of 20 s, restarts of 1 min, p3.2xlarge prices); each
corner sets the changeover, the checkpoint interval, the notice, the job's exit (release) and the slack,
the deadline being what on-demand from the start takes plus the slack (a share of the work), so that
on-demand from the start meets every deadline of the grid.
"""

from __future__ import annotations

import gzip
import itertools
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from costsim import policies
from costsim.sim.job import JobParams
from costsim.sim.market import Timeline, TraceTimeline
from costsim.sim.trial import MarketPrice, run_trial

H, M = 3600.0, 60.0
BUNDLE = Path(__file__).resolve().parents[1] / "data" / "traces" / "cbl-us-west-2a-v100-1000.json.gz"
WORK_S, CHECKPOINT_S, RESTART_S = 12.9 * H, 20.0, 60.0
PRICES = {"spot": MarketPrice(per_hour=0.9731), "on-demand": MarketPrice(per_hour=3.06)}
GRID = {"changeover_s": (6 * M, H), "checkpoint_interval_s": (M, H), "notice_s": (0.0, 10 * M),
        "release_s": (0.0, 30 * M), "slack": (0.05, 0.5)}


@dataclass(frozen=True)
class Corner:
    changeover_s: float
    checkpoint_interval_s: float
    notice_s: float
    release_s: float
    slack: float

    def params(self) -> JobParams:
        base = JobParams(work_s=WORK_S, deadline_s=1e12, checkpoint_interval_s=self.checkpoint_interval_s,
                         checkpoint_s=CHECKPOINT_S, restart_s=RESTART_S, changeover_s=self.changeover_s,
                         notice_s=self.notice_s, release_s=self.release_s)
        on_demand = run_trial(base, policies.get("on-demand"), Timeline(), PRICES).makespan_s
        return replace(base, deadline_s=on_demand + self.slack * WORK_S, horizon_s=4 * (on_demand + WORK_S))

    def label(self) -> str:
        return (f"changeover {self.changeover_s / M:.0f}m, interval {self.checkpoint_interval_s / M:.0f}m, notice "
                f"{self.notice_s / M:.0f}m, release {self.release_s / M:.0f}m, slack {self.slack:.0%}")


def corners() -> list[Corner]:
    return [Corner(*values) for values in itertools.product(*GRID.values())]


def windows() -> list[tuple[list[int], float]]:
    doc = json.loads(gzip.decompress(BUNDLE.read_bytes()))
    return [([int(c) for c in w], float(doc["gap_seconds"])) for w in doc["windows"]]


@dataclass(frozen=True)
class Outcome:
    corner: Corner
    policy: str
    met: np.ndarray        # per window
    cost: np.ndarray
    on_demand_cost: float


def run_corner(args: tuple[Corner, str, bool]) -> Outcome:
    """One policy on every window at one corner (`reference`: the authors' rules, tests/cbl_reference.py)."""
    corner, name, reference = args
    from tests.cbl_reference import REFERENCE
    policy = REFERENCE[name] if reference else policies.get(name)
    params = corner.params()
    results = [run_trial(params, policy, TraceTimeline(ticks, gap), PRICES) for ticks, gap in windows()]
    od = run_trial(params, policies.get("on-demand"), Timeline(), PRICES)
    return Outcome(corner, name + (" (authors')" if reference else ""), np.array([r.met_deadline for r in results]),
                   np.array([r.cost for r in results]), od.cost)


def run_grid(names=("greedy", "uniform-progress"), reference: bool = False, jobs: int = 2) -> list[Outcome]:
    tasks = [(corner, name, reference) for corner in corners() for name in names]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(run_corner, tasks))
