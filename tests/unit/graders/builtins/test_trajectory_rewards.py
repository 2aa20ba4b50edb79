"""verification_bonus and tool_budget against hand-built trajectories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arft.graders.base import GraderError, build_sample
from arft.graders.builtins.trajectory_rewards import (VerifyRules, budget_score,
                                                      classify_call, count_tool_calls,
                                                      verification_report)
from arft.graders.registry import build_grader
from arft.records import Score, ToolCallRecord

from ..helpers import make_rollout

TRACE = "trace_" + "cd" * 16


def call(name: str, turn: int, status: str = "ok", output: str = "", **arguments: Any
         ) -> ToolCallRecord:
    return ToolCallRecord(trace_id=TRACE, call_id=f"c{turn}{name}", name=name,
                          arguments=json.dumps(arguments), output=output or "done",
                          status=status, turn=turn)  # type: ignore[arg-type]


def shell(command: str, turn: int, status: str = "ok", output: str = "") -> ToolCallRecord:
    return call("shell", turn, status, output, command=command)


def edit(turn: int) -> ToolCallRecord:
    return call("write_file", turn, path="calc.py", content="def add(a, b):\n    return a + b\n")


async def grade(records: list[ToolCallRecord], tmp_path: Path, **extra: Any) -> Score:
    name = extra.pop("name", "verification_bonus")
    rollout = make_rollout(tool_calls=tuple(records))
    grader = build_grader({"type": "builtin", "name": name, **extra}, tmp_path)
    return await grader.grade(build_sample(rollout), rollout.item)


async def test_tests_run_after_the_last_edit_earn_the_bonus(tmp_path: Path) -> None:
    score = await grade([shell("ls", 0), edit(1), shell("cd repo && python -m pytest -q", 2)],
                        tmp_path)
    assert score.score == 1.0 and score.passed is True and score.flags == ()
    assert score.sub_scores == {"n_verifications": 1.0, "n_edits": 1.0}


async def test_custom_bonus_and_verification_tool(tmp_path: Path) -> None:
    score = await grade([edit(0), call("run_tests", 1)], tmp_path, bonus=0.25)
    assert score.score == 0.25
    other = await grade([edit(0), call("check", 1)], tmp_path, tools=["check"])
    assert other.score == 1.0


async def test_edit_after_verification_is_stale(tmp_path: Path) -> None:
    records = [edit(0), shell("pytest", 1), edit(2)]
    score = await grade(records, tmp_path)
    assert score.score == 0.0 and score.flags == ("verify:stale",) and score.passed is False
    relaxed = await grade(records, tmp_path, require_after_last_edit=False)
    assert relaxed.score == 1.0


async def test_no_verification_and_failed_verification(tmp_path: Path) -> None:
    none = await grade([edit(0), shell("echo pytest", 1), shell("cat test_calc.py", 2)], tmp_path)
    assert none.score == 0.0 and none.flags == ("verify:none",)
    failed = await grade([edit(0), shell("pytest -q", 1, status="tool_error")], tmp_path)
    assert failed.score == 0.0 and failed.flags == ("verify:failed",)
    lenient = await grade([edit(0), shell("pytest -q", 1, status="tool_error")], tmp_path,
                          require_success=False)
    assert lenient.score == 1.0


async def test_verification_in_the_same_turn_as_an_edit_does_not_count(tmp_path: Path) -> None:
    # The two calls ran concurrently: the test run did not see the edit.
    score = await grade([edit(0), shell("pytest", 0)], tmp_path)
    assert score.score == 0.0 and score.flags == ("verify:stale",)


async def test_one_command_that_edits_then_tests(tmp_path: Path) -> None:
    assert (await grade([shell("sed -i s/a/b/ calc.py && pytest -q", 0)], tmp_path)).score == 1.0
    # Tests first, then an edit in the same command line: stale.
    assert (await grade([shell("pytest -q; sed -i s/a/b/ calc.py", 0)], tmp_path)).score == 0.0
    # Writing a file with a heredoc, then testing.
    heredoc = "cat > calc.py <<'EOF'\ndef add(a, b): return a + b\nEOF\npytest -q"
    assert (await grade([shell(heredoc, 0)], tmp_path)).score == 1.0
    # Redirecting the test run's own output is not an edit.
    assert (await grade([edit(0), shell("pytest -q > log.txt 2>&1", 1)], tmp_path)).score == 1.0
    assert (await grade([edit(0), shell("pytest; echo x > f.py", 1)], tmp_path)).score == 0.0


async def test_no_edits_any_verification_counts(tmp_path: Path) -> None:
    assert (await grade([shell("npm test", 0)], tmp_path)).score == 1.0
    assert (await grade([], tmp_path)).flags == ("verify:none",)


async def test_output_patterns_and_custom_edit_tools(tmp_path: Path) -> None:
    ran = shell("pytest -q", 1, output="3 passed in 0.1s")
    fake = shell("pytest --version", 1, output="pytest 8.0")
    assert (await grade([ran], tmp_path, output_patterns=[r"\d+ passed"])).score == 1.0
    assert (await grade([fake], tmp_path, output_patterns=[r"\d+ passed"])).score == 0.0
    # With edit_tools set, only those names are edits: write_file after the test is ignored.
    records = [shell("pytest", 0), edit(1)]
    assert (await grade(records, tmp_path, edit_tools=["save"])).score == 1.0
    assert (await grade(records, tmp_path)).score == 0.0


async def test_custom_command_patterns(tmp_path: Path) -> None:
    records = [edit(0), shell("cd app && ./check.sh --all", 1)]
    assert (await grade(records, tmp_path)).score == 0.0
    assert (await grade(records, tmp_path, patterns=["./check.sh"])).score == 1.0


def test_classify_call() -> None:
    rules = VerifyRules.make()
    assert classify_call("shell", json.dumps({"command": "pytest -q"}), rules) == (False, True)
    assert classify_call("shell", json.dumps({"command": "echo pytest"}), rules) == (False, False)
    assert classify_call("shell", json.dumps({"command": "A=1 .venv/bin/pytest"}), rules) \
        == (False, True)
    assert classify_call("shell", json.dumps({"command": "python -c 'import pytest'"}), rules) \
        == (False, False)
    assert classify_call("shell", json.dumps({"command": "pytest.main"}), rules) == (False, False)
    assert classify_call("run", json.dumps({"argv": ["go", "test", "./..."]}), rules) \
        == (False, True)
    assert classify_call("shell", json.dumps({"command": "rm -rf build"}), rules) == (True, False)
    assert classify_call("shell", json.dumps({"command": "ls > /dev/null"}), rules) \
        == (False, False)
    assert classify_call("apply_patch", json.dumps({"patch": "pytest"}), rules) == (True, False)
    assert classify_call("str_replace_based_edit_tool", "{}", rules) == (True, False)


def test_verification_report_on_plain_dicts() -> None:
    calls = [{"name": "write_file", "arguments": "{}"},
             {"name": "shell", "arguments": json.dumps({"command": "pytest"}), "status": "ok"}]
    report = verification_report(calls)
    assert report.verified_after_last_edit and report.n_edits == 1
    # No ``turn`` keys: taken as sequential, so reversing the order makes it stale.
    stale = verification_report(list(reversed(calls)))
    assert stale.ever_verified and not stale.verified_after_last_edit


async def test_missing_trajectory_is_an_error(tmp_path: Path) -> None:
    for name, extra in (("verification_bonus", {}), ("tool_budget", {"budget": 2})):
        grader = build_grader({"type": "builtin", "name": name, **extra}, tmp_path)
        score = await grader.grade({"output_text": "hi"}, {})
        assert score.error is not None and "trajectory" in score.error and score.score == 0.0


def budget_calls(n_ok: int, n_refused: int = 0, n_parse: int = 0) -> list[ToolCallRecord]:
    records = [call("lookup", i) for i in range(n_ok)]
    records += [call("lookup", 9, status="refused") for _ in range(n_refused)]
    records += [call("", 9, status="parse_error") for _ in range(n_parse)]
    return records


@pytest.mark.parametrize("n, extra, expected", [
    (3, {}, 1.0),
    (4, {}, 1.0),
    (5, {}, 0.9),  # one over x 0.1
    (7, {}, pytest.approx(0.7)),
    (20, {}, 0.0),  # clipped
    (7, {"penalty": 0.25}, 0.25),
    (5, {"kind": "step"}, 0.9),
    (9, {"kind": "step", "penalty": 0.3}, 0.7),
    (9, {"kind": "step", "penalty": 2.0}, 0.0),
])
async def test_tool_budget(tmp_path: Path, n: int, extra: dict[str, Any], expected: Any) -> None:
    score = await grade(budget_calls(n), tmp_path, name="tool_budget", budget=4, **extra)
    assert score.score == expected
    assert score.sub_scores == {"n_calls": float(n)}
    assert score.passed is (n <= 4)
    assert score.flags == (() if n <= 4 else ("budget:over",))


async def test_tool_budget_count_modes(tmp_path: Path) -> None:
    records = budget_calls(3, n_refused=2, n_parse=1)
    executed = await grade(records, tmp_path, name="tool_budget", budget=3)
    assert executed.score == 1.0 and executed.sub_scores == {"n_calls": 3.0}
    every = await grade(records, tmp_path, name="tool_budget", budget=3, count="all")
    assert every.score == pytest.approx(0.7) and every.sub_scores == {"n_calls": 6.0}


@pytest.mark.parametrize("name, bad, field", [
    ("tool_budget", {}, "field 'budget'"),
    ("tool_budget", {"budget": -1}, "field 'budget'"),
    ("tool_budget", {"budget": 2, "kind": "exp"}, "field 'kind'"),
    ("verification_bonus", {"patterns": [" "]}, "field 'patterns'"),
    ("verification_bonus", {"output_patterns": ["("]}, "field 'output_patterns'"),
    ("verification_bonus", {"tool": ["x"]}, "did you mean 'tools'"),
])
def test_bad_spec_names_the_field(tmp_path: Path, name: str, bad: dict[str, Any],
                                  field: str) -> None:
    with pytest.raises(GraderError, match=field):
        build_grader({"type": "builtin", "name": name, **bad}, tmp_path)


def test_plain_budget_functions() -> None:
    assert budget_score(6, 4) == pytest.approx(0.8)
    assert budget_score(6, 4, kind="step") == 0.9
    assert budget_score(0, 0) == 1.0
    calls = [{"status": "ok"}, {"status": "refused"}, {"status": "tool_error"}]
    assert count_tool_calls(calls) == 2 and count_tool_calls(calls, "all") == 3
