"""The one error type for bad input: it names the file, the field and what is allowed."""

from __future__ import annotations

import os


class InputError(ValueError):
    """Bad user input; the CLI prints it as one line and exits with status 2."""

    def __init__(self, source: str | os.PathLike, field: str, message: str):
        self.source = str(source)
        self.field = field
        self.message = message
        super().__init__(f"{self.source}: {message}" if _same(self.source, field) else f"{self.source}: {field}: {message}")

    def __reduce__(self):   # raised in a worker process, it crosses back whole (the default passes one argument)
        return (type(self), (self.source, self.field, self.message))


def _same(source: str, field: str) -> bool:
    """A flag and its own field (`--backend`, `backend`): named once."""
    return source.startswith("-") and source.lstrip("-").replace("-", "_") == field.replace("-", "_")


class ModelError(RuntimeError):
    """The inputs are valid but the question has no answer (nothing feasible, for example)."""
