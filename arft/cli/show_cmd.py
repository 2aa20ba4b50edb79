"""`arft show RUN_DIR [TRACE_ID]`: one trajectory, readably (or the list of the run's rollouts)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from arft.cli.console import console, fail
from arft.cli.runs import open_run_store
from arft.report.trajectory import render_trajectory


def show_cmd(run_dir: Path = typer.Argument(..., help="A run directory."),
             trace_id: Optional[str] = typer.Argument(None, help="A rollout's trace_id (default: list them).")) -> None:
    """Print one trajectory readably (or list the run's rollouts)."""
    with open_run_store(run_dir) as store:
        if trace_id is None:
            for r in store.rollouts():
                reward = ("—" if r.score is None else "grader error" if r.reward is None
                          else f"{r.reward:.3f}")
                console.print(f"{r.trace_id}  task={r.task_id}  k={r.sample_index}  "
                              f"status={r.status}  reward={reward}  calls={len(r.tool_calls)}")
            return
        try:
            rollout = store.rollout(trace_id)
        except KeyError as e:
            fail(str(e))
        render_trajectory(rollout, console)
