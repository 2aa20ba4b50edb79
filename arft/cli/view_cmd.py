"""`arft view RUN_DIR`: serve the run viewer (arft.report.viewer) on this machine until Ctrl-C.

FastAPI and uvicorn (and ``arft.report.viewer``, which is built on FastAPI) are imported inside
the command so `arft --help` stays instant.
"""

from __future__ import annotations

from pathlib import Path

import typer

from arft.cli.console import console, fail
from arft.serving import port_problem


def view_cmd(
    run_dir: Path = typer.Argument(..., help="A run directory (the folder with arft.sqlite)."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (default: this machine only)."),
    port: int = typer.Option(8321, help="Port to listen on."),
) -> None:
    """Browse a run's rollouts in the browser: filterable list, one page per rollout, JSON API."""
    import uvicorn  # a web server: only when serving, not at `arft --help` time

    from arft.report.viewer import create_app  # imports fastapi: lazy for the same reason

    app = create_app(run_dir.resolve())
    problem = port_problem(host, port, "another `arft view`?")
    if problem:
        fail(problem)
    console.print(f"viewing [bold]{run_dir}[/] at [bold]http://{host}:{port}/[/]  "
                  "(Ctrl-C to stop)")
    uvicorn.run(app, host=host, port=port, log_level="warning")
