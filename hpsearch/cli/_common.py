"""What every command shares: user errors become one message and an exit code."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, TypeVar

import click

from hpsearch.errors import HpsearchError, SpaceError

__all__ = ["handle_errors", "format_error"]

F = TypeVar("F", bound=Callable[..., Any])

#: Exit code for Ctrl-C, as shells report it (128 + SIGINT).
EXIT_INTERRUPTED = 130


def format_error(exc: HpsearchError) -> str:
    """``error: ...``: one line for one problem, a header and an indented list for more.
    Control characters from user input are shown escaped, never sent to the terminal."""
    from hpsearch.store.summary import printable

    if isinstance(exc, SpaceError) and len(exc.issues) == 1:
        return f"error: {printable(exc.issues[0])}"
    return "error: " + "\n".join(printable(line) for line in str(exc).split("\n"))


def handle_errors(func: F) -> F:
    """Decorate a command: an :class:`HpsearchError` prints ``error: <message>`` on stderr
    and exits with ``exc.exit_code``; Ctrl-C exits with 130. Other exceptions are bugs and
    keep their traceback.

    Example:
        >>> @click.command()
        ... @handle_errors
        ... def ls() -> None: ...
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except HpsearchError as exc:
            click.echo(format_error(exc), err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)

    return wrapper  # type: ignore[return-value]
