"""What the monitors read: one step's signals, computed from what the trainer already has.

``step_signals`` turns a step's metric values (``train/...`` from the rollouts' summary,
``update/...`` from the learner) and its rollouts into a ``StepSignals`` record; the monitors
(``arft.monitors.checks``) never see a rollout, so they are tested with plain numbers. A signal
that a step cannot give (no update, no graded rollout, no sub-scores) is ``None``, never 0.

Groups are consecutive runs of ``group_size`` rollouts, as the runner returns them and the
advantages read them; "within groups" means each value minus its group's mean, which is what
group-relative advantages see. Every signal is the same whatever the order the rollouts come in
(groups and samples are put in one order, sums are exact ``fsum``s), so a resumed run that rebuilds
its steps from the store computes the very floats the uninterrupted run did.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from arft.metrics.summary import passed
from arft.records import Rollout


@dataclass(frozen=True)
class StepSignals:
    """One training step as the monitors see it (``None``: the step could not say)."""

    step: int
    reward: float | None = None
    """Mean reward of the step's graded train rollouts."""
    pass_rate: float | None = None
    surprisal: float | None = None
    """Mean −logprob of the sampled tokens: an estimate of the sampling policy's entropy per token."""
    kl: float | None = None
    clip_fraction: float | None = None
    grad_norm: float | None = None
    length: float | None = None
    """Characters of the final answer (what a grader reads as ``output_text``; a tool-calling
    rollout has more turns, not a longer answer)."""
    tool_calls: float | None = None
    """Tool calls per rollout."""
    length_correlation: float | None = None
    """Within-group correlation of the reward with the final answer's length."""
    equal_groups: float | None = None
    """Share of groups whose rewards are all equal and not all passing (nothing to learn from)."""
    sub_means: Mapping[str, float] = field(default_factory=dict)
    """Mean of each sub-score (a ``multi`` grader's children)."""
    sub_shares: Mapping[str, float] = field(default_factory=dict)
    """Each sub-score's share of the reward's within-group variance (``sub_shares``)."""


@dataclass(frozen=True)
class EvalSignal:
    """One evaluation of the held-out set: the step whose weights it measured and its mean reward."""

    step: int
    reward: float


def step_signals(step: int, values: Mapping[str, float], rollouts: Sequence[Rollout],
                 group_size: int) -> StepSignals:
    """The signals of step ``step`` from its metric ``values`` and its train ``rollouts``."""
    groups = _in_order([rollouts[i:i + group_size] for i in range(0, len(rollouts), max(group_size, 1))])
    kept = [r for g in groups for r in g if r.status != "infra_failed"]
    graded = [[r for r in g if r.reward is not None] for g in groups]
    return StepSignals(
        step=step, reward=values.get("train/reward_mean"), pass_rate=values.get("train/pass_rate"),
        surprisal=surprisal(kept), kl=values.get("update/kl"), clip_fraction=values.get("update/clip_fraction"),
        grad_norm=values.get("update/grad_norm"), length=_mean([_length(r) for r in kept]),
        tool_calls=values.get("train/tool_calls_mean"),
        length_correlation=within_group_correlation(
            [[(_reward(r), _length(r)) for r in g] for g in graded]),
        equal_groups=equal_group_share(graded), sub_means=_sub_means(graded), sub_shares=sub_shares(graded))


def surprisal(rollouts: Sequence[Rollout]) -> float | None:
    """Mean −logprob over every sampled token (``loss_mask`` 1) of ``rollouts``."""
    sampled = [-lp for r in rollouts for lp, m in zip(r.logprobs, r.loss_mask) if m]
    return math.fsum(sampled) / len(sampled) if sampled else None


def within_group_correlation(groups: Sequence[Sequence[tuple[float, float]]]) -> float | None:
    """Pearson correlation of the ``(a, b)`` pairs after subtracting each group's means (None when
    either side does not vary within groups)."""
    xs: list[float] = []
    ys: list[float] = []
    for g in groups:
        if len(g) < 2:
            continue
        ma, mb = statistics.fmean(a for a, _ in g), statistics.fmean(b for _, b in g)
        xs += [a - ma for a, _ in g]
        ys += [b - mb for _, b in g]
    if len(xs) < 2 or _flat(xs) or _flat(ys):
        return None
    return statistics.correlation(xs, ys)


def equal_group_share(graded: Sequence[Sequence[Rollout]]) -> float | None:
    """Share of the groups (2+ graded rollouts) whose rewards are all equal, groups that all
    passed left out of the numerator (a solved task is not a stalled one)."""
    sized = [g for g in graded if len(g) >= 2]
    if not sized:
        return None
    stuck = sum(_flat([_reward(r) for r in g]) and not all(r.score is not None and passed(r.score) for r in g)
                for g in sized)
    return stuck / len(sized)


def sub_shares(graded: Sequence[Sequence[Rollout]]) -> dict[str, float]:
    """Each sub-score's share of the reward's within-group variance: the reward regressed on the
    sub-scores (least squares over within-group differences), each sub-score's part
    ``beta_i * cov(s_i, reward) / var(reward)`` (Pratt's measure: exact for a linear ``multi``
    formula, whatever the sub-scores' own correlations), over the sum of the positive parts.
    Empty with fewer than two sub-scores or no reward variance."""
    import numpy as np  # only a training run judges sub-scores

    names = _sub_names(graded)
    rows = [[_reward(r), *(_sub(r, n) for n in names)] for g in graded if len(g) >= 2 for r in g]
    if len(names) < 2 or len(rows) < 2:
        return {}
    data = np.array(rows, dtype=float)
    sizes = [len(g) for g in graded if len(g) >= 2]
    starts = np.cumsum([0, *sizes[:-1]])
    data -= np.repeat(np.add.reduceat(data, starts) / np.array(sizes)[:, None], sizes, axis=0)
    y, x = data[:, 0], data[:, 1:]
    if float(y @ y) <= 1e-12 or not np.isfinite(data).all():
        return {}
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    parts = np.clip(beta * (x.T @ y) / float(y @ y), 0.0, None)
    total = float(parts.sum())
    return {n: float(p) / total for n, p in zip(names, parts)} if total > 0 else {}


def _in_order(groups: Sequence[Sequence[Rollout]]) -> list[list[Rollout]]:
    """The groups by task and first sample, each by sample index: one order however they came."""
    ordered = [sorted(g, key=lambda r: (r.sample_index, r.trace_id)) for g in groups if g]
    return sorted(ordered, key=lambda g: (g[0].task_id, g[0].sample_index, g[0].trace_id))


def _sub_means(graded: Sequence[Sequence[Rollout]]) -> dict[str, float]:
    names = _sub_names(graded)
    flat = [r for g in graded for r in g]
    return {n: statistics.fmean(_sub(r, n) for r in flat) for n in names} if flat else {}


def _sub_names(graded: Sequence[Sequence[Rollout]]) -> list[str]:
    """The sub-scores every graded rollout has."""
    flat = [r for g in graded for r in g]
    if not flat:
        return []
    common = set.intersection(*(set(r.score.sub_scores) if r.score else set() for r in flat))
    return sorted(common)


def _sub(r: Rollout, name: str) -> float:
    assert r.score is not None  # graded rollouts only
    return r.score.sub_scores[name]


def _reward(r: Rollout) -> float:
    assert r.reward is not None  # graded rollouts only
    return r.reward


def _length(r: Rollout) -> float:
    return float(len(r.output_text))


def _mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _flat(xs: Sequence[float]) -> bool:
    return not xs or max(xs) - min(xs) <= 1e-12 or not all(math.isfinite(x) for x in xs)
