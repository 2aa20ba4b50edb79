"""``arft.errors.ArftError``: every error a command may show derives from it, the commands print it
as one ``error:`` line, and anything else keeps its traceback."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import arft
import arft.cli.merge_cmd
from arft.cli.main import app
from arft.errors import ArftError
from tests.unit.cli.runner import flat, invoke

ROOT = Path(arft.__file__).parent

INTERNAL = {
    "arft.http.BadAnswer": "a 2xx answer a parser cannot use: arft.http retries it like a 5xx",
    "arft.http._Retry": "arft.http's own retry signal",
    "arft.http.HttpFailure": "why retrying_post gave up: its callers turn it into a tool output, a "
                             "grader's error score or an EngineError",
    "arft.http.Rejected": "an HttpFailure (a 4xx): shown to the model or scored, never raised to a command",
    "arft.http.TooLarge": "an HttpFailure (an answer over the size limit): shown to the model",
    "arft.http.Exhausted": "an HttpFailure (retries used up): an infrastructure failure of one call",
    "arft.graders.judge.JudgeError": "a judge that failed or answered badly: that grade's Score.error",
    "arft.graders.builtins.sets.UnparseableError": "a value the sets grader cannot read: a grade's error",
    "arft.graders.builtins.ast_guard.CodeMissing": "the artefact a sample lacks: a grade, not an error",
    "arft.graders.builtins.tests_pass._Problem": "why the tests could not run: that grade's Score.error",
    "arft.sandbox.zygote.ZygoteStartFailed": "carries the CallResult the waiting sandboxed call gets",
    "arft.signing.SignatureError": "raised in a tool server verifying arft's signed requests (answered "
                                   "with 401 there); arft.signing stays standard-library only so "
                                   "servers can copy it",
}
"""Exceptions defined in arft that no command shows: each is caught where it is raised and becomes
something else (a grade's error, a tool output, a retry), or is raised outside arft."""

KEEP_VALUE_ERROR = ["arft.config.JobError", "arft.data.dataset.DatasetError", "arft.data.dataset.RowError",
                    "arft.data.traffic.TrafficImportError", "arft.tools.base.ToolSetupError",
                    "arft.sandbox.workspace.WorkspaceError", "arft.secrets.SecretError",
                    "arft.chat.tool_prompt.ChatFormatError", "arft.chat.constraints.ConstraintError",
                    "arft.rollout.demonstration.DemoError", "arft.metrics.sinks.TrackingError",
                    "arft.app.serve.chat.ServeError"]
"""User errors that stay ValueErrors for code that catches ValueError (each says why beside it)."""


def _module_names() -> list[str]:
    """Every module of the arft package, namespace folders (arft/app/cluster) included."""
    names = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _exception_classes() -> dict[str, type[BaseException]]:
    """``module.Name`` -> class, for every exception class defined in an arft module."""
    found: dict[str, type[BaseException]] = {}
    for name in _module_names():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


def _resolve(dotted: str) -> type[BaseException]:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_every_error_a_command_may_show_is_an_arft_error() -> None:
    classes = _exception_classes()
    assert "arft.config.base.JobError" in classes and "arft.app.cluster.driver.ClusterError" in classes
    not_user_errors = sorted(n for n, c in classes.items() if not issubclass(c, ArftError))
    assert not_user_errors == sorted(INTERNAL), (
        "an exception a command may show must derive from ArftError; one that none shows goes in "
        "INTERNAL with the reason")


@pytest.mark.parametrize("dotted", KEEP_VALUE_ERROR)
def test_user_errors_that_callers_catch_as_value_error_still_are_one(dotted: str) -> None:
    cls = _resolve(dotted)
    assert issubclass(cls, ArftError) and issubclass(cls, ValueError)


def test_a_bad_job_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("model: smollm2-135m-instruct\ntraining_file: [not, a, path]\n")
    out = invoke("eval", str(job))
    assert out.exit_code == 2 and isinstance(out.exception, SystemExit)
    assert out.stderr.startswith("error: ") and out.stderr.count("error:") == 1
    assert "training_file" in flat(out.stderr) and "Traceback" not in out.output + out.stderr


def test_an_arft_error_from_the_library_is_printed_with_its_hint(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    class NoDisk(ArftError):
        hint = "free some space, then run it again"

    def merge_run(run_dir: Path, out_dir: Path) -> Path:
        raise NoDisk("no space left on the output disk")

    monkeypatch.setattr(arft.cli.merge_cmd, "merge_run", merge_run)
    out = invoke("merge", str(tmp_path / "run"), str(tmp_path / "out"))
    assert out.exit_code == 2
    assert out.stderr.splitlines() == ["error: no space left on the output disk",
                                       "hint: free some space, then run it again"]


@pytest.mark.parametrize("error", [RuntimeError("boom"), ValueError("an internal check failed")])
def test_an_internal_error_is_not_swallowed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            error: Exception) -> None:
    def merge_run(run_dir: Path, out_dir: Path) -> Path:
        raise error

    monkeypatch.setattr(arft.cli.merge_cmd, "merge_run", merge_run)
    out = invoke("merge", str(tmp_path / "run"), str(tmp_path / "out"))
    assert out.exit_code == 1 and out.exception is error and "error:" not in out.stderr
    with pytest.raises(type(error)):
        CliRunner().invoke(app, ["merge", str(tmp_path / "run"), str(tmp_path / "out")], catch_exceptions=False)


def test_the_real_command_prints_an_internal_error_s_traceback(tmp_path: Path) -> None:
    code = ("import arft.cli.merge_cmd as m\n"
            "def merge_run(run_dir, out_dir):\n"
            "    raise RuntimeError('boom in merge_run')\n"
            "m.merge_run = merge_run\n"
            "from arft.cli.main import app\n"
            f"app(['merge', {str(tmp_path / 'run')!r}, {str(tmp_path / 'out')!r}])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT.parent)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "RuntimeError: boom in merge_run" in done.stderr
    assert "error:" not in done.stderr
