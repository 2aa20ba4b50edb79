"""The attribute names arft's spans carry, and the functions that turn arft's records into them.

Model turns and tool calls use the OpenTelemetry GenAI semantic conventions (``gen_ai.*``,
Development status; the names of semantic-conventions v1.37+). Everything an RL loop adds (steps,
rollouts, rewards, syncs) uses the ``rl.*`` names of the proposed RL convention
(open-telemetry/semantic-conventions-genai#88: ``rl.loop`` / ``rl.sample`` / ``rl.reward`` /
``rl.train`` / ``rl.sync``); where that proposal names no attribute, the names here are arft's
proposal, listed in docs/telemetry.md. arft's own fields are ``arft.*``.

Pure functions of the records: nothing here imports OpenTelemetry, so the mapping can be tested
(and documented) without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from arft.records import Message, Rollout, Score

AttrValue = str | bool | int | float | Sequence[str]
"""A value OpenTelemetry accepts as a span attribute."""
Attributes = dict[str, AttrValue]

TRACE_ID = "arft.trace_id"
"""arft's rollout id (``trace_<32 hex>``), on every span of a rollout."""
RUN_ID = "arft.run_id"
STEP = "rl.step"
ERROR_TYPE = "error.type"

OPERATION = "gen_ai.operation.name"
CHAT = "chat"
EXECUTE_TOOL = "execute_tool"

# The spans' names: low-cardinality, one per kind (the GenAI ones as the convention asks:
# "chat {model}", "execute_tool {tool}").
RUN_SPAN = "rl.run"
STEP_SPAN = "rl.step"
UPDATE_SPAN = "rl.train"
SYNC_SPAN = "rl.sync"
EVAL_SPAN = "rl.eval"
ROLLOUT_SPAN = "rl.sample"
GRADE_SPAN = "rl.reward"

# arft's finish of a turn (``arft.rollout.conversation.TurnFinish``) as the OpenAI finish reasons
# the GenAI convention records.
_TURN_FINISH = {"eos": "stop", "stop": "stop", "length": "length", "context": "length"}


def model_request(model: str, temperature: float, top_p: float, max_tokens: int) -> Attributes:
    """The request attributes every model turn of a run carries (the job's sampling)."""
    return {OPERATION: CHAT, "gen_ai.provider.name": "arft", "gen_ai.request.model": model,
            "gen_ai.request.temperature": temperature, "gen_ai.request.top_p": top_p,
            "gen_ai.request.max_tokens": max_tokens}


def model_reply(message: Message, finish: str, input_tokens: int, output_tokens: int,
                parse_errors: int = 0) -> Attributes:
    """A turn's reply: its token counts (``input_tokens``: the whole prompt the turn sampled
    after), its finish reason (``tool_calls`` when it called tools), how many calls it made."""
    calls = len(message.tool_calls or ())
    reason = "tool_calls" if calls else _TURN_FINISH.get(finish, finish)
    return {"gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens,
            "gen_ai.response.finish_reasons": [reason], "arft.tool_calls": calls,
            "arft.parse_errors": parse_errors}


def tool_request(name: str, call_id: str, kind: str) -> Attributes:
    """A tool call: every tool arft runs is a ``function`` in the convention's terms (the model
    writes the arguments, arft executes them); ``arft.tool.kind`` says which of arft's kinds."""
    return {OPERATION: EXECUTE_TOOL, "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function", "arft.tool.kind": kind}


def tool_kind(tool: object | None) -> str:
    """``endpoint`` | ``python`` | ``shell`` | ``mcp`` ... from the tool's class, through wrappers
    (``unknown`` for a name the rollout may not call)."""
    if tool is None:
        return "unknown"
    inner = getattr(tool, "inner", None)  # a wrapper (the tool cassette's) names the tool it wraps
    if inner is not None and inner is not tool:
        return tool_kind(inner)
    return type(tool).__name__.removesuffix("Tool").lower() or "unknown"


def tool_result(status: str, http_status: int | None) -> Attributes:
    values: Attributes = {"arft.tool.status": status}
    if http_status is not None:
        values["http.response.status_code"] = http_status
    return values


def grade(score: Score) -> Attributes:
    """A grade. A failed grade carries no reward (``error.type`` instead): never a fake 0."""
    values: Attributes = {"gen_ai.evaluation.name": score.grader or "grader",
                          "arft.grade.latency_s": score.latency_s}
    if score.error is None and math.isfinite(score.score):
        values.update({"rl.reward": score.score, "gen_ai.evaluation.score.value": score.score})
        values.update({f"rl.reward.{k}": v for k, v in score.sub_scores.items() if math.isfinite(v)})
    if score.passed is not None:
        values["arft.grade.passed"] = score.passed
    return values


def rollout_start(trace_id: str, run_id: str, task_id: str, sample_index: int, step: int | None) -> Attributes:
    """A rollout's identity: ``rl.group.id`` is its group (the task's rollouts of one step)."""
    values: Attributes = {TRACE_ID: trace_id, RUN_ID: run_id, "gen_ai.conversation.id": trace_id,
                          "arft.task_id": task_id, "rl.sample.index": sample_index,
                          "rl.group.id": f"{run_id}/{step if step is not None else '-'}/{task_id}"}
    if step is not None:
        values[STEP] = step
    return values


def rollout_end(rollout: Rollout) -> Attributes:
    """How a rollout ended, its size and its reward (only when graded without error)."""
    values: Attributes = {"rl.sample.status": rollout.status, "rl.sample.finish_reason": rollout.finish_reason,
                          "rl.sample.turns": rollout.n_turns, "rl.sample.tool_calls": len(rollout.tool_calls),
                          "rl.sample.parse_errors": rollout.parse_errors,
                          "rl.sample.output_tokens": rollout.n_sampled_tokens}
    if rollout.reward is not None and math.isfinite(rollout.reward):  # a failed grade is no reward
        values["rl.reward"] = rollout.reward
    if rollout.policy is not None:
        values["rl.policy.version"] = rollout.policy.version
    return values


def rollout_failure(rollout: Rollout) -> tuple[str, str] | None:
    """(error type, message) when the rollout failed: an infrastructure failure, a bug, or a
    failed grade; None when it ran (a truncated rollout is the policy's doing, not an error)."""
    if rollout.status in ("infra_failed", "error"):
        return rollout.status, rollout.error or rollout.status
    if rollout.score is not None and rollout.score.error is not None:
        return "grade_error", rollout.score.error
    return None


def step_end(metrics: Mapping[str, float]) -> Attributes:
    """A training step's summary: its metric row under ``rl.metric.*`` (finite values only), and
    the reward mean under the proposal's name."""
    values: Attributes = {f"rl.metric.{k}": v for k, v in metrics.items()
                          if isinstance(v, (int, float)) and math.isfinite(v)}
    reward = metrics.get("train/reward_mean")
    if reward is not None and math.isfinite(reward):
        values["rl.reward.mean"] = reward
    return values
