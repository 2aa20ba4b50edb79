"""Metric sinks: W&B (offline) and MLflow (file store) receive the training metrics, a resumed run
appends to the same dashboard run, and a configured sink that cannot start is a clear error."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from arft.config import JobSpec, LoggingSpec, MlflowSpec, WandbSpec
from arft.metrics.sinks import TrackingError, close_sinks, open_sinks


def job(**logging: object) -> JobSpec:
    return JobSpec.model_validate({
        "method": {"type": "reinforcement", "reinforcement": {
            "grader": {"type": "string_check", "name": "g", "input": "a", "reference": "a", "operation": "eq"}}},
        "logging": LoggingSpec.model_validate(logging).model_dump()})


def test_mlflow_gets_every_finite_metric_and_resume_appends(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="mlflow-skinny is in the tracking extra: run make setup")
    from mlflow.tracking import MlflowClient

    spec = job(tensorboard=False, mlflow=MlflowSpec(experiment="exp").model_dump())
    sinks = open_sinks(spec, tmp_path)
    sinks[0].log(1, {"train/reward_mean": 0.25, "eval/reward_mean": float("nan"), "eval/pass@4": 0.5})
    close_sinks(sinks)
    sinks = open_sinks(spec, tmp_path)  # --resume: same run directory, same MLflow run
    sinks[0].log(2, {"train/reward_mean": 0.75})
    close_sinks(sinks)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = (tmp_path / "mlflow_run_id.txt").read_text().strip()
    history = client.get_metric_history(run_id, "train/reward_mean")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [(1, 0.25), (2, 0.75)]
    assert client.get_metric_history(run_id, "eval/reward_mean") == []  # NaN is not logged as a number
    assert client.get_metric_history(run_id, "eval/pass_at_4")[0].value == 0.5  # '@' is not allowed
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["training.group_size"] == "8"


def test_wandb_offline_run_gets_the_metrics(tmp_path: Path) -> None:
    pytest.importorskip("wandb", reason="wandb is in the tracking extra: run make setup")
    spec = job(tensorboard=False, wandb=WandbSpec(project="arft-test", mode="offline").model_dump())
    sinks = open_sinks(spec, tmp_path)
    sinks[0].log(1, {"train/reward_mean": 0.5})
    sinks[0].log(2, {"train/reward_mean": 0.9, "update/kl": 0.01})
    run = sinks[0]._run  # type: ignore[attr-defined]
    assert run.summary["train/reward_mean"] == 0.9 and run.summary["update/kl"] == 0.01
    assert run.config["training.group_size"] == 8
    close_sinks(sinks)
    run_id = (tmp_path / "wandb_run_id.txt").read_text().strip()
    runs = list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(runs) == 1  # written for `wandb sync`: the metric rows are in the run file
    assert wait_for_bytes(runs[0] / f"run-{run_id}.wandb", [b"train/reward_mean", b"update/kl"])


def wait_for_bytes(path: Path, needles: list[bytes], deadline_s: float = 60.0) -> bool:
    """The wandb-core service process writes the run file after ``finish()`` returns; under load it
    lands a little later. Wait for it (the condition, not the time, is what the test asserts)."""
    end = time.monotonic() + deadline_s
    while True:
        data = path.read_bytes() if path.exists() else b""
        if all(n in data for n in needles):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.2)


def test_tensorboard_is_on_by_default(tmp_path: Path) -> None:
    sinks = open_sinks(job(), tmp_path)
    sinks[0].log(1, {"train/reward_mean": 0.5})
    close_sinks(sinks)
    assert any((tmp_path / "tensorboard").iterdir())


def test_a_configured_sink_that_is_not_installed_is_an_error(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # what `import wandb` sees when it is absent
    with pytest.raises(TrackingError, match="pip install wandb"):
        open_sinks(job(wandb=WandbSpec(project="p").model_dump()), tmp_path)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    with pytest.raises(TrackingError, match="arft\\[tracking\\]"):
        open_sinks(job(tensorboard=False, mlflow=MlflowSpec().model_dump()), tmp_path)
