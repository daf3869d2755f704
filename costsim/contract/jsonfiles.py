"""JSON files in and out, and typed field access with errors that name the file and the field.

The yaml-free half of the edge (costsim.io re-exports it): a torchrun worker reads its plan and
writes its telemetry with these, without the planner's dependencies.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from costsim.errors import InputError
from costsim.units import parse_duration_s, parse_positive, parse_probability


def read_json(path: Path) -> dict:
    """A JSON object, or an InputError naming the file."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InputError(str(path), "file", "not found") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "file", f"cannot be read ({exc.__class__.__name__})") from None
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"line {exc.lineno}", "not valid JSON") from None
    if not isinstance(doc, dict):
        raise InputError(str(path), "document", "expected a JSON object")
    return doc


class Records(list):
    """The records of a JSON-lines file, in file order; `damaged`: the numbers of the lines passed over."""

    damaged: tuple[int, ...] = ()


def read_jsonl(path: Path, *, valid: Callable[[object], bool] = lambda record: isinstance(record, dict)) -> Records:
    """The records of a JSON-lines file (telemetry); a missing file has none. A line that does not parse,
    or is not a `valid` record, is passed over and its number kept in `damaged`: a writer killed while
    appending leaves a torn line, and later writers append after it. It is never an error: one damaged
    line must not stop a job or hide the rest of its record (readers say how many they passed over)."""
    path = Path(path)
    records = Records()
    if not path.exists():
        return records
    damaged = []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            record = parse_json_line(line, valid)
            if record is not None:
                records.append(record)
            elif line.strip():
                damaged.append(number)
    records.damaged = tuple(damaged)
    return records


def parse_json_line(line: bytes | str, valid: Callable[[object], bool] = lambda record: isinstance(record, dict)):
    """One line's record, or None when it is blank, torn or not a `valid` record (the one rule for damage)."""
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return record if valid(record) else None


@contextmanager
def replacing(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """A temporary file beside `path` for the block to write (mode as the umask gives); renamed onto `path`
    when the block ends, removed when it raises. An OSError names `path`: the temporary file's name
    (`/out/.plan.json.3vbafo8a`) tells a user nothing. `suffix` ends the temporary name (a writer that
    picks its format by it); none by default, so that a folder's `*.json` never takes one in."""
    path = Path(path)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
        tmp = Path(name)
        try:
            os.fchmod(fd, 0o666 & ~_umask())   # mkstemp makes 0600 files; outputs follow the umask
        finally:
            os.close(fd)
        yield tmp
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        if exc.errno is None:
            raise
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, text: str) -> None:
    """Write text to path via a temporary file in the same folder, flushed to the disk, and a rename."""
    with replacing(path) as tmp, open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Fields:
    """Typed access to a mapping's fields with errors that name the file and the field."""

    def __init__(self, source: str | Path, mapping: dict, prefix: str = ""):
        self.source, self.mapping, self.prefix = str(source), mapping, prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def has(self, key: str) -> bool:
        return self.mapping.get(key) is not None

    def raw(self, key: str, default=...):
        if key not in self.mapping or self.mapping[key] is None or self.mapping[key] == "":
            if default is ...:
                raise InputError(self.source, self.name(key), "missing; add it")
            return default
        return self.mapping[key]

    def text(self, key: str, default=...) -> str:
        value = self.raw(key, default)
        if value is default:
            return value
        if isinstance(value, (datetime.date, datetime.datetime)):
            return value.isoformat()
        if not isinstance(value, (str, int, float)) or isinstance(value, bool) or str(value) == "":
            raise InputError(self.source, self.name(key), f"got {value!r}; expected text")
        return str(value)

    def duration(self, key: str, default=..., allow_zero: bool = False) -> float:
        value = self.raw(key, default)
        if value is default:
            return value
        return parse_duration_s(value, source=self.source, field=self.name(key), allow_zero=allow_zero)

    def number(self, key: str, default=..., integer: bool = False, allow_zero: bool = False):
        value = self.raw(key, default)
        if value is default:
            return value
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        return parse_positive(value, source=self.source, field=self.name(key), integer=integer,
                              allow_zero=allow_zero)

    def probability(self, key: str, default=...) -> float:
        value = self.raw(key, default)
        return value if value is default else parse_probability(value, source=self.source, field=self.name(key))

    def share(self, key: str, default=...) -> float:
        """A share from 0 to 1 inclusive (of trials, of time): where a probability (a target, a weight) must be
        above 0, a share of none is a fact."""
        value = self.raw(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise InputError(self.source, self.name(key), f"got {value!r}; expected a share in [0, 1]")
        return float(value)

    def boolean(self, key: str, default=...) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise InputError(self.source, self.name(key), f"got {value!r}; expected true or false")
        return value

    def mapping_of(self, key: str, default=...) -> "Fields":
        value = self.raw(key, default)
        if value is default:
            return Fields(self.source, {}, self.name(key) + ".")
        if not isinstance(value, dict):
            raise InputError(self.source, self.name(key), "expected a mapping of fields")
        return Fields(self.source, value, self.name(key) + ".")

    def names(self, key: str) -> tuple[str, ...] | None:
        value = self.raw(key, None)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(self.source, self.name(key), f"got {value!r}; expected a list of names")
        return tuple(value)

    def reject_unknown(self, allowed: set[str]) -> None:
        for key in self.mapping:
            if key not in allowed:
                raise InputError(self.source, self.name(str(key)),
                                 f"unknown field; allowed: {', '.join(sorted(allowed))}")
