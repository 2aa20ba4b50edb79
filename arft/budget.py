"""The tool-call budget, defined once: how calls are counted and what going over costs.

The trainer's ``budget`` penalty (subtracted from the reward for training) and the ``tool_budget``
built-in grader (a reward of its own) both count calls with ``count_calls`` and charge with
``budget_penalty``, so the same rollout is over budget by the same number of calls in both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

CallCount = Literal["executed", "all"]
"""``executed``: calls that ran (neither refused over the episode's limit nor unparseable);
``all``: every tool-call record of the rollout."""

NOT_EXECUTED = frozenset({"refused", "parse_error"})
"""Tool-call statuses of calls that never ran."""

BudgetKind = Literal["linear", "step"]


def count_calls(statuses: Iterable[str], count: CallCount = "executed") -> int:
    """How many of the calls with these statuses count against a budget."""
    return sum(1 for s in statuses if count == "all" or s not in NOT_EXECUTED)


def budget_penalty(n_calls: int, budget: int | None, penalty: float, kind: BudgetKind = "linear") -> float:
    """0 within ``budget`` (``None``: no budget); over it ``penalty`` per call over (``linear``) or
    ``penalty`` once (``step``)."""
    if budget is None or n_calls <= budget:
        return 0.0
    return penalty * (n_calls - budget) if kind == "linear" else penalty
