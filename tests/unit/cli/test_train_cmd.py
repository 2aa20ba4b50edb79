"""`arft train`: the argument errors, caught before any model is loaded."""

from __future__ import annotations

from pathlib import Path

from tests.unit.cli.runner import flat, invoke


def test_train_needs_a_job_file_or_resume() -> None:
    out = invoke("train")
    assert out.exit_code == 2 and "give a job file (or --resume RUN_DIR)" in flat(out.stderr)


def test_resume_needs_a_run_that_names_its_job(tmp_path: Path) -> None:
    out = invoke("train", "--resume", str(tmp_path))
    assert out.exit_code == 2
    assert "does not say which job file it ran: pass the job file too" in flat(out.stderr)


def test_resume_reloads_the_job_the_run_names(tmp_path: Path) -> None:
    (tmp_path / "job_path.txt").write_text(str(tmp_path / "gone.yaml"))
    out = invoke("train", "--resume", str(tmp_path))
    assert out.exit_code == 2 and "job file not found" in flat(out.stderr)
    assert "gone.yaml" in flat(out.stderr)
