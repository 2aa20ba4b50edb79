"""Group-relative advantages as a pure function, and the reward shaping of a batch before them
(groups, missing rewards, the budget penalty) as a function of stored-shape rollouts."""

from __future__ import annotations

import math
from typing import Any

import pytest

from arft.budget import count_calls
from arft.config import JobSpec
from arft.records import Rollout, Score
from arft.trainer.advantages import BatchAdvantages, batch_advantages, group_advantages
from tests.unit.tracing.factories import make_rollout, tool_record


def test_mean_centred_and_std_normalised() -> None:
    a = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert not a.dropped
    assert a.values == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    b = group_advantages([1.0, 0.0, 0.5], normalize_std=False)
    assert b.values == pytest.approx([0.5, -0.5, 0.0])


def test_zero_variance_is_dropped() -> None:
    a = group_advantages([0.7, 0.7, 0.7])
    assert a.dropped and a.values == (None, None, None) and "variance" in a.reason


@pytest.mark.parametrize("rewards", [[1.0], [], [None, 1.0], [float("nan"), 0.3]])
def test_fewer_than_two_usable_rewards_dropped(rewards: list) -> None:
    a = group_advantages(rewards)
    assert a.dropped and all(v is None for v in a.values) and len(a.values) == len(rewards)


def test_missing_and_non_finite_rewards_get_no_advantage() -> None:
    a = group_advantages([1.0, None, float("inf"), 0.0, float("nan")], normalize_std=False)
    assert a.values == (0.5, None, None, -0.5, None)


def test_huge_magnitudes_stay_exact() -> None:
    a = group_advantages([1e300, 1e300, 1e300])
    assert a.dropped  # no variance, no overflow
    b = group_advantages([1e9 + 1.0, 1e9], normalize_std=False)
    assert b.values == pytest.approx([0.5, -0.5])
    c = group_advantages([1e308, -1e308])
    assert all(v is not None and math.isfinite(v) for v in c.values)
    assert c.values[0] > 0 > c.values[1]


def _advantages(job: JobSpec, rollouts: list[Rollout], group_size: int) -> BatchAdvantages:
    """The advantages ``arft train`` computes for ``job``'s batch."""
    return batch_advantages(rollouts, group_size, job.budget, job.training.normalize_std)


def spec(normalize_std: bool = True, **budget: Any) -> JobSpec:
    return JobSpec.model_validate({
        "method": {"type": "reinforcement", "reinforcement": {
            "grader": {"type": "string_check", "name": "g", "input": "a", "reference": "a", "operation": "eq"}}},
        "training": {"normalize_std": normalize_std}, "budget": budget})


def scored(score: float | None, error: str | None = None, **kw: Any) -> Rollout:
    return make_rollout(score=None if score is None else Score(score=score, error=error), **kw)


def with_calls(r: Rollout, statuses: list[str]) -> Rollout:
    calls = tuple(tool_record(r.trace_id, f"c{i}", status=s) for i, s in enumerate(statuses))
    return r.model_copy(update={"tool_calls": calls})


def test_groups_of_group_size_in_order() -> None:
    rollouts = [scored(1.0), scored(0.0), scored(0.5), scored(0.5), scored(0.0), scored(1.0)]
    adv, m = _advantages(spec(), rollouts, 2)
    assert adv == pytest.approx([1.0, -1.0, None, None, -1.0, 1.0], abs=1e-4)
    assert m["train/groups"] == 3.0 and m["train/groups_dropped"] == 1.0  # no variance in group 2
    assert m["train/task_reward_mean"] == pytest.approx(0.5)
    assert m["train/budget_penalty_mean"] == 0.0


def test_a_missing_reward_gets_no_advantage_and_is_not_a_zero() -> None:
    grader_error = scored(0.0, error="g: ZeroDivisionError")  # the placeholder 0.0 is no reward
    infra = scored(None, status="infra_failed", finish_reason="infra_failed")
    assert grader_error.reward is None and infra.reward is None
    rollouts = [scored(1.0), grader_error, scored(0.5), infra, scored(0.5), scored(0.0)]
    adv, m = _advantages(spec(normalize_std=False), rollouts, 3)
    # group 1: mean of (1.0, 0.5) = 0.75; group 2: mean of (0.5, 0.0) = 0.25
    assert adv == pytest.approx([0.25, None, -0.25, None, 0.25, -0.25])
    assert m["train/task_reward_mean"] == pytest.approx(2.0 / 4)  # over the 4 graded rollouts only
    assert m["train/groups_dropped"] == 0.0

    alone = [scored(1.0), grader_error]  # one graded rollout: no group statistics, no gradient
    adv, m = _advantages(spec(), alone, 2)
    assert adv == [None, None] and m["train/groups_dropped"] == 1.0

    nothing = [infra, infra]
    adv, m = _advantages(spec(), nothing, 2)
    assert adv == [None, None] and math.isnan(m["train/task_reward_mean"])  # NaN, not 0


