"""The runner's settings from the environment (COSTSIM_S3_FETCH_THREADS, COSTSIM_WORKER_START and the like).

Modules read them when imported, so a bad value cannot be an error there: the traceback would come before
any command's error handling. `whole`, `real` and `choice` read one (its default where the value is unset or
bad) and record what it allows; `check` is called by `runner execute` before anything starts and turns the
first bad value into the house's one-line error (exit 2).
"""

from __future__ import annotations

import math
import os
from typing import Callable

from costsim.errors import InputError

_KNOWN: dict[str, Callable[[str], str | None]] = {}   # name -> what is wrong with a value (None: nothing)


def whole(name: str, default: int, *, minimum: int = 1) -> int:
    """The environment's `name`, a whole number at least `minimum`; `default` when unset or bad (`check` says)."""
    return int(_read(name, str(default), lambda value: _number(value, int, minimum)))


def real(name: str, default: float, *, minimum: float) -> float:
    """The environment's `name`, a number at least `minimum`; `default` when unset or bad (`check` says)."""
    return float(_read(name, str(default), lambda value: _number(value, float, minimum)))


def choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    """The environment's `name`, one of `allowed`; `default` when unset or bad (`check` says)."""
    return _read(name, default, lambda value: None if value in allowed else f"{value!r}: allowed {', '.join(allowed)}")


def check() -> None:
    """The first setting read through this module whose value is not allowed: InputError."""
    import runner.gcstart  # noqa: F401  the modules that read settings when imported: each is known below
    import runner.lease  # noqa: F401
    import runner.store  # noqa: F401
    import runner.torchrun  # noqa: F401
    for name, problem_of in _KNOWN.items():
        value = os.environ.get(name)
        problem = None if value is None else problem_of(value)
        if problem is not None:
            raise InputError("environment", name, problem)


def _read(name: str, default: str, problem_of: Callable[[str], str | None]) -> str:
    _KNOWN[name] = problem_of
    value = os.environ.get(name)
    return default if value is None or problem_of(value) is not None else value


def _number(value: str, kind: type, minimum: float) -> str | None:
    allowed = f"{value!r}: allowed {'a whole number' if kind is int else 'a number'} >= {minimum:g}"
    try:
        parsed = kind(value)
    except ValueError:
        return allowed
    return None if math.isfinite(parsed) and parsed >= minimum else allowed
