"""Opening the run directory a command was given: its store, or a clear error and exit 2."""

from __future__ import annotations

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
