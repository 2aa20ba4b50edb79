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


def test_store_and_jsonl_sinks_get_the_same_row(tmp_path: Path) -> None:
    import json
    import math

    from arft.metrics.sinks import JsonlSink, StoreSink, log_all
    from arft.tracing.run_dir import RunDir
    from arft.tracing.store import RunStore

    with RunStore(RunDir(tmp_path).store) as store:
        store.create_run("train", "train", {})
        store.create_run("other", "eval", {})
        sinks = open_sinks(job(tensorboard=False), tmp_path, store, "train")
        assert [type(s) for s in sinks] == [StoreSink, JsonlSink]
        row = {"train/reward_mean": 0.25, "update/tokens": 12.0, "eval/pass@4": 1.0, "eval/reward_mean": float("nan")}
        log_all(sinks, 3, row)
        log_all(sinks, 4, {"train/reward_mean": 0.5})
        close_sinks(sinks)
        stored = store.metrics("train")
        assert store.metrics("other") == []  # under the run id it was given only
    lines = [json.loads(x) for x in RunDir(tmp_path).metrics.read_text().splitlines()]
    assert lines[0]["step"] == 3 and set(lines[0]) == {"step", *row}
    assert lines[1] == {"step": 4, "train/reward_mean": 0.5}
    from_store: dict[int, dict[str, float]] = {}
    for r in stored:
        from_store.setdefault(r["step"], {})[r["name"]] = r["value"]
    # a value-less metric may be written as NaN or null; either way it must not read as a number
    from_jsonl = {line["step"]: {k: math.nan if v is None else v for k, v in line.items() if k != "step"}
                  for line in lines}
    assert from_store.keys() == from_jsonl.keys() == {3, 4}
    for step, values in from_jsonl.items():
        assert from_store[step].keys() == values.keys()
        for name, v in values.items():  # the same values; NaN stays NaN in both, never 0
            assert (math.isnan(v) and math.isnan(from_store[step][name])) or from_store[step][name] == v
    assert math.isnan(from_store[3]["eval/reward_mean"])


def test_without_a_store_no_store_or_jsonl_sink(tmp_path: Path) -> None:
    from arft.metrics.sinks import JsonlSink, StoreSink, log_all

    sinks = open_sinks(job(tensorboard=False), tmp_path)
    assert not any(isinstance(s, (StoreSink, JsonlSink)) for s in sinks)
    log_all(sinks, 1, {"train/reward_mean": 0.5})
    close_sinks(sinks)
    assert not (tmp_path / "metrics.jsonl").exists()


def test_metrics_jsonl_is_strict_json_even_with_nan(tmp_path: Path) -> None:
    import json

    from arft.metrics.sinks import JsonlSink

    def strict(constant: str) -> float:
        raise ValueError(f"{constant} is not JSON")

    JsonlSink(tmp_path / "metrics.jsonl").log(2, {"train/task_reward_mean": float("nan"), "update/tokens": 3.0})
    row = json.loads((tmp_path / "metrics.jsonl").read_text(), parse_constant=strict)
    assert row["step"] == 2 and row["update/tokens"] == 3.0
    assert row.get("train/task_reward_mean") != 0  # no value must not read as a zero


def test_jsonl_discard_after_keeps_earlier_rows_and_drops_a_half_written_line(tmp_path: Path) -> None:
    import json

    from arft.metrics.sinks import JsonlSink

    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for step in (0, 1, 2, 3, 3):
        sink.log(step, {"train/reward_mean": step / 4})
    path.write_text(path.read_text() + "not json, written by hand\n" + '{"step": 4, "train/rew')  # killed
    assert sink.discard_after(2) == 3  # two step-3 rows and the torn line
    lines = path.read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines[:3]] == [0, 1, 2] and lines[3] == "not json, written by hand"
    assert sink.discard_after(2) == 0  # idempotent
    sink.log(3, {"train/reward_mean": 0.75})
    assert json.loads(path.read_text().splitlines()[-1]) == {"step": 3, "train/reward_mean": 0.75}
    assert not list(tmp_path.glob(".*tmp"))  # the atomic rewrite left no temporary file
    assert JsonlSink(tmp_path / "none.jsonl").discard_after(1) == 0


@pytest.mark.parametrize("counter", ["as_it_is", "rolls_over"])
def test_tensorboard_hides_the_steps_a_resumed_run_logs_again(tmp_path: Path, counter: str) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.summary.writer import event_file_writer

    if counter == "rolls_over":  # the two files' counters 9 and 10 (or 99, 100): "10" sorts before "9"
        while len(str(event_file_writer._global_uid._value + 1)) == len(str(event_file_writer._global_uid._value)):
            event_file_writer._global_uid.get()
    first = open_sinks(job(), tmp_path)
    for step in (1, 2, 3):
        first[0].log(step, {"train/reward_mean": float(step)})
    close_sinks(first)
    resumed = open_sinks(job(), tmp_path, resumed_from=1)  # from the step-1 checkpoint
    for step in (2, 3):
        resumed[0].log(step, {"train/reward_mean": 10.0 * step})
    close_sinks(resumed)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/reward_mean")] == [(1, 1.0), (2, 20.0), (3, 30.0)]


def test_jsonl_discard_after_can_drop_the_rows_of_one_kind_at_the_checkpoints_step(tmp_path: Path) -> None:
    import json

    from arft.metrics.sinks import JsonlSink

    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    sink.log(0, {"eval/reward_mean": 0.0})
    sink.log(2, {"train/reward_mean": 0.5, "update/tokens": 3.0})
    sink.log(2, {"eval/reward_mean": 0.25})
    sink.log(2, {"eval/reward_mean": 0.5, "train/x": 1.0})  # not only eval/ names: kept
    assert sink.discard_after(2, rows_at_step="eval/") == 1
    assert [sorted(json.loads(x)) for x in path.read_text().splitlines()] == [
        ["eval/reward_mean", "step"], ["step", "train/reward_mean", "update/tokens"],
        ["eval/reward_mean", "step", "train/x"]]
