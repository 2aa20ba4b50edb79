"""``RunDir``: every file of a run directory, named in one place.

A run directory (``arft train`` / ``arft eval`` / ``arft doctor`` output) holds::

    arft.sqlite        the run store (runs, rollouts, tool calls, grades, metrics)
    job_path.txt       the job file a training run started from (``arft train --resume``)
    job_overrides.json the ``--set`` overrides it started with (``--resume`` applies them again)
    summary.json       an evaluation's summary (``arft eval``)
    metrics.jsonl      one line of metrics per training step and evaluation
    checkpoints/       step-NNNNNN/ folders and the ``latest`` pointer (``arft train``)
    workspaces/        per-rollout workspaces while rollouts run
    tensorboard/       TensorBoard event files (``logging.tensorboard``)
    wandb_run_id.txt   mlflow_run_id.txt, mlflow.db: the dashboards' run ids (and MLflow's default store)
    report.html        ``arft report``'s default output
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from arft.tracing.store import RunStore, StoreError


class NotARunDirError(StoreError):
    """The folder has no run store: it is not (yet) an arft run directory."""


_CHECKPOINT = re.compile(r"step-(\d{6,})")
"""A complete checkpoint's folder name; one being written is ``.tmp-step-NNNNNN`` until renamed."""


def checkpoint_step(path: Path) -> int | None:
    """The step of a checkpoint folder named ``step-NNNNNN``; None for any other name."""
    m = _CHECKPOINT.fullmatch(path.name)
    return int(m.group(1)) if m else None


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, text: str) -> None:
    """Replace ``path``'s content with ``text`` atomically: a temporary file beside it, fsync,
    rename over it, fsync the folder. A kill or a full disk at any moment leaves the old content
    or the new one, never a mix (the temporary file is removed when the write fails)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


@dataclass(frozen=True)
class RunDir:
    """A run directory's paths. Nothing is created until something writes."""

    path: Path

    @classmethod
    def new(cls, job_path: Path | None, run_dir: str | None, kind: str) -> "RunDir":
        """``run_dir`` (the job's ``run_dir``) when set, else ``runs/<job file stem>-<kind>-<time>``
        under the current directory."""
        if run_dir:
            return cls(Path(run_dir).expanduser().resolve())
        stem = job_path.stem if job_path else "job"
        return cls(Path("runs").resolve() / f"{stem}-{kind}-{time.strftime('%Y%m%d-%H%M%S')}")

    @classmethod
    def of(cls, where: "RunDir | str | Path") -> "RunDir":
        """``where`` as a ``RunDir`` (library callers may pass a plain path)."""
        return where if isinstance(where, RunDir) else cls(Path(where))

    @property
    def store(self) -> Path:
        return self.path / "arft.sqlite"

    @property
    def job_path(self) -> Path:
        """The absolute path of the job file ``arft train`` ran (what ``--resume`` reloads)."""
        return self.path / "job_path.txt"

    @property
    def job_overrides(self) -> Path:
        """The ``--set SECTION.FIELD=VALUE`` texts the run started with (a JSON list), so a
        resumed run reloads the same job."""
        return self.path / "job_overrides.json"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def workspaces(self) -> Path:
        return self.path / "workspaces"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tensorboard"

    @property
    def wandb_run_id(self) -> Path:
        """The W&B run id, so ``arft train --resume`` logs to the same dashboard run."""
        return self.path / "wandb_run_id.txt"

    @property
    def mlflow_run_id(self) -> Path:
        """The MLflow run id, likewise."""
        return self.path / "mlflow_run_id.txt"

    @property
    def mlflow_db(self) -> Path:
        """MLflow's store when ``logging.mlflow`` names no tracking URI."""
        return self.path / "mlflow.db"

    @property
    def report(self) -> Path:
        return self.path / "report.html"

    def complete_checkpoints(self) -> list[Path]:
        """Every complete checkpoint folder (``step-NNNNNN`` holding its ``state.json``, which is
        written last), oldest first. Folders still being written are named ``.tmp-step-NNNNNN``."""
        if not self.checkpoints.is_dir():
            return []
        found = [p for p in self.checkpoints.iterdir()
                 if checkpoint_step(p) is not None and (p / "state.json").is_file()]
        return sorted(found, key=lambda p: checkpoint_step(p) or 0)

    def latest_checkpoint(self) -> Path | None:
        """The checkpoint to resume from: the one ``checkpoints/latest`` names when it is complete;
        else (the pointer missing, or naming a folder that is gone or incomplete) the newest
        complete one; None when there is none. A half-written checkpoint is never picked."""
        pointer = self.checkpoints / "latest"
        if pointer.is_file():
            path = self.checkpoints / pointer.read_text().strip()
            if checkpoint_step(path) is not None and (path / "state.json").is_file():
                return path
        done = self.complete_checkpoints()
        return done[-1] if done else None

    def open_store(self) -> RunStore:
        """The store of an existing run; ``NotARunDirError`` (saying what to pass) when there is
        none. To start a run, use ``RunStore(run_dir.store)``."""
        if not self.store.is_file():
            raise NotARunDirError(f"{self.path} is not an arft run directory (no arft.sqlite): pass "
                                  "the folder that `arft train`, `arft eval` or `arft doctor` printed")
        return RunStore(self.store)
