"""The tool-call budget, defined once: what a rollout uses and what going over costs.

The trainer's ``budget`` penalty (subtracted from the reward for training) and the ``tool_budget``
built-in grader (a reward of its own) both measure a rollout with ``usage`` and charge with
``budget_penalty``, so the same rollout is over budget by the same amount in both.

Three units (``BudgetUnit``), because what users pay for is wall-clock latency and calls made in
parallel in one turn cost one round trip, not several:

- ``calls``: executed tool calls;
- ``turns``: sequential tool rounds, i.e. turns with at least one executed call (parallel calls in
  one turn count once);
- ``latency``: the rollout's critical path in seconds, the sum over its turns of the slowest
  executed call of the turn, from the measured latencies or from a fixed per-tool cost
  (``costs``) for deterministic training.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple, Protocol

CallCount = Literal["executed", "all"]
"""``executed``: calls that ran (neither refused over the episode's limit nor unparseable);
``all``: every tool-call record of the rollout."""

NOT_EXECUTED = frozenset({"refused", "parse_error"})
"""Tool-call statuses of calls that never ran."""

BudgetKind = Literal["linear", "step"]

BudgetUnit = Literal["calls", "turns", "latency"]
"""What a budget counts: executed calls, sequential tool rounds, or critical-path seconds."""


class CallLike(Protocol):
    """What a budget needs of one tool-call record (``ToolCallRecord`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def turn(self) -> int: ...
    @property
    def latency_s(self) -> float: ...


class CallUse(NamedTuple):
    """A tool-call record's budget fields, e.g. from a grader's JSON trajectory."""

    name: str
    status: str
    turn: int
    latency_s: float


def critical_path_s(calls: Iterable[CallLike], costs: Mapping[str, float] | None = None) -> float:
    """Seconds on the rollout's critical path: per turn, the slowest executed call of that turn.

    A call's time is ``costs[name]`` when the tool is listed there, else its measured latency.
    Refused and unparseable calls never ran and cost nothing.
    """
    slowest: dict[int, float] = defaultdict(float)
    for c in calls:
        if c.status not in NOT_EXECUTED:
            cost = costs[c.name] if costs and c.name in costs else c.latency_s
            slowest[c.turn] = max(slowest[c.turn], cost)
    return sum(slowest.values())


def usage(calls: Iterable[CallLike], unit: BudgetUnit = "calls", count: CallCount = "executed",
          costs: Mapping[str, float] | None = None) -> float:
    """How much of a budget in ``unit`` these calls use (``count`` applies to ``calls`` only:
    a refused or unparseable call adds no round trip and no latency)."""
    calls = list(calls)
    if unit == "calls":
        return float(count_calls((c.status for c in calls), count))
    if unit == "turns":
        return float(len({c.turn for c in calls if c.status not in NOT_EXECUTED}))
    return critical_path_s(calls, costs)


def count_calls(statuses: Iterable[str], count: CallCount = "executed") -> int:
    """How many of the calls with these statuses count against a budget."""
    return sum(1 for s in statuses if count == "all" or s not in NOT_EXECUTED)


def budget_penalty(used: float, budget: float | None, penalty: float,
                   kind: BudgetKind = "linear") -> float:
    """0 within ``budget`` (``None``: no budget); over it ``penalty`` per unit over (``linear``:
    per call, per turn or per second) or ``penalty`` once (``step``)."""
    if budget is None or used <= budget:
        return 0.0
    return penalty * (used - budget) if kind == "linear" else penalty
