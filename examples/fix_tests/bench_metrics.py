"""Extra per-eval numbers for ``bench/case_study.py fix_tests``: what the strict grader's parts say.

* ``fixed`` — share of rollouts whose hidden tests all pass (the gate);
* ``verified`` — share that ran the tests successfully after their last edit (the bonus);
* ``style`` — mean tone score of the final replies (1.0 = nothing penalised);
* ``answered`` — share that ended with a reply (not with a tool call at the turn limit);
* ``replace_ok`` — share with at least one ``replace`` call that changed the file;
* ``fixed_unverified`` — share fixed but not verified (what the bonus should shrink).
"""

from __future__ import annotations

from arft.records import Rollout


def _sub(rollout: Rollout, key: str) -> float:
    return rollout.score.sub_scores.get(key, 0.0) if rollout.score is not None else 0.0


def metrics(rollouts: list[Rollout]) -> dict[str, float]:
    """The shares above over ``rollouts`` (an empty list gives an empty dict, not zeros)."""
    if not rollouts:
        return {}
    n = len(rollouts)
    fixed = [_sub(r, "tests") == 1.0 for r in rollouts]
    verified = [_sub(r, "verified") == 1.0 for r in rollouts]
    return {
        "fixed": sum(fixed) / n,
        "verified": sum(verified) / n,
        "style": sum(_sub(r, "style") for r in rollouts) / n,
        "answered": sum(bool(r.messages and r.messages[-1].role == "assistant"
                             and (r.messages[-1].content or "").strip()
                             and not r.messages[-1].tool_calls) for r in rollouts) / n,
        "replace_ok": sum(any(c.name == "replace" and c.status == "ok" for c in r.tool_calls)
                          for r in rollouts) / n,
        "fixed_unverified": sum(f and not v for f, v in zip(fixed, verified)) / n,
    }
