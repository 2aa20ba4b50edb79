"""``arft grade --replay RUN_DIR --grader NEW.json``: print old vs new reward per task.

Thin: read the grader spec, call ``arft.app.regrade.regrade``, print a table (or ``--json``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from rich.table import Table

from arft.app.regrade import Regrade, RegradeError, regrade
from arft.cli.console import console, fail
from arft.cli.inputs import read_object_arg
from arft.graders.base import GraderError
from arft.tracing.run_dir import NotARunDirError, RunDir


def _num(value: float | None, failed: int = 0, signed: bool = False) -> str:
    text = "failed" if value is None else (f"{value:+.4f}" if signed else f"{value:.4f}")
    return f"{text} ({failed} failed)" if failed and value is not None else text


def _table(result: Regrade) -> Table:
    table = Table(title=f"re-graded {result.rollouts} rollouts of {', '.join(result.run_ids)}")
    for name, justify in (("task", "left"), ("rollouts", "right"), ("old mean", "right"),
                          ("new mean", "right"), ("delta", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for t in result.tasks:
        delta = t.delta
        style = "" if delta is None or delta == 0 else ("green" if delta > 0 else "red")
        table.add_row(t.task_id, str(t.rollouts), _num(t.old_mean, t.old_failed), _num(t.new_mean, t.new_failed),
                      f"[{style}]{_num(delta, signed=True)}[/]" if style else _num(delta, signed=True))
    overall = (None if result.old_mean is None or result.new_mean is None
               else result.new_mean - result.old_mean)
    table.add_section()
    table.add_row("[bold]overall[/]", str(result.rollouts), _num(result.old_mean, result.old_failed),
                  _num(result.new_mean, result.new_failed), _num(overall, signed=True))
    return table


def regrade_cmd(run_dir: Path, grader: str, run_id: str | None, as_json: bool) -> None:
    spec, base_dir = read_object_arg(grader, "--grader")
    try:
        result = asyncio.run(regrade(RunDir(run_dir.resolve()), spec, base_dir, run_id))
    except (RegradeError, NotARunDirError) as e:
        fail(str(e))
    except GraderError as e:
        fail(str(e), hint="check the spec with: arft grader validate GRADER")
    if not as_json:
        console.print(_table(result))
    typer.echo(json.dumps(result.as_json()))
