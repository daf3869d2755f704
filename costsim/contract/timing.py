"""How a run's telemetry is read into time figures: the rules every reader shares.

`costsim calibrate` (the profile's figures), `costsim control` (the figures its policy decides on),
`runner report` (what a run measured) and the runner's progress line read steps, starts and exits the
same way, by these rules:

- The first WARMUP_STEPS steps after each start (a launch, a restart) are warm-up: compilation,
  autotuning, staging buffers. Steady steps are the others, less the step that paid a checkpoint's
  stall or synchronous save (counted with the checkpoint).
- What a start costs: from its mark (the instance's start, the supervisor's launch or restart) to the
  end of its warm-up steps, less as many steady steps (`start_cost_s`): the whole price of getting back
  to steady training, first-step compilation included.
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
