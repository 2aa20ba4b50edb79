"""`arft grade` and `arft grader validate|audit` (being built: see issue 3)."""

from __future__ import annotations

import typer

grader_app = typer.Typer(no_args_is_help=True, help="Validate and audit graders.")


def grade_cmd() -> None:
    """Grade one sample with a grader (not available yet)."""
    raise typer.Exit(2)
