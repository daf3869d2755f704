"""How a run's telemetry is read into time figures: the rules every reader shares.

`costsim calibrate` (the profile's figures), `costsim control` (the figures its policy decides on),
`runner report` (what a run measured) and the runner's progress line read steps, starts and exits the
same way, by these rules:

- The first WARMUP_STEPS steps after each start (a launch, a restart) are warm-up: compilation,
  autotuning, staging buffers. Steady steps are the others, less the step that paid a checkpoint's
  stall or synchronous save (counted with the checkpoint).
- What a start costs: from its mark (the instance's start, the supervisor's launch or restart) to the
  end of its warm-up steps, less as many steady steps (`start_cost_s`): the whole price of getting back
  to steady training, first-step compilation included; a warm-up step that paid a checkpoint is left
  out with it, as from the steady steps (the checkpoint is charged on its own). A restart is every
  start after a job's first: a relaunch inside a life, and each later life's launch
  (`restart_costs_s`), from `runner execute`'s own start where its `instance` event says when that was
  (its checks come before its `launch`); the planner's restart_s,
  calibrate's fit, `runner report`'s "restart cost" and `costsim control`'s resume are this figure.
- What a save takes the job (`save_durations`): rank 0's whole duration of each checkpoint save, the
  upload to an object store included: a blocking save (final, notice, a move's) as training waits for
  it, an async one's write behind its stall.
- The job's exit: from its last save (the final one, or the emergency one on a notice) to the moment
  its process is gone and the instance can go (`exit_s`).
"""

from __future__ import annotations

WARMUP_STEPS = 5


def start_cost_s(start_t: float, warm_end_t: float, warm_steps: int, steady_step_s: float) -> float:
    """The price of a (re)start: start mark to the end of its warm-up steps, less as many steady steps."""
    return max(0.0, warm_end_t - start_t - warm_steps * steady_step_s)


def exit_s(last_save_end_t: float, gone_t: float) -> float:
    """The job's exit: from the end of its last save to its process being gone."""
    return max(0.0, gone_t - last_save_end_t)


def is_steady(steps_since_start: int, step: int, paid_steps: set[int] | frozenset[int]) -> bool:
    """A steady step: past the warm-up of its start, and not the step that paid a checkpoint."""
    return steps_since_start > WARMUP_STEPS and step not in paid_steps


def save_durations(events: list[dict]) -> tuple[list[float], list[float]]:
    """Rank 0's checkpoint saves in `events`: the blocking saves' durations, the async writes' durations."""
    saves = [e for e in events if e.get("event") == "checkpoint_save" and e.get("rank") == 0
             and isinstance(e.get("duration_s"), (int, float))]
    return ([float(e["duration_s"]) for e in saves if e.get("mode") == "sync"],
            [float(e["duration_s"]) for e in saves if e.get("mode") == "async"])


def start_cost_after(events: list[dict], since: int, steady_s: float, warmup: int = WARMUP_STEPS,
                     start_t: float | None = None) -> float | None:
    """From events[since] to the end of the warm-up steps after it (those the step fit leaves out),
    less as many steady steps: the whole price of a (re)start, including a first step slowed by
    compilation and autotuning, and later ones slowed by allocating the checkpoint staging buffers.
    A warm-up step that paid a checkpoint (its stall, a synchronous save, the room made for it) is left
    out, as the steady steps leave it out: the planner charges each checkpoint on its own."""
    steps: list[dict] = []
    started, life = False, len(events)
    for i in range(since + 1, len(events)):
        e = events[i]
        # the next start (a relaunch, a new life) ends this one's look, warm or not; a relaunch's own
        # `launch` follows its `restart` event
        if e["event"] in ("restart", "instance") or (e["event"] == "launch" and started):
            life = i
            break
        started = started or e["event"] == "start"
        if e["event"] == "step" and len(steps) < warmup:
            steps.append(e)
    if not steps:
        return None
    paid = {int(e["step"]) + 1 for e in events[since + 1:life]   # a save's stall lands in the next step
            if e["event"] == "checkpoint_save" and e.get("rank") == 0 and isinstance(e.get("step"), int)}
    held = [float(e["step_time_s"]) for e in steps if e.get("step") in paid and isinstance(e.get("step_time_s"),
                                                                                           (int, float))]
    begun = events[since]["t"] if start_t is None else min(start_t, events[since]["t"])
    cost = start_cost_s(begun, steps[-1]["t"], len(steps) - len(held), steady_s) - sum(held)
    return max(0.0, cost)


def first_start_cost_s(events: list[dict], steady_s: float) -> float | None:
    """A run without restarts: its first start's cost and its exit (the planner has one figure for both)."""
    launch = next((i for i, e in enumerate(events) if e["event"] == "launch"), None)
    end = next((e["t"] for e in events if e["event"] == "end"), None)
    done = next((e["t"] for e in events if e["event"] == "exit" and end is not None and e["t"] >= end), None)
    if launch is None or end is None or done is None or any(e["event"] == "restart" for e in events):
        return None
    start = start_cost_after(events, launch, steady_s)
    return None if start is None else start + exit_s(end, done)   # the planner has one figure for both


def first_life_start_cost_s(events: list[dict], steady_s: float) -> float | None:
    """A run whose first life ended at a spot notice: its first start's cost and that life's exit (from the notice's
    decision, any save done, to the restart or the process gone): what a start-up counts, where a run has no start
    without a restart after it."""
    launch = next((i for i, e in enumerate(events) if e["event"] == "launch"), None)
    if launch is None:
        return None
    life = events[launch + 1:]
    restart = next((i for i, e in enumerate(life) if e["event"] == "restart"), len(life))
    notice = next((e for e in life[:restart] if e["event"] == "preempted" and e.get("kind") == "notice"
                   and e.get("rank") == 0), None)
    if notice is None:
        return None
    gone = next((e["t"] for e in life if e["t"] >= notice["t"] and e["event"] in ("restart", "exit")), None)
    start = start_cost_after(events, launch, steady_s)
    return None if gone is None or start is None else start + exit_s(notice["t"], gone)


def restart_costs_s(events: list[dict], steady_s: float) -> list[float]:
    """Each restart's cost on the node's own disk: a relaunch inside a life (`restart`), and every life
    after the first (its `launch`: a new `runner execute` resuming the job after a notice, a kill or a
    move). A fetch from the object store before its first step is left out (the planner adds it from the
    store's read bandwidth)."""
    out = []
    launches = [i for i, e in enumerate(events)   # each life's first launch, node 0's (the others join it)
                if e["event"] == "launch" and e.get("attempt", 0) == 0 and (e.get("node") or 0) == 0]
    for i, e in enumerate(events):
        if e["event"] != "restart" and i not in launches[1:]:
            continue
        cost = start_cost_after(events, i, steady_s, start_t=life_start_t(events, i) if e["event"] == "launch" else None)
        if cost is not None:
            following = events[i + 1:]
            first = next((j for j, x in enumerate(following) if x["event"] in ("step", "restart")), len(following))
            cost -= sum(x.get("duration_s") or 0.0 for x in following[:first] if x["event"] == "checkpoint_fetch")
            out.append(cost)
    return out


def life_start_t(events: list[dict], launch: int) -> float | None:
    """When the `runner execute` of the life whose first launch is events[launch] started: its `instance`
    event's process_start_t (node 0's, the nearest before the launch), where it was recorded."""
    for e in reversed(events[:launch]):
        if e["event"] == "instance" and (e.get("node") or 0) == 0:
            started = e.get("process_start_t")
            return float(started) if isinstance(started, (int, float)) and not isinstance(started, bool) else None
    return None

