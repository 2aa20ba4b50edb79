"""Group-relative advantages as a pure function."""

from __future__ import annotations

import math

import pytest

from arft.trainer.advantages import group_advantages


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
