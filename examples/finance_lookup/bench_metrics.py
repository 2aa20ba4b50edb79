"""Extra numbers ``bench/case_study.py`` reports for finance_lookup, from each eval's rollouts.

accuracy (the answer within 0.5 % of the report's figure) overall and split into lookup and
computation tasks, the share of replies with a number at all, the share of rollouts whose tools
showed the task's own report, and the calls per rollout of each tool.
"""

from __future__ import annotations

from typing import Any

from arft.records import Rollout


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


def found_report(r: Rollout) -> bool:
    """Whether a successful tool call showed the task's report (a search hit or its text)."""
    title = f"{r.item.get('company')} annual report {r.item.get('year')}"
    return any(c.status == "ok" and (r.item.get("report", "\0") in c.output or title in c.output)
               for c in r.tool_calls)


def metrics(rollouts: list[Rollout]) -> dict[str, float]:
    graded = [r for r in rollouts if r.score is not None and r.score.error is None]
    out: dict[str, Any] = {"accuracy (within 0.5 %)": _share([bool(r.score.passed) for r in graded])}
    for needs in ("lookup", "compute"):
        mine = [r for r in graded if r.item.get("needs") == needs]
        out[f"accuracy: {needs} tasks"] = _share([bool(r.score.passed) for r in mine])
    out["answered with a number"] = _share(["no_number" not in r.score.flags for r in graded])
    out["tools showed the right report"] = _share([found_report(r) for r in rollouts])
    for tool in ("search", "cat", "list"):
        calls = [sum(c.name == tool for c in r.model_calls) for r in rollouts]
        out[f"{tool} calls / rollout"] = sum(calls) / len(calls) if calls else float("nan")
    return out