@pytest.mark.parametrize("kind, penalty", [("linear", 0.5), ("step", 0.25)])
def test_budget_penalty_counts_executed_calls(kind: str, penalty: float) -> None:
    statuses = ["ok", "tool_error", "ok", "refused", "parse_error"]  # 3 ran; 2 never did
    assert count_calls(statuses) == 3
    busy = with_calls(scored(1.0), statuses)
    idle = with_calls(scored(0.0), ["ok"])
    job = spec(normalize_std=False, soft_limit=1, penalty=0.25, kind=kind)
    adv, m = _advantages(job, [busy, idle], 2)
    # busy: 2 calls over the limit of 1 -> 0.25 each (linear) or 0.25 once (step)
    shaped = 1.0 - penalty
    assert adv == pytest.approx([shaped / 2, -shaped / 2])
    assert m["train/budget_penalty_mean"] == pytest.approx(penalty / 2)
    assert m["train/task_reward_mean"] == pytest.approx(0.5)  # the task reward, before the penalty
    no_budget, _ = _advantages(spec(normalize_std=False), [busy, idle], 2)
    assert no_budget == pytest.approx([0.5, -0.5])


def test_budget_penalty_in_turns_and_latency() -> None:
    """Three parallel calls in one turn are one tool round; the critical path charges the slowest."""
    parallel = make_rollout(score=Score(score=1.0)).model_copy(update={"tool_calls": tuple(
        tool_record("t", f"c{i}", name=name) for i, name in enumerate(["a", "b", "c"]))})
    sequential = make_rollout(score=Score(score=1.0)).model_copy(update={"tool_calls": tuple(
        tool_record("t", f"c{i}", name=name, turn=i)
        for i, name in enumerate(["a", "b", "c"]))})
    costs = {"a": 1.0, "b": 3.0, "c": 2.0}
    turns = spec(normalize_std=False, unit="turns", soft_limit=1, penalty=0.1)
    _, m = _advantages(turns, [parallel, sequential], 2)
    assert m["train/budget_penalty_mean"] == pytest.approx((0.0 + 0.2) / 2)  # 1 round vs 3
    latency = spec(normalize_std=False, unit="latency", soft_limit=2, penalty=0.1, tool_costs=costs)
    adv, m = _advantages(latency, [parallel, sequential], 2)
    # parallel: max(1, 3, 2) = 3 s, 1 s over; sequential: 1 + 3 + 2 = 6 s, 4 s over
    assert m["train/budget_penalty_mean"] == pytest.approx((0.1 + 0.4) / 2)
    assert adv == pytest.approx([0.15, -0.15])  # same task reward: the faster agent wins


def test_a_rescued_groups_own_rollouts_only_set_the_baseline_when_asked() -> None:
    # group 1 was rescued by the hint (its last two are hinted successes); group 2 by exploring;
    # group 3 is an ordinary group
    def rescued(r: Rollout, how: str) -> Rollout:
        return r.model_copy(update={"rescued": how})

    hinted = [scored(0.0), scored(0.0), rescued(scored(1.0), "none"), rescued(scored(1.0), "tis")]
    explored = [scored(0.0), scored(0.0), scored(0.0), rescued(scored(1.0), "explore")]
    plain = [scored(0.0), scored(1.0), scored(0.0), scored(1.0)]
    rollouts = hinted + explored + plain
    trained = batch_advantages(rollouts, 4, spec().budget).values
    assert trained[:4] == pytest.approx([-1.0, -1.0, 1.0, 1.0], abs=1e-4)  # the GRPO contrast
    baseline = batch_advantages(rollouts, 4, spec().budget, train_unhinted=False).values
    # the hinted successes keep the advantage they have against the group; its own do not train
    assert baseline[:4] == [None, None, pytest.approx(1.0, abs=1e-4), pytest.approx(1.0, abs=1e-4)]
    assert baseline[4:] == trained[4:]  # an explored group is on-policy: every rollout trains as before
