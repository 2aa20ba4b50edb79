"""The tool-call budget: one count and one penalty for the trainer and the tool_budget grader."""

from __future__ import annotations

import asyncio

import pytest

from arft.budget import budget_penalty, count_calls
from arft.graders.registry import build_grader
from arft.records import ToolCallRecord
from tests.unit.tracing.factories import make_rollout

STATUSES = ["ok", "tool_error", "refused", "parse_error", "ok"]


def test_budget_penalty() -> None:
    assert budget_penalty(3, None, 0.1, "linear") == 0.0
    assert budget_penalty(3, 4, 0.1, "linear") == 0.0
    assert budget_penalty(6, 4, 0.1, "linear") == pytest.approx(0.2)
    assert budget_penalty(6, 4, 0.1, "step") == pytest.approx(0.1)


def test_count_calls_leaves_out_refused_and_unparseable_calls_unless_all() -> None:
    assert count_calls(STATUSES) == 3
    assert count_calls(STATUSES, "all") == 5


def test_trainer_penalty_and_tool_budget_grader_count_the_same_calls(tmp_path) -> None:
    rollout = make_rollout().model_copy(update={"tool_calls": tuple(
        ToolCallRecord(trace_id="trace_x", call_id=f"c{i}", name="t", arguments="{}", output="", status=s)
        for i, s in enumerate(STATUSES))})
    grader = build_grader({"type": "builtin", "name": "tool_budget", "budget": 1, "penalty": 0.25}, tmp_path)
    sample = {"trajectory": {"tool_calls": [{"status": s} for s in STATUSES]}}
    score = asyncio.run(grader.grade(sample, {}))
    n = count_calls(c.status for c in rollout.tool_calls)
    assert score.sub_scores["n_calls"] == n == 3
    assert score.score == pytest.approx(1.0 - budget_penalty(n, 1, 0.25))
