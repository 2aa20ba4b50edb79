"""Where every `arft` command prints: the stdout console, the stderr console, ``fail``, and the
command group that turns a user's error into one ``error:`` line.

Results go to ``console`` (stdout) so they can be piped; progress that must not mix with a
piped result, and errors, go to ``err`` (stderr). Both consoles look up ``sys.stdout`` /
``sys.stderr`` when they print, so test runners that swap the streams capture them.
"""

from __future__ import annotations

from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from arft.errors import ArftError

console = Console()
err = Console(stderr=True)

USER_ERROR_EXIT = 2
"""The exit code of a command stopped by an error the user can fix (``ArftError``, ``fail``)."""


def fail(message: str, code: int = USER_ERROR_EXIT, hint: str | None = None) -> NoReturn:
    """Print ``error: message`` to stderr ("error:" in bold red), then ``hint: ...`` when there is
    one, and exit with ``code``.

    The message is printed as plain text, never as rich markup: paths and JSON with brackets
    come out as written.
    """
    err.print(Text("error: ", style="bold red") + Text(message))
    if hint:
        err.print(Text("hint: ", style="bold") + Text(hint))
    raise typer.Exit(code)


class Commands(TyperGroup):
    """The `arft` command group: an ``ArftError`` raised by any command (a job, an argument or a
    service the user can fix) ends it with ``fail`` — its message and hint, exit code 2.

    Nothing else is caught: any other exception is arft's own bug and keeps its traceback, which
    is what whoever fixes it needs. Commands therefore catch errors only to add what only they
    know (an option's name, the next command to run).
    """

    # ctx: Any because typer declares it with the click it vendors privately (typer._click)
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ArftError as e:
            fail(str(e), hint=e.hint)
