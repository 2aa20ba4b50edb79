"""summarize on hand-made rollouts with hand-computed numbers."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from arft.records import Score
from arft.metrics.summary import EvalSummary, pass_at_k, percentile, summarize
from tests.unit.tracing.factories import make_rollout


def _s(score: float, passed: bool | None = None, **kw) -> Score:  # type: ignore[no-untyped-def]
    return Score(score=score, passed=passed, **kw)


def _rollouts():  # type: ignore[no-untyped-def]
    """Tasks a (3 graded), b (2 graded + ungraded + grader error + infra failure), c (1)."""
    return [
        make_rollout("a", sample_index=0, score=_s(1.0, sub_scores={"f1": 1.0}), n_tokens=10,
                     calls=[("search", 0), ("search", 0), ("read", 1)]),
        make_rollout("a", sample_index=1, score=_s(0.5, sub_scores={"f1": 0.0},
                     flags=("verbose",)), parse_errors=2, n_tokens=10),
        make_rollout("a", sample_index=2, score=_s(0.2, passed=True), calls=[("search", 0)]),
        make_rollout("b", sample_index=0, score=_s(0.0), finish_reason="max_episode_steps",
                     calls=[("read", 0)] * 6 + [("read", 1)] * 6, failing={0, 1}),
        make_rollout("b", sample_index=1, score=_s(0.5), calls=[("search", 0), ("search", 1)]),
        make_rollout("b", sample_index=2, calls=[("search", 0)]),  # never graded
        make_rollout("b", sample_index=3, score=_s(0.0, error="judge timed out",
                     sub_scores={"f1": 0.9}, flags=("hack",))),
        make_rollout("b", sample_index=4, score=_s(1.0), status="infra_failed",
                     finish_reason="infra_failed", parse_errors=1,
                     calls=[("flaky", 0)] * 5, failing={4}),
        make_rollout("c", score=_s(1.0, passed=True)),
    ]


@pytest.fixture()
def summary() -> EvalSummary:
    return summarize(_rollouts(), histogram_cap=10)


def test_counts(summary: EvalSummary) -> None:
    assert (summary.n_tasks, summary.n_rollouts) == (3, 9)
    assert (summary.samples_per_task_min, summary.samples_per_task_max) == (1, 5)
    assert summary.status_counts == {"infra_failed": 1, "ok": 8}
    assert summary.finish_reason_counts == {"answer": 7, "infra_failed": 1,
                                            "max_episode_steps": 1}
    assert summary.n_infra_failed == 1
    assert summary.flag_counts == {"hack": 1, "verbose": 1}


def test_reward_excludes_infra_failed_and_ungraded(summary: EvalSummary) -> None:
    graded = [1.0, 0.5, 0.2, 0.0, 0.5, 1.0]
    r = summary.reward
    assert (r.n_graded, r.n_ungraded, r.n_grader_errors) == (6, 1, 1)
    assert r.mean == pytest.approx(sum(graded) / 6)
    assert r.std == pytest.approx(statistics.pstdev(graded))
    assert (r.min, r.max) == (0.0, 1.0)
    assert r.sub_score_means == {"f1": pytest.approx(0.5)}  # the errored 0.9 is left out


def test_pass_rate_and_pass_at_k_by_hand(summary: EvalSummary) -> None:
    # passes: a = [1.0 -> pass, 0.5 -> fail, 0.2 passed=True -> pass]; b = [fail, fail]; c = [pass]
    assert summary.pass_rate == pytest.approx(3 / 6)
    assert summary.pass_at_k[1] == pytest.approx((2 / 3 + 0 + 1) / 3)
    # pass@2: a = 1 - C(1,2)/C(3,2) = 1; b = 1 - C(2,2)/C(2,2) = 0; c has 1 sample: left out
    assert summary.pass_at_k[2] == pytest.approx(0.5)
    assert summary.pass_at_k[3] == pytest.approx(1.0)
    assert sorted(summary.pass_at_k) == [1, 2, 3]


def test_pass_at_k_estimator() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))
    assert pass_at_k(4, 0, 3) == 0.0
    with pytest.raises(ValueError, match="more samples"):
        pass_at_k(2, 1, 3)


def test_tool_call_distribution(summary: EvalSummary) -> None:
    t = summary.tool_calls  # per-rollout counts, infra failure excluded: [3,0,1,12,2,1,0,0]
    assert t.mean == pytest.approx(19 / 8)
    assert t.p50 == pytest.approx(1.0)
    assert t.p95 == pytest.approx(3 + (12 - 3) * 0.65)  # position 0.95 * 7 = 6.65
    assert t.max == 12
    assert t.histogram == {"0": 3, "1": 2, "2": 1, "3": 1, "4": 0, "5": 0, "6": 0, "7": 0,
                           "8": 0, "9": 0, ">=10": 1}
    # tool-calling turns: a0 2 (1 parallel), a2 1, b0 2 (2 parallel), b1 2, b2 1
    assert t.n_tool_turns == 8
    assert t.parallel_turn_share == pytest.approx(3 / 8)
    # tool rounds per rollout over the 8 behaviour rollouts: a 2+0+1, b 2+2+1+0, c 0
    assert t.rounds_mean == pytest.approx(8 / 8)
    # critical path (call i takes 0.1 * (i + 1) s; per turn its slowest call): a0 0.2 + 0.3,
    # a2 0.1, b0 0.6 + 1.2 (failed calls ran too), b1 0.1 + 0.2, b2 0.1; the rest 0
    assert t.critical_path_mean_s == pytest.approx((0.5 + 0.1 + 1.8 + 0.3 + 0.1) / 8)
    assert t.critical_path_p95_s == pytest.approx(1.8, abs=0.6)


def test_per_tool_errors_and_latency(summary: EvalSummary) -> None:
    assert sorted(summary.tools) == ["flaky", "read", "search"]
    flaky = summary.tools["flaky"]  # counted although its rollout failed: it shows the fault
    assert (flaky.calls, flaky.errors, flaky.errors_by_status) == (5, 1, {"tool_error": 1})
    assert flaky.error_rate == pytest.approx(0.2)
    assert flaky.mean_latency_s == pytest.approx(0.3)
    assert flaky.p95_latency_s == pytest.approx(0.48)
    read = summary.tools["read"]
    assert (read.calls, read.errors) == (13, 2)
    assert summary.tools["search"].calls == 6 and summary.tools["search"].errors == 0


def test_parse_errors_tokens_timings(summary: EvalSummary) -> None:
    assert summary.parse_errors_total == 2
    assert summary.parse_errors_per_rollout == pytest.approx(2 / 8)
    k = summary.tokens
    assert (k.n_with_tokens, k.mean_tokens, k.mean_sampled_tokens) == (2, 10, 5)
    assert k.sampled_tokens_per_tool_call == pytest.approx(10 / 3)
    assert summary.timings.total_s == pytest.approx(1.75)
    assert summary.timings.generate_s == pytest.approx(1.0)


def test_percentile_matches_linear_interpolation() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([5], 95) == 5
    assert percentile([], 50) is None


def test_summary_is_json_serialisable(summary: EvalSummary) -> None:
    data = json.loads(summary.model_dump_json())
    assert data["pass_at_k"]["2"] == pytest.approx(0.5)
    assert EvalSummary.model_validate_json(summary.model_dump_json()) == summary


def test_empty_and_ungraded_inputs_do_not_invent_zeros() -> None:
    empty = summarize([])
    assert empty.n_rollouts == 0 and empty.reward.mean is None and empty.pass_at_k == {}
    ungraded = summarize([make_rollout()])
    assert ungraded.reward.mean is None and ungraded.pass_rate is None


def test_unparseable_calls_are_parse_errors_not_tool_calls() -> None:
    from tests.unit.tracing.factories import tool_record

    r = make_rollout("t1", score=_s(1.0), calls=[("search", 0)], parse_errors=1)
    bad = tool_record(r.trace_id, "call_parse_error_0_0", "", turn=0, status="parse_error",
                      error="tool call 1: invalid JSON")
    r = r.model_copy(update={"tool_calls": (*r.tool_calls, bad)})
    s = summarize([r])
    assert s.tool_calls.mean == 1 and s.tool_calls.parallel_turn_share == 0.0
    assert set(s.tools) == {"search"} and s.parse_errors_total == 1
