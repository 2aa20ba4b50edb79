"""Opening the run directory a command was given: its store, or a clear error and exit 2; the
``--set`` overrides a run started with, kept for its ``--resume``."""

from __future__ import annotations

import json
from pathlib import Path

from arft.cli.console import fail
from arft.tracing.run_dir import RunDir
from arft.tracing.store import RunStore, StoreError


def open_run_store(run_dir: Path) -> RunStore:
    """The store of ``run_dir``; a folder that is not a run directory (or a broken store) fails
    the command with the store's message ("... not an arft run directory ...")."""
    try:
        return RunDir(run_dir).open_store()
    except StoreError as e:
        fail(str(e))


def recorded_overrides(run_dir: Path | None) -> list[str]:
    """The ``--set`` overrides the run at ``run_dir`` recorded (none without a run): a resumed run
    applies them again before the command's own, so it trains the job it started with."""
    marker = RunDir(run_dir).job_overrides if run_dir is not None else None
    return list(json.loads(marker.read_text())) if marker is not None and marker.exists() else []


def record_overrides(run_dir: RunDir, overrides: list[str]) -> None:
    """Keep the run's ``--set`` overrides (all of them, recorded ones included) for its ``--resume``."""
    if overrides:
        run_dir.path.mkdir(parents=True, exist_ok=True)
        run_dir.job_overrides.write_text(json.dumps(overrides))
