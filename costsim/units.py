"""Parsing of durations and other unit-bearing values; one place, used at the edge only."""

from __future__ import annotations

import math
import re

from costsim.errors import InputError

_SECONDS_PER = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 365.0 * 86400.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|[smhdwy]?)\s*$")
UNITS = "ms, s, m, h, d, w, y"
DURATION_HELP = "a positive duration with its unit, such as 90s, 5m, 2h, 3d, 1y"


def parse_duration_s(value, *, source: str, field: str, allow_zero: bool = False) -> float:
    """Seconds from `90s`, `5m`, `2h`, `3d`, `1w`, `1y`. A bare number is refused (36 could be seconds
    or hours; reading it as either has surprised users): only zero, where zero is allowed, needs no unit."""
    allowed = ("zero or " if allow_zero else "") + DURATION_HELP
    if isinstance(value, bool):
        raise InputError(source, field, f"got {value!r}; expected {allowed}")
    match = _DURATION.match(str(value)) if isinstance(value, (str, int, float)) else None
    if not match:
        raise InputError(source, field, f"got {value!r}; expected {allowed}")
    number, unit = float(match.group(1)), match.group(2)
    if not unit and not (number == 0 and allow_zero):
        shown = match.group(1)
        raise InputError(source, field, f"got {shown} without a unit; write it with one of {UNITS} "
                         f"(e.g. {shown}h or {shown}s)")
    seconds = number * _SECONDS_PER[unit or "s"]
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise InputError(source, field, f"got {value!r}; expected {allowed}")
    return seconds


def parse_positive(value, *, source: str, field: str, integer: bool = False,
                   allow_zero: bool = False) -> float:
    """A positive number (or integer), with a message that names the field."""
    kind = "an integer" if integer else "a number"
    bad = isinstance(value, bool) or not isinstance(value, (int, float))
    if not bad and integer and float(value) != int(value):
        bad = True
    if bad or not math.isfinite(float(value)) or value < 0 or (value == 0 and not allow_zero):
        lower = ">= 0" if allow_zero else "> 0"
        raise InputError(source, field, f"got {value!r}; expected {kind} {lower}")
    return int(value) if integer else float(value)


def parse_probability(value, *, source: str, field: str) -> float:
    """A probability strictly between 0 and 1 inclusive of 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise InputError(source, field, f"got {value!r}; expected a probability in (0, 1]")
    return float(value)


def format_duration(seconds: float) -> str:
    """Short human form: 45s, 12.5m, 3.2h, 2.1d."""
    if not math.isfinite(seconds):
        return "never"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def format_probability(p: float) -> str:
    """0.90, and as many digits as a smaller target needs: 0.001, not 0.00."""
    text = f"{p:.2f}"
    return text if abs(float(text) - p) < 1e-9 else f"{p:.3g}"


def finite_or_none(value: float | None) -> float | None:
    """A number for JSON: inf and nan (a trial that never finished) become None."""
    return value if value is None or math.isfinite(value) else None
