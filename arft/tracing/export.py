"""Export stored rollouts as JSONL: one self-contained JSON object per rollout per line.

Each line carries everything needed to read a trajectory outside arft (messages, every tool
call with its output, latency and error, the full grade, timings, the dataset item), keyed by
``trace_id`` so it can be joined with the logs of the user's own tool endpoints. Token ids,
masks and logprobs are left out: they are training data, large, and unreadable to people;
they stay in the store.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from arft.records import Rollout
from arft.tracing.store import RunStore


def rollout_to_export(rollout: Rollout) -> dict[str, Any]:
    """The export object of one rollout (what ``export_rollouts`` writes on one line)."""
    return {
        "trace_id": rollout.trace_id,
        "run_id": rollout.run_id,
        "task_id": rollout.task_id,
        "sample_index": rollout.sample_index,
        "status": rollout.status,
        "finish_reason": rollout.finish_reason,
        "error": rollout.error,
        "reward": rollout.reward,
        "score": None if rollout.score is None else rollout.score.model_dump(mode="json"),
        "messages": [m.to_openai() for m in rollout.messages],
        "tool_calls": [c.model_dump(mode="json") for c in rollout.tool_calls],
        "n_tool_calls": len(rollout.tool_calls),
        "n_turns": rollout.n_turns,
        "parse_errors": rollout.parse_errors,
        "prompt_len": rollout.prompt_len,
        "n_tokens": len(rollout.token_ids),
        "n_sampled_tokens": rollout.n_sampled_tokens,
        "timings": rollout.timings.model_dump(mode="json"),
        "item": rollout.item,
    }


def export_rollouts(store: RunStore, out: TextIO, run_id: str | None = None) -> int:
    """Write the store's rollouts (only ``run_id``'s when given) to ``out`` as JSONL.

    Returns the number of lines written.
    """
    count = 0
    for rollout in store.rollouts(run_id):
        out.write(json.dumps(rollout_to_export(rollout), ensure_ascii=False) + "\n")
        count += 1
    return count
