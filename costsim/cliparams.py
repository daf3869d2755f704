"""Click parameter types shared by both command lines (costsim and runner): units are parsed once,
by costsim.units, whether a value comes from a flag or a file."""

from __future__ import annotations

import os
from pathlib import Path

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


class Output(click.Path):
    """A file (or, `folder`, a folder) a command will write: refused before the work when a file stands
    where a folder of its path should be, or its folder cannot be written in (a plan of minutes should
    not end in an error about where to put it). Missing folders are made when it is written."""

    def __init__(self, folder: bool = False) -> None:
        super().__init__(dir_okay=folder, file_okay=not folder)

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        path = Path(value)
        ancestor = next((p for p in path.parents if p.exists()), Path("."))
        if not ancestor.is_dir():
            self.fail(f"{value}: {ancestor} is a file, not a folder", param, ctx)
        if not os.access(ancestor, os.W_OK | os.X_OK):   # the output is renamed into it: its folder decides
            self.fail(f"{value}: cannot write there (permissions)", param, ctx)
        return value


class Plot(Output):
    """A figure to write: its suffix names a format matplotlib writes (none: PNG). An unknown one was
    matplotlib's traceback after the work."""

    name = "plot"

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        suffix = Path(value).suffix.lower().lstrip(".")
        if suffix:
            from matplotlib.backend_bases import FigureCanvasBase
            formats = sorted(FigureCanvasBase.get_supported_filetypes())
            if suffix not in formats:
                self.fail(f"{value}: no figure format .{suffix}; allowed: {', '.join(formats)}", param, ctx)
        return value


OUTPUT = Output()
OUTPUT_FOLDER = Output(folder=True)
PLOT = Plot()
