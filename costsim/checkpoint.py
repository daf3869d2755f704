"""Checkpoint theory as pure functions: Young's and Daly's intervals and Daly's expected wall time.

All times are seconds. `mtbf_s` is the mean time between failures (preemptions) of the whole job,
so a gang of N nodes with independent failures has mtbf_s = node_mtbf_s / N.
"""

from __future__ import annotations

import math


def paid_checkpoint_s(checkpoint_s: float, stall_s: float | None) -> float:
    """What a periodic checkpoint costs training: the async stall when saves are asynchronous
    (`stall_s` not None), else the whole synchronous write."""
    return stall_s if stall_s is not None else checkpoint_s


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young (1974): tau = sqrt(2 * delta * M)."""
    _check_positive(checkpoint_s=checkpoint_s, mtbf_s=mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly (2006) higher-order optimum: compute time between checkpoints."""
    _check_positive(checkpoint_s=checkpoint_s, mtbf_s=mtbf_s)
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = checkpoint_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - checkpoint_s


def daly_expected_wall_s(solve_s: float, interval_s: float, checkpoint_s: float, mtbf_s: float,
                         restart_s: float) -> float:
    """Daly's expected wall time: failures also strike during checkpoints and restarts.

    Tw = M * exp(R/M) * (exp((tau + delta)/M) - 1) * Ts / tau, which assumes Ts is a whole number
    of intervals, each ended by a checkpoint.
    """
    _check_positive(solve_s=solve_s, interval_s=interval_s, mtbf_s=mtbf_s)
    per_segment = mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((interval_s + checkpoint_s) / mtbf_s)
    return per_segment * solve_s / interval_s


def expected_wall_no_failures_s(solve_s: float, interval_s: float, checkpoint_s: float) -> float:
    """Wall time with no failures: the work plus one checkpoint per interval (the last included)."""
    return solve_s + math.ceil(solve_s / interval_s - 1e-9) * checkpoint_s


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")
