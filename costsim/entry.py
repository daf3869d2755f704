"""The one way both command lines end, and their exit statuses (README "Exit statuses"):

    0   done
    1   the job failed, or the question has no answer (a ModelError: nothing meets the target)
    2   bad input: one line on stderr naming the file or flag, the field and what is allowed
    75  `runner execute` left on a preemption notice (EX_TEMPFAIL: start it again to resume)
    130 interrupted (Ctrl-C)

No traceback reaches the user for any of them."""

from __future__ import annotations

import sys

import click

from costsim.errors import InputError, ModelError

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
# An OSError about a path the user named is bad input; any other (a full disk, an I/O error, a network
# that drops) is not the user's input: the command failed.
BAD_PATH = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, FileExistsError)


def run(group: click.Group, prog_name: str, argv: list[str] | None = None) -> None:
    """Run a click group with the house error contract."""
    try:
        group.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else prog_name
        click.echo(f"error: {command}: {exc.format_message()} (see {command} --help)", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as exc:   # one prefix for every error, click's own too
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except (click.Abort, KeyboardInterrupt):
        click.echo("aborted", err=True)
        sys.exit(130)
    except InputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except ModelError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"error: {where}{exc.strerror or exc}", err=True)
        sys.exit(EXIT_BAD_INPUT if isinstance(exc, BAD_PATH) else EXIT_FAILED)
