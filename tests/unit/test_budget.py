"""The tool-call budget: one count and one penalty for the trainer and the tool_budget grader."""

from __future__ import annotations

import asyncio

import pytest

from arft.budget import CallUse, budget_penalty, count_calls, critical_path_s, usage
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


def call(turn: int, latency_s: float, status: str = "ok", name: str = "t") -> CallUse:
    return CallUse(name, status, turn, latency_s)


# Turn 0: three calls in parallel (0.3 s, 1.0 s, 0.2 s); turn 1: one call (0.5 s) and a refused
# one; turn 2: only an unparseable call. Critical path 1.0 + 0.5 = 1.5 s over two tool rounds.
TRAJECTORY = [call(0, 0.3), call(0, 1.0), call(0, 0.2, "tool_error"), call(1, 0.5),
              call(1, 9.0, "refused"), call(2, 0.0, "parse_error")]


def test_critical_path_charges_the_slowest_call_of_each_turn() -> None:
    assert critical_path_s(TRAJECTORY) == pytest.approx(1.5)
    # Fixed per-tool costs replace measured latency (deterministic training); unlisted tools
    # keep their measured latency.
    mixed = [call(0, 0.3, name="fast"), call(0, 1.0, name="slow"), call(1, 0.5, name="other")]
    assert critical_path_s(mixed, {"fast": 2.0, "slow": 0.1}) == pytest.approx(2.0 + 0.5)
    assert critical_path_s([]) == 0.0


def test_usage_in_each_unit() -> None:
    assert usage(TRAJECTORY, "calls") == 4  # refused and unparseable calls never ran
    assert usage(TRAJECTORY, "calls", "all") == 6
    # Parallel calls in one turn count once; a turn whose only call was refused or unparseable
    # is no round trip.
    assert usage(TRAJECTORY, "turns") == 2
    assert usage([call(0, 0.1, "refused")], "turns") == 0
    assert usage(TRAJECTORY, "latency") == pytest.approx(1.5)
    # The same four calls made one per turn: four rounds, a critical path of their sum.
    sequential = [call(i, c.latency_s) for i, c in enumerate(TRAJECTORY[:4])]
    assert usage(sequential, "turns") == 4
    assert usage(sequential, "latency") == pytest.approx(0.3 + 1.0 + 0.2 + 0.5)


@pytest.mark.parametrize(("unit", "key", "used"), [("turns", "turns", 2.0),
                                                   ("latency", "latency_s", 1.5)])
def test_tool_budget_grader_and_trainer_agree_in_every_unit(tmp_path, unit: str, key: str,
                                                            used: float) -> None:
    records = tuple(ToolCallRecord(trace_id="trace_x", call_id=f"c{i}", name=c.name, arguments="{}",
                                   output="", status=c.status, turn=c.turn, latency_s=c.latency_s)
                    for i, c in enumerate(TRAJECTORY))
    rollout = make_rollout().model_copy(update={"tool_calls": records})
    spec = {"type": "builtin", "name": "tool_budget", "budget": 1, "penalty": 0.25, "unit": unit}
    grader = build_grader(spec, tmp_path)
    sample = {"trajectory": {"tool_calls": [r.model_dump(mode="json") for r in records]}}
    score = asyncio.run(grader.grade(sample, {}))
    trainer_used = usage(rollout.tool_calls, unit)  # what arft.app.train charges
    assert trainer_used == pytest.approx(used) and score.sub_scores[key] == pytest.approx(used)
    assert score.score == pytest.approx(1.0 - budget_penalty(trainer_used, 1, 0.25))
    assert "budget:over" in score.flags
