"""Group-relative advantages (GRPO-style): pure functions of the rewards of one group.

A group is the rollouts of one task. Advantage = reward − group mean, optionally divided by the
group's standard deviation. A group whose rewards do not vary teaches nothing and is dropped
(``None``); rollouts whose reward is missing or not finite are left out of the statistics and get
no advantage (``None`` in their slot) — never a made-up zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


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
