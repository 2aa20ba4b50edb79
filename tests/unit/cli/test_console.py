"""``arft.cli.console.fail``: every command's error line and exit code."""

from __future__ import annotations

import pytest
import typer

from arft.cli.console import fail


def test_fail_prints_the_error_to_stderr_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as exit_:
        fail("job file not found: job.yaml")
    assert exit_.value.exit_code == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == "error: job file not found: job.yaml\n"


def test_fail_takes_another_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as exit_:
        fail("a check failed", code=1)
    assert exit_.value.exit_code == 1 and "error: a check failed" in capsys.readouterr().err


def test_fail_prints_brackets_as_written_not_as_markup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit):
        fail("runs/[bold]x[/bold] is not an arft run directory")
    assert "runs/[bold]x[/bold] is not an arft run directory" in capsys.readouterr().err


def test_fail_prints_a_hint_under_the_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as exit_:
        fail("no checkpoint yet", hint="train at least one step first")
    assert exit_.value.exit_code == 2
    assert capsys.readouterr().err == "error: no checkpoint yet\nhint: train at least one step first\n"
