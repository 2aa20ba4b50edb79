"""`arft eval`: the argument errors, caught before any model is loaded."""

from __future__ import annotations

from pathlib import Path

from tests.unit.cli.runner import flat, invoke


def test_eval_split_must_be_train_or_validation(tmp_path: Path) -> None:
    out = invoke("eval", str(tmp_path / "job.yaml"), "--split", "test")
    assert out.exit_code == 2
    assert "--split must be train or validation, not 'test'" in flat(out.stderr)


def test_eval_of_a_missing_job_file_exits_2(tmp_path: Path) -> None:
    out = invoke("eval", str(tmp_path / "job.yaml"))
    assert out.exit_code == 2 and "job file not found" in flat(out.stderr)
