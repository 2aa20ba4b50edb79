"""Metric sinks: where a training run's ``(step, {name: value})`` rows go, behind one interface.

The run store and ``metrics.jsonl`` always get every metric (they are what ``arft report`` reads);
TensorBoard (on by default), Weights & Biases and MLflow mirror the same rows to the dashboards
teams already use.
A sink that is configured in the job but cannot start (library missing, server unreachable) is an
error at the start of the run, never a silent skip: a user who asked for W&B expects to find the
run there. Each sink keeps its run id in the run directory, so ``arft train --resume`` appends to
the same dashboard run instead of starting a new one.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
import warnings
from pathlib import Path
from typing import Any, Protocol

from arft.config import JobSpec, LoggingSpec, MlflowSpec, WandbSpec
from arft.errors import ArftError
from arft.secrets import redact
from arft.tracing.run_dir import RunDir, write_durably
from arft.tracing.store import RunStore


# ValueError too: the warm start (arft.app.expert_iteration) reports a ValueError of its sft step, which
# opens the run's metric sinks, as that step's failure.
class TrackingError(ArftError, ValueError):
    """A configured metric sink could not be started."""


class MetricSink(Protocol):
    """Where a training run's metric rows go."""

    def log(self, step: int, values: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class StoreSink:
    """The run store's ``metrics`` table, under one run id (what ``arft report`` plots)."""

    def __init__(self, store: RunStore, run_id: str) -> None:
        self._store, self._run_id = store, run_id

    def log(self, step: int, values: dict[str, float]) -> None:
        self._store.add_metrics(self._run_id, step, values)

    def close(self) -> None:
        """The store belongs to the run, which closes it."""


class JsonlSink:
    """``RUN_DIR/metrics.jsonl``: one JSON line per row, readable without arft."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def log(self, step: int, values: dict[str, float]) -> None:
        row = {k: v if not isinstance(v, float) or math.isfinite(v) else None for k, v in values.items()}
        with self._path.open("a") as f:  # strict JSON: a missing value is null, never NaN or 0
            f.write(json.dumps({"step": step, **row}) + "\n")

    def close(self) -> None:
        """Every row is written and closed as it is logged."""

    def discard_after(self, step: int, rows_at_step: str = "") -> int:
        """Drop the rows of steps after ``step`` (with ``rows_at_step``, also the step-``step``
        rows whose every metric's name starts with it), and a last line that a kill left
        half-written, by rewriting the file atomically (``write_durably``); returns how many
        lines went. A resumed run calls this before it logs again. Lines that are not rows are
        kept as they are."""
        if not self._path.exists():
            return 0
        lines = self._path.read_text().splitlines(keepends=True)
        kept: list[str] = []
        for i, line in enumerate(lines):
            row_step = _row_step(line)
            if row_step is None and i == len(lines) - 1 and not line.endswith("\n"):
                continue  # the row being appended when the process was killed
            if row_step == step and rows_at_step and _only(line, rows_at_step):
                continue
            if row_step is None or row_step <= step:
                kept.append(line if line.endswith("\n") else line + "\n")
        if kept != lines:
            write_durably(self._path, "".join(kept))
        return len(lines) - len(kept)


def _row_step(line: str) -> int | None:
    """The ``step`` of a metrics.jsonl line; None when the line is not a whole row."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return step if isinstance(step, int) else None


def _only(line: str, prefix: str) -> bool:
    """Whether every metric of a whole metrics.jsonl row is named ``prefix...``."""
    names = [name for name in json.loads(line) if name != "step"]
    return bool(names) and all(name.startswith(prefix) for name in names)


def _finite(values: dict[str, float]) -> dict[str, float]:
    """Drop NaN/inf values (an empty batch's mean): dashboards would plot them as gaps or zeros."""
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def _after_existing_files(folder: Path) -> None:
    """Wait (under a second) until the clock's second is past that of every event file in ``folder``."""
    seconds = [int(part) for f in folder.glob("events.out.tfevents.*")
               if (part := f.name.split(".")[3]).isdigit()] if folder.is_dir() else []
    if seconds and max(seconds) >= int(time.time()):
        time.sleep(max(seconds) + 1 - time.time())


class TensorBoardSink:
    """Event files in ``RUN_DIR/tensorboard``.

    Event files are append-only and cannot be truncated: a run resumed from step K opens the
    writer with ``purge_step=K + 1``, which writes a marker that makes TensorBoard hide the
    interrupted process's events of steps after K (they stay in the older file, unplotted).

    TensorBoard reads a folder's event files in the order of their names,
    ``events.out.tfevents.<second>.<host>.<pid>.<counter>``: a file opened in the same second by
    the same process can sort first (counter 10 before 9), and then the marker hides nothing. So
    a resumed writer opens its file in a later second than every file already there.
    """

    def __init__(self, run_dir: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        folder = RunDir(run_dir).tensorboard
        if purge_step is not None:
            _after_existing_files(folder)
        self._writer = SummaryWriter(log_dir=str(folder), purge_step=purge_step)

    def log(self, step: int, values: dict[str, float]) -> None:
        for name, value in _finite(values).items():
            self._writer.add_scalar(name, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """One W&B run per run directory (its id kept in ``RUN_DIR/wandb_run_id.txt``)."""

    def __init__(self, spec: WandbSpec, run_dir: Path, config: dict[str, object]) -> None:
        try:
            import wandb
        except ImportError as e:
            raise TrackingError("logging.wandb is set but wandb is not installed: `pip install wandb` "
                                "(or remove logging.wandb from the job)") from e
        id_file = RunDir(run_dir).wandb_run_id
        run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
        id_file.write_text(run_id)
        try:
            self._run = wandb.init(project=spec.project, entity=spec.entity, name=spec.name or run_dir.name,
                                   tags=spec.tags, mode=spec.mode, dir=str(run_dir), id=run_id,
                                   resume="allow", config=config, reinit="create_new")
        except Exception as e:  # wandb raises its own errors (auth, network)
            raise TrackingError(f"wandb could not start a run ({type(e).__name__}: {e}); run `wandb login`, "
                                "or set logging.wandb.mode: offline and `wandb sync` later") from e

    def log(self, step: int, values: dict[str, float]) -> None:
        self._run.log(_finite(values), step=step, commit=True)  # a row per step, now (not at the next step)

    def close(self) -> None:
        self._run.finish()


class MlflowSink:
    """One MLflow run per run directory (its id kept in ``RUN_DIR/mlflow_run_id.txt``)."""

    def __init__(self, spec: MlflowSpec, run_dir: Path, params: dict[str, object]) -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as e:
            raise TrackingError("logging.mlflow is set but mlflow is not installed: `pip install "
                                "'arft[tracking]'` (mlflow-skinny + sqlalchemy), or remove logging.mlflow "
                                "from the job") from e
        uri = spec.tracking_uri or f"sqlite:///{RunDir(run_dir).mlflow_db.resolve()}"
        self._client = MlflowClient(tracking_uri=uri)
        id_file = RunDir(run_dir).mlflow_run_id
        try:
            if id_file.exists():
                self._run_id = id_file.read_text().strip()
                self._client.update_run(self._run_id, status="RUNNING")
            else:
                exp = self._client.get_experiment_by_name(spec.experiment)
                exp_id = exp.experiment_id if exp else self._client.create_experiment(spec.experiment)
                run = self._client.create_run(exp_id, run_name=spec.run_name or run_dir.name)
                self._run_id = run.info.run_id
                id_file.write_text(self._run_id)
                for key, value in list(params.items())[:100]:
                    self._client.log_param(self._run_id, key, str(value)[:500])
        except Exception as e:  # mlflow raises its own errors (unreachable server, bad URI)
            raise TrackingError(f"mlflow could not start a run at {uri} ({type(e).__name__}: {e}); "
                                "check logging.mlflow.tracking_uri") from e

    def log(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = _now_ms()
        metrics = [Metric(mlflow_name(name), value, now, step) for name, value in _finite(values).items()]
        if metrics:
            self._client.log_batch(self._run_id, metrics=metrics)

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


def mlflow_name(name: str) -> str:
    """``name`` in the characters MLflow allows (``eval/pass@4`` -> ``eval/pass_at_4``)."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", name.replace("@", "_at_"))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _flat_params(job: JobSpec) -> dict[str, Any]:
    """The job's settings as flat ``section.key`` parameters for the dashboards, secrets redacted
    (``arft.secrets.redact``)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = value

    dumped = redact(job.model_dump(mode="json"))
    dumped["method"] = {"grader": dumped["method"]["reinforcement"]["grader"].get("type"),
                        "hyperparameters": dumped["method"]["reinforcement"]["hyperparameters"]}
    walk("", dumped)
    return out


def open_sinks(job: JobSpec, run_dir: Path, store: RunStore | None = None,
               run_id: str = "", resumed_from: int | None = None) -> list[MetricSink]:
    """The run's sinks: ``store`` (under ``run_id``) and ``metrics.jsonl`` when a store is given,
    then the dashboards ``job.logging`` asks for; raises ``TrackingError`` when one cannot start.

    ``resumed_from``: the checkpoint step a resumed run continues from. The caller has already
    dropped the store's and metrics.jsonl's rows after it (``arft.app.resume.rewind``);
    TensorBoard hides its events after it (``TensorBoardSink``). W&B and MLflow cannot delete
    logged values: for the re-run steps W&B keeps the interrupted process's rows (it ignores a
    step logged again), MLflow shows both."""
    spec: LoggingSpec = job.logging
    sinks: list[MetricSink] = []
    if store is not None:
        sinks += [StoreSink(store, run_id), JsonlSink(RunDir(run_dir).metrics)]
    try:
        if spec.tensorboard:
            sinks.append(_tensorboard(run_dir, None if resumed_from is None else resumed_from + 1))
        if spec.wandb is not None:
            sinks.append(WandbSink(spec.wandb, run_dir, _flat_params(job)))
        if spec.mlflow is not None:
            sinks.append(MlflowSink(spec.mlflow, run_dir, _flat_params(job)))
    except BaseException:
        close_sinks(sinks)
        raise
    return sinks


def _tensorboard(run_dir: Path, purge_step: int | None) -> MetricSink:
    try:
        return TensorBoardSink(run_dir, purge_step)
    except ImportError as e:
        raise TrackingError("TensorBoard logging needs the tensorboard package: `pip install tensorboard` "
                            "(or set logging.tensorboard: false)") from e


def log_all(sinks: list[MetricSink], step: int, values: dict[str, float]) -> None:
    """One metric row to every sink."""
    for sink in sinks:
        sink.log(step, values)


def close_sinks(sinks: list[MetricSink]) -> None:
    """Close every sink (each one's failure is not allowed to stop the others from closing)."""
    for sink in sinks:
        try:
            sink.close()
        except Exception as e:  # noqa: BLE001 - closing a dashboard run must not lose the training run
            warnings.warn(f"closing {type(sink).__name__} failed: {type(e).__name__}: {e}", stacklevel=2)
