"""The small statistics every monitor rule is written in: a signal's observed series, its
baseline (the median of its first ``baseline_steps`` values: the policy before training moved
it), its recent level (the mean of the last ``window`` values), the train reward's gain over its
own baseline, and a robust z-score against recent history (median and MAD, so one earlier
outlier does not hide the next).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import NamedTuple

from arft.config.monitors import MonitorsSpec
from arft.monitors.signals import StepSignals

SOLVED_PASS_RATE = 0.9
"""A step whose train pass rate is at least this is solving its tasks: a sharper policy or a
steady reward there is convergence, not a stall."""

MAD_TO_STD = 1.4826
"""Scales a normal distribution's median absolute deviation to its standard deviation."""


class Verdict(NamedTuple):
    """What a monitor says about the latest step: its value (``monitor/<name>``; None when it
    cannot be measured yet) and, when its rule fires, the alarm's message."""

    value: float | None = None
    alarm: str | None = None


Getter = Callable[[StepSignals], float | None]


def observed(hist: Sequence[StepSignals], get: Getter) -> list[float]:
    """The values of one signal over the steps that have it, oldest first."""
    return [v for v in (get(s) for s in hist) if v is not None]


def current(hist: Sequence[StepSignals], get: Getter) -> float | None:
    """The latest step's value (None when the latest step has none)."""
    return get(hist[-1]) if hist else None


def baseline(values: Sequence[float], m: MonitorsSpec) -> float | None:
    """The median of the first ``baseline_steps`` values, once a value beyond them exists."""
    if len(values) <= m.baseline_steps:
        return None
    return statistics.median(values[:m.baseline_steps])


def recent(values: Sequence[float], m: MonitorsSpec) -> float | None:
    """The mean of the last ``window`` values."""
    return statistics.fmean(values[-m.window:]) if values else None


def reward_gain(hist: Sequence[StepSignals], m: MonitorsSpec) -> float | None:
    """How far the train reward's recent level is above its baseline (None before a baseline)."""
    rewards = observed(hist, lambda s: s.reward)
    base, now = baseline(rewards, m), recent(rewards, m)
    return None if base is None or now is None else now - base


def stalled(hist: Sequence[StepSignals], m: MonitorsSpec, min_gain: float) -> tuple[bool, float | None]:
    """Whether the reward rose less than ``min_gain`` over its baseline (a step that solves its
    tasks never stalls), and the gain."""
    gain = reward_gain(hist, m)
    pass_rate = hist[-1].pass_rate if hist else None
    solved = pass_rate is not None and pass_rate >= SOLVED_PASS_RATE
    return gain is not None and gain < min_gain and not solved, gain


def robust_z(value: float, history: Sequence[float]) -> tuple[float, float]:
    """``(z, median)``: how many robust standard deviations ``value`` lies above the median of
    ``history``; the scale is floored at a tenth of the median, so a flat history does not turn
    a small wobble into a huge z."""
    med = statistics.median(history)
    mad = statistics.median(abs(x - med) for x in history)
    scale = max(MAD_TO_STD * mad, 0.1 * abs(med), 1e-9)
    return (value - med) / scale, med


def held(hist: Sequence[StepSignals], steps: int, condition: Callable[[StepSignals], bool]) -> bool:
    """Whether ``condition`` held at each of the last ``steps`` steps."""
    return len(hist) >= steps and all(condition(s) for s in hist[-steps:])


def finite(x: float) -> bool:
    return math.isfinite(x)
