"""Where every `arft` command prints: the stdout console, the stderr console, and ``fail``.

Results go to ``console`` (stdout) so they can be piped; progress that must not mix with a
piped result, and errors, go to ``err`` (stderr). Both consoles look up ``sys.stdout`` /
``sys.stderr`` when they print, so test runners that swap the streams capture them.
"""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

console = Console()
err = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` to stderr ("error:" in bold red) and exit with ``code``.

    The message is printed as plain text, never as rich markup: paths and JSON with brackets
    come out as written.
    """
    err.print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(code)
