"""Group-relative advantages (GRPO-style) and the reward shaping before them: pure functions.

A group is the rollouts of one task. Advantage = reward − group mean, optionally divided by the
group's standard deviation. A group whose rewards do not vary teaches nothing and is dropped
(``None``); rollouts whose reward is missing or not finite are left out of the statistics and get
no advantage (``None`` in their slot) — never a made-up zero.

The reward a rollout trains on is its task reward minus its tool-call budget penalty
(``budget_penalty_of``, from ``arft.budget``); ``batch_advantages`` shapes a whole batch, group by
group, and reports the batch's reward metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

from arft.budget import budget_penalty, usage
from arft.config import BudgetSpec
from arft.records import Rollout


_FLOAT_MAX = 1.7976931348623157e308


@dataclass(frozen=True)
class GroupAdvantages:
    """Per-rollout advantages of one group (``None`` where a rollout does not train)."""

    values: tuple[float | None, ...]
    dropped: bool
    """True when the group has fewer than two usable rewards or zero reward variance."""
    reason: str = ""


def group_advantages(rewards: Sequence[float | None], normalize_std: bool = True,
                     eps: float = 1e-6) -> GroupAdvantages:
    """Advantages of one group of rewards (see module docstring)."""
    usable = [(i, float(r)) for i, r in enumerate(rewards) if r is not None and math.isfinite(r)]
    none: tuple[float | None, ...] = (None,) * len(rewards)
    if len(usable) < 2:
        return GroupAdvantages(none, True, "fewer than 2 graded rollouts")
    values = [r for _, r in usable]
    # Work in units of the largest magnitude: exact for 1e308 rewards, no overflow on subtraction.
    scale = max(max(abs(v) for v in values), 1.0)
    unit = [v / scale for v in values]
    mean = math.fsum(unit) / len(unit)
    centred = [u - mean for u in unit]
    std = math.sqrt(math.fsum(c * c for c in centred) / len(centred))
    if std <= max(eps / scale, 1e-12):  # absolute eps for ordinary rewards, relative for huge ones
        return GroupAdvantages(none, True, "zero reward variance")
    out: list[float | None] = list(none)
    for (i, _), c in zip(usable, centred):
        adv = c / (std + eps / scale) if normalize_std else c * scale
        out[i] = max(min(adv, _FLOAT_MAX), -_FLOAT_MAX)
    return GroupAdvantages(tuple(out), False)


# ----------------------------------------------------------------- reward shaping of a batch


def budget_penalty_of(rollout: Rollout, budget: BudgetSpec) -> float:
    """The budget penalty of ``rollout``'s tool use (reported apart from its task reward)."""
    used = usage(rollout.tool_calls, budget.unit, costs=budget.tool_costs)
    return budget_penalty(used, budget.soft_limit, budget.penalty, budget.kind)


def shaped_group_advantages(group: Sequence[Rollout], penalties: Sequence[float],
                            normalize_std: bool = True) -> GroupAdvantages:
    """Advantages of one group from its training rewards (task reward − budget penalty); a
    rollout without a reward (infrastructure or grader failure) gets none: no fake zero."""
    rewards = [None if r.reward is None else r.reward - p for r, p in zip(group, penalties, strict=True)]
    return group_advantages(rewards, normalize_std)


class BatchAdvantages(NamedTuple):
    """The advantage of every rollout of a batch (``None``: it does not train) and the reward
    metrics of the batch."""

    values: list[float | None]
    metrics: dict[str, float]


def batch_advantages(rollouts: Sequence[Rollout], group_size: int, budget: BudgetSpec,
                     normalize_std: bool = True, *, train_unhinted: bool = True) -> BatchAdvantages:
    """Advantages for every rollout (groups of ``group_size`` in order) and reward metrics:
    groups dropped, groups, and the mean task reward and budget penalty of the graded rollouts.
    ``train_unhinted`` False (``training.rescue.unhinted: baseline``): in a group that holds
    hinted rollouts, the others set the baseline and get no advantage (they do not train)."""
    values: list[float | None] = []
    dropped = 0
    penalties = [budget_penalty_of(r, budget) for r in rollouts]
    for g in range(0, len(rollouts), group_size):
        group = rollouts[g:g + group_size]
        adv = shaped_group_advantages(group, penalties[g:g + group_size], normalize_std)
        dropped += adv.dropped
        baseline_only = not train_unhinted and any(r.hinted for r in group)
        values.extend(None if baseline_only and not r.hinted else a for r, a in zip(group, adv.values))
    graded = [(r.reward, p) for r, p in zip(rollouts, penalties) if r.reward is not None]
    n_groups = math.ceil(len(rollouts) / group_size)
    return BatchAdvantages(values, {"train/groups_dropped": float(dropped), "train/groups": float(n_groups),
                                    "train/task_reward_mean": _mean([reward for reward, _ in graded]),
                                    "train/budget_penalty_mean": _mean([p for _, p in graded])})


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")
