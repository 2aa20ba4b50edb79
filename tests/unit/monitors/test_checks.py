"""Each monitor's rule on synthetic series: it fires on the failure it is for, and stays quiet on
the healthy shapes that look like it (a policy sharpening because it solves the tasks, a
behaviour changing while the reward rises, noise on a flat history)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from arft.config import MonitorsSpec
from arft.monitors import checks
from arft.monitors.signals import EvalSignal, StepSignals

M = MonitorsSpec()


def series(**columns: list[float | None]) -> list[StepSignals]:
    """Steps 1..n whose signals are the given columns (same lengths)."""
    n = len(next(iter(columns.values())))
    return [StepSignals(step=i + 1, **{k: v[i] for k, v in columns.items()}) for i in range(n)]  # type: ignore[arg-type]


def fired(check, hist: list[StepSignals]) -> list[int]:  # type: ignore[no-untyped-def]
    """The steps at which ``check`` alarms, judging each prefix as the run would."""
    return [hist[i - 1].step for i in range(1, len(hist) + 1) if check(hist[:i], M).alarm is not None]


def test_entropy_collapse_fires_when_entropy_falls_and_the_reward_does_not_rise() -> None:
    hist = series(surprisal=[0.6, 0.1, 0.12], reward=[0.1, 0.0, 0.0], pass_rate=[0.1, 0.0, 0.0])
    assert fired(checks.entropy_collapse, hist) == [2, 3]
    assert "17% of its baseline 0.600" in str(checks.entropy_collapse(hist[:2], M).alarm)
    assert checks.entropy_collapse(hist[:2], M).value == (0.1 / 0.6)


def test_a_policy_sharpening_because_it_solves_the_tasks_is_not_a_collapse() -> None:
    # the calculator demo's shape: entropy falls 10x while the reward goes 0.06 -> 1.0
    hist = series(surprisal=[0.7, 0.27, 0.08, 0.035, 0.11, 0.02],
                  reward=[0.06, 0.19, 0.56, 0.94, 0.88, 1.0], pass_rate=[0.06, 0.19, 0.56, 0.94, 0.88, 1.0])
    assert fired(checks.entropy_collapse, hist) == []
    # an already-solved task set sharpening with a flat reward is convergence, not a stall
    solved = series(surprisal=[0.5, 0.05], reward=[0.95, 0.95], pass_rate=[0.95, 0.95])
    assert fired(checks.entropy_collapse, solved) == []


def test_kl_acceleration_needs_a_jump_against_the_usual_increase_and_a_real_kl() -> None:
    steady = [0.01 * i for i in range(1, 8)]
    assert fired(checks.kl_acceleration, series(kl=steady)) == []
    jump = steady + [0.07 + 0.2]
    assert fired(checks.kl_acceleration, series(kl=jump)) == [8]
    assert fired(checks.kl_acceleration, series(kl=[0.0] * 8)) == []  # kl_coef 0: always 0
    tiny = [0.0001 * i for i in range(1, 7)] + [0.01]  # a 10x jump, but far below min_kl
    assert fired(checks.kl_acceleration, series(kl=tiny)) == []


def test_grad_norm_spike_against_recent_history_and_non_finite_values() -> None:
    calm = [0.72, 0.37, 0.19, 0.5, 0.72, 0.97, 0.48]  # the demo's grad norms: no spike
    assert fired(checks.grad_norm_spike, series(grad_norm=calm)) == []
    assert fired(checks.grad_norm_spike, series(grad_norm=calm + [12.0])) == [8]
    assert fired(checks.grad_norm_spike, series(grad_norm=[0.5, 0.4, math.nan])) == [3]  # at once
    assert fired(checks.grad_norm_spike, series(grad_norm=[0.5, 9.0])) == []  # too little history


def test_clip_fraction_spike_ignores_small_absolute_values() -> None:
    assert fired(checks.clip_fraction_spike, series(clip_fraction=[0.0, 0.0, 0.0, 0.0, 0.1])) == []
    assert fired(checks.clip_fraction_spike, series(clip_fraction=[0.01, 0.02, 0.01, 0.02, 0.5])) == [5]


def test_sub_grader_dominance_needs_the_same_sub_score_for_patience_steps() -> None:
    shares = [{"answer": 0.5, "style": 0.5}, {"answer": 0.02, "style": 0.98}, {"answer": 0.0, "style": 1.0}]
    hist = series(sub_shares=shares)  # type: ignore[arg-type]
    assert fired(checks.sub_grader_dominance, hist) == [3]
    assert checks.sub_grader_dominance(hist, M).value == 1.0
    flip = series(sub_shares=[{"a": 0.95, "b": 0.05}, {"a": 0.05, "b": 0.95}])  # type: ignore[arg-type]
    assert fired(checks.sub_grader_dominance, flip) == []


def test_sub_grader_divergence_fires_when_one_rises_as_another_falls() -> None:
    means = [{"answer": 0.5, "length": 0.2}, {"answer": 0.45, "length": 0.3},
             {"answer": 0.3, "length": 0.5}, {"answer": 0.2, "length": 0.7}]
    hist = series(sub_means=means)  # type: ignore[arg-type]
    assert fired(checks.sub_grader_divergence, hist) == [4]
    together = [{"answer": 0.2 + 0.2 * i, "format": 0.3 + 0.2 * i} for i in range(4)]
    assert fired(checks.sub_grader_divergence, series(sub_means=together)) == []  # type: ignore[arg-type]


def test_length_drift_while_the_reward_stalls_or_follows_it() -> None:
    stalled = series(length=[30.0, 150.0], reward=[0.1, 0.0], pass_rate=[0.1, 0.0])
    assert fired(checks.length_drift, stalled) == [2]
    rising = series(length=[30.0, 150.0], reward=[0.1, 0.6], pass_rate=[0.1, 0.6])
    assert fired(checks.length_drift, rising) == []  # the reward rose: a new behaviour that pays
    paid = series(length=[30.0, 27.0, 33.0], reward=[0.15, 0.13, 0.16], length_correlation=[1.0, 1.0, 1.0],
                  pass_rate=[0.0, 0.0, 0.0])
    assert fired(checks.length_drift, paid) == [3]  # follows, and above its baseline again
    noisy = series(length=[33.0, 24.0, 16.0, 16.0, 16.0], length_correlation=[-0.1, -0.5, 0.5, 0.8, 0.9],
                   reward=[0.06, 0.13, 0.56, 0.69, 0.88], pass_rate=[0.06, 0.13, 0.56, 0.69, 0.88])
    assert fired(checks.length_drift, noisy) == []  # the demo: shorter answers that happen to correlate


def test_tool_calls_drift_from_zero_while_the_reward_stalls() -> None:
    assert fired(checks.tool_calls_drift, series(tool_calls=[0.0, 2.0], reward=[0.2, 0.2])) == [2]
    assert fired(checks.tool_calls_drift, series(tool_calls=[0.06, 1.0], reward=[0.06, 0.56])) == []
    assert fired(checks.tool_calls_drift, series(tool_calls=[0.2, 0.0], reward=[0.1, 0.1])) == []  # < 0.5 calls


def test_equal_groups_every_group_for_patience_steps() -> None:
    assert fired(checks.equal_groups, series(equal_groups=[0.75, 1.0, 1.0, 0.5, 1.0])) == [3]
    assert fired(checks.equal_groups, series(equal_groups=[0.75, 0.75, 0.75])) == []


def test_train_eval_divergence_at_evaluations() -> None:
    hist = series(reward=[0.1, 0.2, 0.4, 0.6, 0.8])
    falls = [EvalSignal(0, 0.5), EvalSignal(5, 0.3)]
    v = checks.train_eval_divergence(hist, falls, M)
    assert v.alarm is not None and v.value is not None and math.isclose(v.value, (0.7 - 0.15) + 0.2)
    rises = [EvalSignal(0, 0.5), EvalSignal(5, 0.7)]
    assert checks.train_eval_divergence(hist, rises, M).alarm is None
    assert checks.train_eval_divergence(hist, falls[:1], M) == (None, None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.2, 1.0), min_size=4, max_size=12), st.floats(0.0, 1.0))
def test_a_spike_rule_never_fires_below_its_ratio_to_the_median(values: list[float], frac: float) -> None:
    """Whatever the history, a value under ``ratio`` times its median is no spike."""
    import statistics

    last = frac * M.grad_norm_spike.ratio * statistics.median(values[-M.history:]) * 0.999
    assert checks.grad_norm_spike(series(grad_norm=[*values, last]), M).alarm is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.001, 2.0), min_size=2, max_size=10), st.floats(0.0, 0.5))
def test_entropy_never_collapses_while_the_reward_climbs(entropies: list[float], start: float) -> None:
    """However the entropy moves, a run whose reward climbs ``3 * min_reward_gain`` a step is
    never called collapsed."""
    gain = M.entropy_collapse.min_reward_gain
    rewards = [start + 3 * gain * i for i in range(len(entropies))]
    hist = series(surprisal=entropies, reward=rewards, pass_rate=[0.0] * len(entropies))  # type: ignore[arg-type]
    assert fired(checks.entropy_collapse, hist) == []
