"""Click parameter types shared by both command lines (costsim and runner): units are parsed once,
by costsim.units, whether a value comes from a flag or a file."""

from __future__ import annotations

import click

from costsim.errors import InputError
from costsim.units import parse_duration_s


class Duration(click.ParamType):
    """A duration with its unit: 90s, 5m, 2h, 3d, 1y; `allow_zero` for a cost that may be none."""

    name = "duration"

    def __init__(self, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def convert(self, value, param, ctx):
        if isinstance(value, float):   # already converted (click converts a default once more)
            return value
        try:
            return parse_duration_s(value, source=f"--{param.name.replace('_', '-')}", field=param.name,
                                    allow_zero=self.allow_zero)
        except InputError as exc:
            self.fail(exc.message, param, ctx)


DURATION = Duration()
DURATION_OR_ZERO = Duration(allow_zero=True)
POSITIVE = click.FloatRange(min=0, min_open=True)
# numpy's seed sequences refuse a negative seed (a traceback); 32 bits as every seed in the project fits
SEED = click.IntRange(0, 2**32 - 1)
