"""`arft export RUN_DIR [-o FILE]`: the run's rollouts as JSONL (``arft.tracing.export``).

The JSONL goes to stdout unless ``--out`` is given; the count goes to stderr so a pipe gets only
the rollouts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from arft.cli.console import err
from arft.cli.runs import open_run_store
from arft.tracing.export import export_rollouts


def export_cmd(run_dir: Path = typer.Argument(..., help="A run directory."),
               out: Optional[Path] = typer.Option(None, "--out", "-o", help="JSONL file (default: stdout).")) -> None:
    """Write one JSON object per rollout (trace_id, task, messages, tool calls, reward, status, ...)."""
    with open_run_store(run_dir) as store:
        if out is None:
            n = export_rollouts(store, sys.stdout)
        else:
            with out.open("w") as f:
                n = export_rollouts(store, f)
    err.print(f"exported {n} rollouts" + (f" to {out}" if out else ""))
