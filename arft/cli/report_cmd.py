"""`arft report RUN_DIR`: write the run's self-contained HTML report (arft.report.html).

matplotlib is imported inside the command so `arft --help` stays instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err = Console(stderr=True)


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(2)


def report_cmd(
    run_dir: Path = typer.Argument(..., help="A run directory from `arft train` or `arft eval`."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="HTML file (default: RUN_DIR/report.html)."),
    # The literal, not html.DEFAULT_VIEWER_URL: importing the report module here would slow --help.
    viewer_url: str = typer.Option("http://127.0.0.1:8321", "--viewer-url",
                                   help="Where `arft view` serves rollouts; the report links to it."),
) -> None:
    """Write the run's report: one self-contained HTML file.

    Reward curves, tool calls per rollout before vs after, tool usage, latency and errors,
    tokens, update metrics, and the best and worst rollouts linked to `arft view`.
    """
    from arft.report.html import ReportError, write_report
    from arft.tracing.store import StoreError

    try:
        path = write_report(run_dir, out, viewer_url)
    except (ReportError, StoreError) as e:
        _fail(str(e))
    console.print(f"report written to [bold]{escape(str(path))}[/]")
    console.print(f"browse its rollouts: [bold]arft view {escape(str(run_dir))}[/] "
                  f"(the report links to {escape(viewer_url)})")
