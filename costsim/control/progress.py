"""Where a job is, read from its run folder's telemetry as the runner writes it (no torch).

The controller builds the policies' `View` from this: the step reached, the last complete
checkpoint, and the figures measured so far (step time, the time from a launch to the first step,
checkpoint saves), all in wall seconds; the controller turns them into trace time.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from costsim.contract.steps import beside_write, write_window
from costsim.contract.telemetry import TELEMETRY, parse_event
from costsim.contract.timing import WARMUP_STEPS, is_steady

RECENT_STEPS = 1000             # the steady steps the step time now is taken over
BLOCK_STEPS = 100               # steps per block of the margin's step-time quantile
NOTICE_REASONS = ("notice", "preemption")   # a save on a notice (the contract's name, and older runs')


@dataclass
class Progress:
    """What the run folder says so far (wall-clock seconds, epoch times)."""

    step: int = 0                    # the last step rank 0 reported (a start reports the step it resumed from)
    step_t: float | None = None      # when it reported it
    stepped_t: float | None = None   # when rank 0 last reported a step it trained (not a start)
    checkpoint_step: int = 0         # the newest complete checkpoint
    done: bool = False               # the job's `end` event was written
    end_t: float | None = None       # when
    first_steps: list[float] = field(default_factory=list)    # launch -> first step, per launch that got one
    first_step_at: list[float] = field(default_factory=list)  # when each of those first steps was reported
    warm_at: list[float] = field(default_factory=list)        # when each start's warm-up (WARMUP_STEPS) ended
    step_times: list[float] = field(default_factory=list)     # steady steps
    step_ends: list[float] = field(default_factory=list)      # when each of them ended (epoch)
    save_s: list[float] = field(default_factory=list)         # checkpoint saves: their full duration
    stall_s: list[float] = field(default_factory=list)        # async saves: the training stall
    exits: list[float] = field(default_factory=list)   # when each supervisor wrote its `exit`
    notice_saved_at: list[float] = field(default_factory=list)   # when each save on a notice (a move) ended
    _since_start: int = 0
    _awaiting_first: float | None = None
    _paid_save_step: int | None = None
    _steps: list[int] = field(default_factory=list)   # the step number of each of step_times

    def charge_async_save(self, save: dict) -> float:
        """An async save's event arrives when its write has finished, after the steps it slowed: the step
        that paid its stall and those beside its write (costsim.contract.steps) leave the steady steps and
        are charged to it, as calibrate charges them. Returns what it cost training: the paying step over a
        steady step (its stall, where that step was not among the steady ones), plus what the steps beside
        its write took over as many steady steps (the mean of the recent steady steps that remain)."""
        window, paying = write_window(save), int(save["step"]) + 1
        stalled = save["t"] - save["duration_s"]   # the stall began after step `save["step"]`
        charged, paid = [], False
        for i, (t, end, step) in enumerate(zip(self.step_times, self.step_ends, self._steps)):
            if step == paying and end > stalled:
                charged.append(i)
                paid = True
            elif beside_write(end - t, end, window):
                charged.append(i)
        slow = [self.step_times[i] for i in charged]
        for i in reversed(charged):
            del self.step_times[i], self.step_ends[i], self._steps[i]
        if not self.step_times:   # nothing steady to weigh them against yet
            return float(save["stall_s"])
        steady = statistics.fmean(self.step_times[-RECENT_STEPS:])
        return max(0.0, (0.0 if paid else float(save["stall_s"])) + sum(t - steady for t in slow))

    def mean_step_s(self) -> float | None:
        return statistics.fmean(self.step_times) if self.step_times else None

    def recent_step_s(self) -> float | None:
        """The step time now: the mean of the last RECENT_STEPS steady steps, or of all of them when
        that is higher (a machine that slows down shows at once; one that speeds up only slowly)."""
        if not self.step_times:
            return None
        return max(statistics.fmean(self.step_times[-RECENT_STEPS:]), statistics.fmean(self.step_times))

    def step_quantile_s(self, q: float) -> float | None:
        """A quantile of the mean step time over blocks of BLOCK_STEPS among the last RECENT_STEPS steady
        steps (the margin's step time): a sustained slowdown shows; one slow step among many does not
        (what the job has left is a sum of many steps, not one)."""
        recent = self.step_times[-RECENT_STEPS:]
        blocks = [statistics.fmean(recent[i:i + BLOCK_STEPS]) for i in range(0, len(recent) - BLOCK_STEPS + 1,
                                                                              BLOCK_STEPS)]
        if len(blocks) < 2:
            return None
        return statistics.quantiles(blocks, n=100, method="inclusive")[min(98, max(0, round(q * 100) - 1))]

    def mean_first_step_s(self) -> float | None:
        return statistics.fmean(self.first_steps) if self.first_steps else None

    def mean_save_s(self) -> float | None:
        return statistics.fmean(self.save_s) if self.save_s else None

    def mean_stall_s(self) -> float | None:
        return statistics.fmean(self.stall_s) if self.stall_s else None


class RunFolder:
    """Follows a run folder's telemetry.jsonl, reading only what was appended since the last call."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / TELEMETRY
        self.progress = Progress()
        self._offset = 0
        self.bad_lines = 0

    def observe(self) -> Progress:
        """Progress after the lines written so far (a line still being written waits for the next call)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return self.progress
        end = chunk.rfind(b"\n")
        if end < 0:
            return self.progress
        self._offset += end + 1
        for line in chunk[:end].split(b"\n"):
            event = parse_event(line)
            if event is not None:
                self._apply(event)
            elif line.strip():   # damage (the contract's rule): counted, said once, passed over
                self.bad_lines += 1
                if self.bad_lines == 1:
                    print(f"costsim control: warning: {self.path} has a damaged line (passed over)",
                          file=sys.stderr, flush=True)
        return self.progress

    def _apply(self, e: dict) -> None:
        p, kind = self.progress, e["event"]
        if kind == "launch":
            p._awaiting_first = e["t"]
        elif kind == "start" and e.get("rank") == 0:
            p.step, p.step_t, p._since_start = int(e["step"]), e["t"], 0
        elif kind == "step":
            p.step, p.step_t, p.stepped_t = int(e["step"]), e["t"], e["t"]
            p._since_start += 1
            if p._since_start == WARMUP_STEPS:
                p.warm_at.append(e["t"])
            if p._awaiting_first is not None:
                p.first_steps.append(e["t"] - p._awaiting_first)
                p.first_step_at.append(e["t"])
                p._awaiting_first = None
            # Steady steps only: not the warm-up, not the step that paid a checkpoint (counted in save_s).
            paid = frozenset() if p._paid_save_step is None else frozenset({p._paid_save_step})
            if "step_time_s" in e and is_steady(p._since_start, p.step, paid):
                p.step_times.append(float(e["step_time_s"]))
                p.step_ends.append(float(e["t"]))
                p._steps.append(p.step)
        elif kind == "checkpoint_save" and e.get("rank") == 0:
            p.checkpoint_step = max(p.checkpoint_step, int(e["step"]))
            p._paid_save_step = int(e["step"]) + 1
            if e.get("reason") in NOTICE_REASONS:
                p.notice_saved_at.append(e["t"])
            if e.get("reason") in (None, "interval"):   # not the final save nor the one on a notice
                p.save_s.append(float(e["duration_s"]))
                if e.get("mode") == "async" and e.get("stall_s") is not None:
                    p.stall_s.append(p.charge_async_save(e))
        elif kind == "end":
            p.done, p.end_t = True, e["t"]
            p.step = int(e.get("step", p.step))
        elif kind == "exit" and e.get("rank") is None:
            p.exits.append(e["t"])

