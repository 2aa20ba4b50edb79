"""Signals from real rollout records: surprisal from the sampled tokens' logprobs, within-group
correlations, equal-reward groups (solved ones left out) and sub-score shares."""

from __future__ import annotations

import math

import pytest

from arft.monitors.signals import equal_group_share, step_signals, sub_shares, surprisal, within_group_correlation
from arft.records import Message, Rollout, Score
from tests.unit.tracing.factories import make_rollout


def answered(text: str, score: float, **subs: float) -> Rollout:
    """A one-turn rollout answering ``text``, graded ``score`` (with ``subs`` as sub-scores)."""
    r = make_rollout(score=Score(score=score, sub_scores=subs), n_tokens=4)
    return r.model_copy(update={"messages": (*r.messages[:-1], Message(role="assistant", content=text))})


def test_surprisal_is_the_mean_negative_logprob_of_sampled_tokens_only() -> None:
    r = make_rollout(n_tokens=4)  # tokens 2 and 3 sampled, logprobs -3/3 and -4/3
    assert surprisal([r]) == pytest.approx((1.0 + 4 / 3) / 2)
    assert surprisal([make_rollout()]) is None  # no tokens: no estimate, not 0


def test_within_group_correlation_removes_each_groups_level() -> None:
    # across groups the pairs anti-correlate; within each group they move together
    groups = [[(0.0, 10.0), (1.0, 20.0)], [(5.0, 0.0), (6.0, 10.0)]]
    assert within_group_correlation(groups) == pytest.approx(1.0)
    assert within_group_correlation([[(1.0, 3.0), (1.0, 5.0)]]) is None  # the reward does not vary


def test_equal_groups_leave_solved_groups_out() -> None:
    stuck = [answered("a", 0.0), answered("b", 0.0)]
    solved = [answered("a", 1.0), answered("b", 1.0)]
    varied = [answered("a", 0.0), answered("b", 1.0)]
    assert equal_group_share([stuck, solved, varied, stuck]) == 0.5
    assert equal_group_share([[answered("a", 0.0)]]) is None  # no group of two


def test_sub_shares_name_the_sub_score_that_moves_the_reward() -> None:
    group = [answered("a", 0.1 * s + n, answer=s, style=n) for s, n in ((0, 0.9), (1, 0.1), (0, 0.4), (1, 0.7))]
    shares = sub_shares([group])
    assert set(shares) == {"answer", "style"} and math.isclose(sum(shares.values()), 1.0)
    assert shares["style"] > 0.9
    assert sub_shares([[answered("a", 0.5, only=0.5), answered("b", 0.2, only=0.2)]]) == {}  # one sub-score
    # reward = a + b with a and b uncorrelated and equally spread: half each, exactly
    even = [answered("x", a + b, a=a, b=b) for a, b in ((0, 0), (1, 0), (0, 1), (1, 1))]
    assert sub_shares([even]) == pytest.approx({"a": 0.5, "b": 0.5})


def test_step_signals_reads_metrics_and_rollouts() -> None:
    rollouts = [answered("x" * n, n / 100) for n in (10, 20, 30, 40)]
    s = step_signals(3, {"train/reward_mean": 0.25, "update/entropy": 0.3, "update/grad_norm": 1.5,
                         "train/tool_calls_mean": 0.0}, rollouts, group_size=2)
    assert (s.step, s.reward, s.grad_norm, s.tool_calls, s.kl) == (3, 0.25, 1.5, 0.0, None)
    assert s.length == 25.0 and s.length_correlation == pytest.approx(1.0)  # the reward pays for length
    assert s.equal_groups == 0.0 and s.sub_shares == {}
