"""Which steps of a run are steady, and what an async checkpoint costs the steps beside its write: the
telemetry rules `costsim calibrate` (the profile's figures), `runner report` (what a run measured) and
`costsim control` (costsim.control.progress, as the events arrive) share, from the run's events alone
(no scipy, yaml or torch: the runner reads them here).

A steady step is past the warm-up of its start (costsim.contract.timing.WARMUP_STEPS) and is not the
step that paid a checkpoint; a steady step that ran while an async save's background write was under way
is slower, and is charged to that save (async_save_costs), where the planner counts it.
"""

from __future__ import annotations

from costsim.contract.timing import WARMUP_STEPS

SKIP_AFTER_START = WARMUP_STEPS


def _async_saves(events: list[dict]) -> list[dict]:
    """Rank 0's events of the async saves whose background write finished."""
    return [e for e in events if e["event"] == "checkpoint_save" and e.get("rank") == 0 and e.get("mode") == "async"]


def write_window(save: dict) -> tuple[float, float]:
    """(start, end) of an async save's background write: it starts when training resumes after the
    stall and ends with the save's event."""
    return save["t"] - save["duration_s"] + save["stall_s"], save["t"]


def beside_write(began: float, ended: float, window: tuple[float, float]) -> bool:
    """Whether a step that ran from `began` to `ended` ran beside the write `window` (charged to it)."""
    return window[0] < began and ended <= window[1]


def write_windows(events: list[dict]) -> list[tuple[float, float]]:
    """write_window of each async save whose write finished (_async_saves' order)."""
    return [write_window(e) for e in _async_saves(events)]


Split = tuple[int, int, int, int]   # (world size, nodes, micro-batch, accumulation) a step ran with


def _classify(events: list[dict], skip: int, default: Split | None = None) -> list[tuple[float, int | None, Split | None]]:
    """classified_steps, each step with the batch split of the start it belongs to (the rank-0
    `runtime` event before it; `default` for runs recorded before the runner wrote it)."""
    windows = write_windows(events)
    saved = {e["step"] + 1 for e in events if e["event"] == "checkpoint_save"}
    out, since_start, split = [], 0, default
    for e in events:
        if e["event"] == "runtime" and e.get("rank") == 0 and "micro_batch" in e:
            split = (int(e["world_size"]), int(e.get("nodes", split[1] if split else 1)), int(e["micro_batch"]),
                     int(e["accumulation"]))
        elif e["event"] == "start" and e.get("rank") == 0:
            since_start = 0
        elif e["event"] == "step":
            since_start += 1
            if since_start > skip and e["step"] not in saved:
                began = e["t"] - e["step_time_s"]
                out.append((e["step_time_s"], next((i for i, w in enumerate(windows) if beside_write(began, e["t"], w)),
                                                   None), split))
    return out


def classified_steps(events: list[dict], skip: int = SKIP_AFTER_START) -> list[tuple[float, int | None]]:
    """(step time, index into write_windows or None) of the steps after the first `skip` of each
    start, leaving out the steps that paid a checkpoint (its stall or synchronous save)."""
    return [(t, window) for t, window, _ in _classify(events, skip)]


def steady_steps_by_split(events: list[dict], default: Split, skip: int = SKIP_AFTER_START) -> dict[Split, list[float]]:
    """Steady step times (steady_step_times) grouped by the batch split they ran with: a job that
    went on at another world size ran other micro-batches and accumulation, another point of the fit."""
    grouped: dict[Split, list[float]] = {}
    for t, window, split in _classify(events, skip, default):
        if window is None and split is not None:   # never None: a default is given
            grouped.setdefault(split, []).append(t)
    return grouped


def steady_step_times(events: list[dict], skip: int = SKIP_AFTER_START) -> list[float]:
    """Step times after the first `skip` of each start, leaving out steps that paid a checkpoint and
    those that ran beside an async save's background write (slower: async_save_costs charges the
    difference to the checkpoint, where the planner counts it)."""
    return [t for t, window in classified_steps(events, skip) if window is None]


def async_save_costs(events: list[dict], steady_s: float, skip: int = SKIP_AFTER_START) -> list[float]:
    """What each async save cost training: the step that paid its stall, over a steady step (the stall
    and whatever else slowed that step), plus what the steps beside its background write took over as
    many steady steps."""
    steps = classified_steps(events, skip)
    costs = []
    for i, save in enumerate(_async_saves(events)):
        stalled = save["t"] - save["duration_s"]   # the stall began after step `save["step"]`
        paying = next((e["step_time_s"] for e in events if e["event"] == "step" and e["step"] == save["step"] + 1
                       and e["t"] > stalled), None)
        costs.append((paying - steady_s if paying is not None else save["stall_s"])
                     + sum(t - steady_s for t, window in steps if window == i))
    return costs
