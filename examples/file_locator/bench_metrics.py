"""Extra numbers ``bench/case_study.py file_locator`` reports for each eval.

Precision and recall of the answered file sets (the F1's two halves: listing every grep hit keeps
recall and loses precision), tool-calling turns per rollout (the latency Cognition cut by making
calls parallel: two calls in one turn cost one round trip), calls per tool, and the share of
answers that are only file paths (the asked-for format; prose words count as wrong files).
"""

from __future__ import annotations

import re
from typing import Any

from arft.graders.builtins.sets import to_items

_PATH = re.compile(r"^[\w./-]+\.\w+$")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _final_text(rollout: Any) -> str:
    final = next((m for m in reversed(rollout.messages) if m.role == "assistant"), None)
    return (final.content or "") if final is not None and not final.tool_calls else ""


def metrics(rollouts: list[Any]) -> dict[str, float]:
    """Per-eval extras, over the rollouts that were graded (infrastructure failures left out)."""
    graded = [r for r in rollouts if r.score is not None and r.score.error is None]
    subs = [r.score.sub_scores or {} for r in graded]
    turns = [len({c.turn for c in r.model_calls}) for r in graded]
    answers = [to_items(_final_text(r)) for r in graded]
    out = {"precision (mean)": _mean([s.get("precision", 0.0) for s in subs]),
           "recall (mean)": _mean([s.get("recall", 0.0) for s in subs]),
           "tool-calling turns / rollout": _mean([float(t) for t in turns]),
           "answers that are only paths": _mean([float(bool(a) and all(_PATH.match(x) for x in a))
                                                 for a in answers])}
    for tool in ("grep", "list", "read"):
        out[f"{tool} calls / rollout"] = _mean([float(sum(c.name == tool for c in r.model_calls))
                                               for r in graded])
    return out
