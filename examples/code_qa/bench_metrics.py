"""Extra numbers ``bench/case_study.py`` reports for code_qa: the long tail and fact recall.

Qodo's case study is about the long tail of tool calls (the base model sometimes made > 15 calls)
and about recall of the facts; these are the figures that show both on each eval.
"""

from __future__ import annotations

import re
from pathlib import Path

from arft.config import load_job
from arft.records import Rollout

LONG_TAIL = 8
"""A rollout with more tool calls than this is in the long tail."""
RAW_OUTPUT = re.compile(r"<tool_response>|\S+/\S+:\d+: ")
"""Raw tool output pasted into an answer (a search hit 'path:line: ' or the response tag)."""


def metrics(rollouts: list[Rollout]) -> dict[str, float]:
    """Share of rollouts over 8 and over the soft limit of calls, mean fact recall, full recall,
    and the share of answers that paste raw tool output."""
    graded = [r for r in rollouts if r.status != "infra_failed"]
    if not graded:
        raise ValueError("no rollout to measure: every rollout of this eval failed on infrastructure")
    soft_limit = load_job(Path(__file__).resolve().parent / "job.yaml").budget.soft_limit
    calls = [len(r.model_calls) for r in graded]
    scores = [r.score.score for r in graded if r.score is not None and r.score.error is None]
    out = {f"share > {LONG_TAIL} calls": sum(c > LONG_TAIL for c in calls) / len(calls)}
    if soft_limit is not None:
        out[f"share > {soft_limit} calls (soft limit)"] = sum(c > soft_limit for c in calls) / len(calls)
    if scores:  # no graded rollout: leave the figures out rather than report a fake zero
        out["fact recall (mean)"] = sum(scores) / len(scores)
        out["all facts recalled"] = sum(s == 1.0 for s in scores) / len(scores)
    # fact_recall cannot tell a pasted search result from an answer: show how often that happens
    pasted = sum(bool(RAW_OUTPUT.search(r.output_text)) for r in graded)
    out["answers pasting raw tool output"] = pasted / len(graded)
    return out
