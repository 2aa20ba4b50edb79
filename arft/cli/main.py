"""The `arft` command line (entry point ``arft.cli.main:app``): every command, registered here.

Each command lives in its own module (``arft/cli/<name>_cmd.py``) as a thin function: parse the
arguments, call the library (``arft.app`` and friends), print through ``arft.cli.console``. This
module only lists them, in a ``Commands`` group: an ``ArftError`` from any of them is printed as
one ``error:`` line (exit 2); any other exception keeps its traceback. Heavy third-party
packages (torch, transformers, fastapi, matplotlib, ...) are imported where they are used, inside
the library or inside a command, so `arft --help` is instant.
"""

from __future__ import annotations

from typing import Callable

import typer

from arft.cli.console import Commands
from arft.cli.doctor_cmd import doctor_cmd
from arft.cli.eval_cmd import eval_cmd
from arft.cli.export_cmd import export_cmd
from arft.cli.grade_cmd import grade_cmd
from arft.cli.grader_cmd import grader_app
from arft.cli.import_cmd import import_cmd
from arft.cli.merge_cmd import merge_cmd
from arft.cli.report_cmd import report_cmd
from arft.cli.serve_cmd import serve_cmd
from arft.cli.sft_cmd import sft_cmd
from arft.cli.show_cmd import show_cmd
from arft.cli.train_cmd import train_cmd
from arft.cli.view_cmd import view_cmd

# In the order `arft --help` lists them; command groups (`arft grader ...`) come after.
COMMANDS: list[tuple[str, Callable[..., None]]] = [
    ("import", import_cmd),
    ("eval", eval_cmd),
    ("train", train_cmd),
    ("sft", sft_cmd),
    ("merge", merge_cmd),
    ("serve", serve_cmd),
    ("show", show_cmd),
    ("export", export_cmd),
    ("grade", grade_cmd),
    ("doctor", doctor_cmd),
    ("view", view_cmd),
    ("report", report_cmd),
]
GROUPS: list[tuple[str, typer.Typer]] = [
    ("grader", grader_app),
]


def build_app() -> typer.Typer:
    """The `arft` Typer app with every command and command group registered."""
    cli = typer.Typer(cls=Commands, add_completion=False, no_args_is_help=True,
                      help="arft — Agent Reinforcement Fine-Tuning you run yourself.")
    for name, command in COMMANDS:
        cli.command(name)(command)
    for name, group in GROUPS:
        cli.add_typer(group, name=name)
    return cli


app = build_app()

if __name__ == "__main__":
    app()
