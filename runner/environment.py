"""The runner's numeric settings from the environment (COSTSIM_S3_FETCH_THREADS and the like).

Modules read them when imported, so a bad value cannot be an error there: the traceback would come before
any command's error handling. `whole` and `real` read one (its default where the value is unset or bad) and
record it; `check` is called by `runner execute` before anything starts and turns the first bad value into the
house's one-line error (exit 2).
"""

from __future__ import annotations

import math
import os

from costsim.errors import InputError

_KNOWN: dict[str, tuple[type, float]] = {}   # name -> (int or float, the least value allowed)


def whole(name: str, default: int, *, minimum: int = 1) -> int:
    """The environment's `name`, a whole number at least `minimum`; `default` when unset or bad (`check` says)."""
    _KNOWN[name] = (int, minimum)
    return default if _problem(name) is not None or name not in os.environ else int(os.environ[name])


def real(name: str, default: float, *, minimum: float) -> float:
    """The environment's `name`, a number at least `minimum`; `default` when unset or bad (`check` says)."""
    _KNOWN[name] = (float, minimum)
    return default if _problem(name) is not None or name not in os.environ else float(os.environ[name])


def check() -> None:
    """The first setting read through `whole` or `real` whose value is not allowed: InputError."""
    for name in _KNOWN:
        problem = _problem(name)
        if problem is not None:
            raise InputError("environment", name, problem)


def _problem(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None:
        return None
    kind, minimum = _KNOWN[name]
    allowed = f"allowed {'a whole number' if kind is int else 'a number'} >= {minimum:g}"
    try:
        parsed = kind(value)
    except ValueError:
        return f"{value!r}: {allowed}"
    return None if math.isfinite(parsed) and parsed >= minimum else f"{value!r}: {allowed}"
