"""tests_pass against a real workspace and real pytest runs in the sandbox.

The workspace holds a small module with one correct and one buggy function, a test file the
"agent" rewrote to pass, and a link it planted; the task's real tests replace them in the copy.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from arft.graders.base import GraderError, build_sample
from arft.graders.builtins.tests_pass import parse_pytest_summary, pytest_fraction
from arft.graders.registry import build_grader
from arft.records import Score

from ..helpers import make_rollout

CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b  # bug\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = {
    "tests/test_calc.py": (
        "from calc import add, sub\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n"
        "def test_add_negative():\n    assert add(-1, -1) == -2\n\n"
        "def test_sub_zero():\n    assert sub(4, 0) == 4\n\n"
        "def test_sub():\n    assert sub(5, 3) == 2\n"),
    "tests/test_link.py": "def test_link():\n    assert True\n",
}


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the grader makes its copies, so the test can check they are removed."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "calc.py").write_text(CALC)
    # The agent "fixed" the tests instead of the code; the real tests must win.
    (ws / "tests" / "test_calc.py").write_text("def test_ok():\n    assert True\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched")
    (ws / "tests" / "test_link.py").symlink_to(outside)
    os.mkfifo(ws / "pipe")  # copying must skip it, not hang on it
    return ws


def snapshot(root: Path) -> dict[str, tuple[str, int, str]]:
    out = {}
    for p in sorted(root.rglob("*")):
        st = os.lstat(p)
        kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "other"
        body = os.readlink(p) if p.is_symlink() else p.read_text() if p.is_file() else ""
        out[str(p.relative_to(root))] = (kind, st.st_mtime_ns, body)
    return out


FAST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
"""The venv's pytest plugins off in the graded runs: pytest starts in ~1 s instead of ~5-10
(hypothesis alone is half of it). Runs with the plugins autoloaded are graded in test_tests_guard
(its ``plugin`` trick)."""


def spec(**extra: Any) -> dict[str, Any]:
    return {"type": "builtin", "name": "tests_pass", "tests": "{{ item.tests }}", "env": FAST_ENV, **extra}


async def grade(ws: Path | None, base_dir: Path, item: dict[str, Any] | None = None,
                **extra: Any) -> Score:
    rollout = make_rollout(item={"tests": TESTS} if item is None else item)
    grader = build_grader(spec(**extra), base_dir)
    return await grader.grade(build_sample(rollout, ws), rollout.item)


async def test_fraction_counts_real_tests_and_leaves_workspace_untouched(
        workspace: Path, scratch: Path, tmp_path: Path) -> None:
    before = snapshot(workspace)
    score = await grade(workspace, tmp_path)
    # Real tests: add x2 pass, sub_zero passes (4 + 0 == 4), sub fails; test_link passes: 4/5.
    assert score.error is None, score.error
    assert score.score == pytest.approx(0.8)
    assert score.sub_scores == {"passed": 4.0, "failed": 1.0, "errors": 0.0}
    assert score.passed is False and score.flags == ()
    assert snapshot(workspace) == before
    assert (tmp_path / "outside.txt").read_text() == "untouched"
    assert list(scratch.iterdir()) == []


async def test_all_or_nothing_and_tests_from_a_directory(workspace: Path, scratch: Path,
                                                         tmp_path: Path) -> None:
    suite = tmp_path / "job" / "suite" / "tests"
    suite.mkdir(parents=True)
    (suite / "test_calc.py").write_text(TESTS["tests/test_calc.py"])
    failing = await grade(workspace, tmp_path / "job", item={}, tests="suite",
                          mode="all_or_nothing")
    assert failing.score == 0.0 and failing.sub_scores["failed"] == 1.0
    assert failing.error is None and failing.passed is False
    (workspace / "calc.py").write_text(FIXED)
    passing = await grade(workspace, tmp_path / "job", item={}, tests="suite",
                          mode="all_or_nothing")
    assert passing.score == 1.0 and passing.passed is True
    assert passing.sub_scores == {"passed": 4.0, "failed": 0.0, "errors": 0.0}


async def test_exit_code_parser_and_env(workspace: Path, scratch: Path, tmp_path: Path) -> None:
    ok = await grade(workspace, tmp_path, item={}, tests=None,
                     command='test "$GREETING" = hi && test -f calc.py', env={"GREETING": "hi"})
    assert ok.score == 1.0 and ok.sub_scores == {"exit_code": 0.0} and ok.passed is True
    bad = await grade(workspace, tmp_path, item={}, tests=None, command="exit 3")
    assert bad.score == 0.0 and bad.sub_scores == {"exit_code": 3.0} and bad.error is None


async def test_timeout_is_a_flagged_zero(workspace: Path, scratch: Path, tmp_path: Path) -> None:
    score = await grade(workspace, tmp_path, item={}, tests=None, command="sleep 30",
                        timeout_s=1)
    assert score.score == 0.0 and score.flags == ("tests:timeout",) and score.error is None
    assert list(scratch.iterdir()) == []


async def test_code_that_exits_early_gets_no_summary(workspace: Path, scratch: Path,
                                                     tmp_path: Path) -> None:
    (workspace / "calc.py").write_text("import os\nos._exit(0)\n")
    score = await grade(workspace, tmp_path)
    assert score.score == 0.0 and score.flags == ("tests:no_summary",) and score.error is None


async def test_problems_of_the_job_are_error_scores(workspace: Path, scratch: Path,
                                                    tmp_path: Path) -> None:
    missing = await grade(None, tmp_path)
    assert missing.error is not None and "rollout.workspace" in missing.error
    gone = await grade(tmp_path / "nope", tmp_path)
    assert gone.error is not None and "no longer exists" in gone.error
    bad_template = await grade(workspace, tmp_path, item={})
    assert bad_template.error is not None and "tests" in bad_template.error
    unsafe = await grade(workspace, tmp_path, item={"tests": {"../evil.py": "x"}})
    assert unsafe.error is not None and "'..'" in unsafe.error
    not_found = await grade(workspace, tmp_path, item={}, tests=None, command="no-such-cmd")
    assert not_found.error is not None and "exit 127" in not_found.error
    no_tests = await grade(workspace, tmp_path, item={}, tests=None,
                           command="python -m pytest -q nothere.py")
    assert no_tests.error is not None and "no tests ran" in no_tests.error
    no_pytest = await grade(workspace, tmp_path, item={}, tests=None, parser="pytest",
                            command="echo 'No module named pytest'; exit 1")
    assert no_pytest.error is not None and "pytest is not installed" in no_pytest.error
    assert list(scratch.iterdir()) == []


def test_bad_spec(tmp_path: Path) -> None:
    with pytest.raises(GraderError, match="field 'tests'"):
        build_grader(spec(tests="no/such/dir"), tmp_path)
    with pytest.raises(GraderError, match="field 'mode'"):
        build_grader(spec(mode="most"), tmp_path)
    with pytest.raises(GraderError, match="field 'timeout_s'"):
        build_grader(spec(timeout_s=0), tmp_path)


@pytest.mark.parametrize("output, expected", [
    ("....F\n1 failed, 4 passed in 0.12s\n", {"passed": 4, "failed": 1, "errors": 0}),
    ("===== 2 passed, 1 skipped, 3 warnings in 1.50s =====",
     {"passed": 2, "failed": 0, "errors": 0, "skipped": 1, "warnings": 3}),
    ("E\n1 error in 0.05s", {"passed": 0, "failed": 0, "errors": 1}),
    ("3 failed, 1 passed, 2 errors in 65.20s (0:01:05)", {"passed": 1, "failed": 3, "errors": 2}),
    ("\x1b[32m5 passed\x1b[0m\x1b[32m in 0.01s\x1b[0m", {"passed": 5, "failed": 0, "errors": 0}),
    ("no tests ran in 0.00s\nERROR: file or directory not found: x", {"passed": 0, "failed": 0,
                                                                       "errors": 0}),
    ("1 passed in 0.1s\n2 failed in 0.2s", {"passed": 0, "failed": 2, "errors": 0}),  # last
    ("1 passed in 0.1s\nprinted: 9 passed in 0.2s", {"passed": 1, "failed": 0, "errors": 0}),
    ("all good, 3 passed", None),
    ("", None),
])
def test_parse_pytest_summary(output: str, expected: dict[str, int] | None) -> None:
    assert parse_pytest_summary(output) == expected


def test_pytest_fraction() -> None:
    assert pytest_fraction({"passed": 3, "failed": 1, "errors": 0, "skipped": 5}) == 0.75
    assert pytest_fraction({"passed": 1, "failed": 1, "errors": 2}) == 0.25
    assert pytest_fraction({"passed": 0, "failed": 0, "errors": 0}) == 0.0
