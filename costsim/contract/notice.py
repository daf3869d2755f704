"""What a job does with a spot notice: save now, or let the checkpoint it has (or is writing) stand.

One rule for the runner (which acts on it) and the simulator (which prices it). At the notice the job
has trained `redo_s` of work since its newest checkpoint (the one being written counts, once it lands);
a save now would keep that work and costs `save_s`; an asynchronous write in flight must finish first
(`wait_s`); the provider reclaims the node `left_s` after now. Saving is worth it only when the work it
keeps is worth more than the time it takes (that time delays the job's exit, and with it the next
life's start: a managed job's recovery, `costsim control`'s next instance), and only when it can land
before the reclaim (a save cut short keeps nothing and delays the exit all the same).

No torch here: the simulator imports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SAVE, KEEP, NOTHING = "save", "keep", "nothing"   # save now; let the newest (or in-flight) checkpoint stand; nothing to save
AUTO, ALWAYS = "auto", "always"   # plan.json checkpoint.notice_save: this rule, or a save at every notice
MODES = (AUTO, ALWAYS)


@dataclass(frozen=True)
class NoticeChoice:
    action: str          # SAVE, KEEP or NOTHING
    reason: str          # for people and the telemetry

    @property
    def save(self) -> bool:
        return self.action == SAVE


def decide(*, redo_s: float, save_s: float, wait_s: float = 0.0, left_s: float = math.inf,
           mode: str = AUTO) -> NoticeChoice:
    """Save at the notice, or not. `redo_s`: work (seconds of training) a save now would keep, counted
    from the newest checkpoint including one in flight; `save_s`: a save's duration; `wait_s`: the rest
    of an asynchronous write in flight (the save starts after it); `left_s`: seconds to the reclaim
    (inf: no deadline known). mode ALWAYS saves whenever there is work to keep, even where the notice
    looks too short (a provider's notice is often longer than promised; a save cut short keeps nothing)."""
    if redo_s <= 0:
        return NoticeChoice(NOTHING, "no step since the newest checkpoint")
    if mode == ALWAYS:
        return NoticeChoice(SAVE, f"checkpoint.notice_save is always ({_s(redo_s)} of training to keep)")
    if wait_s + save_s > left_s:
        return NoticeChoice(KEEP, f"a save ({_s(save_s)}, after {_s(wait_s)} of the write in flight) would "
                                  f"not land in the {_s(max(left_s, 0.0))} left")
    if redo_s <= save_s:
        return NoticeChoice(KEEP, f"{_s(redo_s)} of training since the newest checkpoint cost less to redo than "
                                  f"a save ({_s(save_s)})")
    return NoticeChoice(SAVE, f"{_s(redo_s)} of training to keep, a save takes {_s(save_s)}"
                              + (f" after {_s(wait_s)} of the write in flight" if wait_s > 0 else ""))


def _s(seconds: float) -> str:
    return f"{seconds:.3g} s"
