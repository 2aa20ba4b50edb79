"""`arft report RUN_DIR`: write the run's self-contained HTML report (``arft.report.html``).

``arft.report.html`` imports matplotlib only when it draws, so importing it here keeps
`arft --help` instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from arft.cli.console import console
from arft.report.html import write_report
from arft.report.report_data import DEFAULT_VIEWER_URL


def report_cmd(
    run_dir: Path = typer.Argument(..., help="A run directory from `arft train` or `arft eval`."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="HTML file (default: RUN_DIR/report.html)."),
    viewer_url: str = typer.Option(DEFAULT_VIEWER_URL, "--viewer-url",
                                   help="Where `arft view` serves rollouts; the report links to it."),
) -> None:
    """Write the run's report: one self-contained HTML file.

    Reward curves, tool calls per rollout before vs after, tool usage, latency and errors,
    tokens, update metrics, and the best and worst rollouts linked to `arft view`.
    """
    path = write_report(run_dir, out, viewer_url)
    console.print(f"report written to [bold]{escape(str(path))}[/]")
    console.print(f"browse its rollouts: [bold]arft view {escape(str(run_dir))}[/] "
                  f"(the report links to {escape(viewer_url)})")
