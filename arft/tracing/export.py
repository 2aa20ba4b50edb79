"""Export stored rollouts as JSONL: one self-contained JSON object per rollout per line.

Each line carries everything needed to read a trajectory outside arft (messages, every tool
call with its output, latency and error, the full grade, timings, the dataset item), keyed by
``trace_id`` so it can be joined with the logs of the user's own tool endpoints. Token ids,
masks and logprobs are left out: they are training data, large, and unreadable to people;
they stay in the store.

Each line also says where the rollout belongs, so a training run's evaluations need no parsing
of ``run_id``: ``step`` (the step it trained, or whose policy it evaluated: 0 = the baseline),
``split`` (``train`` for the rollouts a training run learned from; an evaluation's split,
``validation`` or ``train``, as its run recorded it; ``eval`` for an evaluation recorded before
runs kept their split) and ``sample`` (its index among the samples of its task).
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from arft.records import Rollout
from arft.tracing.store import RunStore


def run_splits(store: RunStore) -> dict[str, str]:
    """The split of each run's rollouts, by run id: a training run's are ``train``; an
    evaluation's, the split its run recorded (``eval`` where it recorded none); other kinds', the
    kind (``sft``)."""
    splits = {}
    for run in store.runs():
        recorded = run["job"].get("split") if run["kind"] == "eval" else None
        splits[run["run_id"]] = recorded if isinstance(recorded, str) else run["kind"]
    return splits


def rollout_to_export(rollout: Rollout, split: str | None = None) -> dict[str, Any]:
    """The export object of one rollout (what ``export_rollouts`` writes on one line); ``split``:
    its run's (``run_splits``), None for a rollout stored without a run."""
    return {
        "trace_id": rollout.trace_id,
        "run_id": rollout.run_id,
        "step": rollout.step,
        "split": split,
        "sample": rollout.sample_index,
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
    count, splits = 0, run_splits(store)
    for rollout in store.rollouts(run_id):
        line = rollout_to_export(rollout, splits.get(rollout.run_id))
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
        count += 1
    return count
