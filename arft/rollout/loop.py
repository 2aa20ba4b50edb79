"""The agent loop: render -> generate -> parse -> run the turn's tool calls concurrently -> append.

``run_rollout`` is a plain async function; every stop condition is an explicit argument
(``RolloutLimits``). It never raises for anything a model, a tool or an engine can do: the
returned ``Rollout`` says what happened (status, finish reason, error) and keeps everything
produced up to that point.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from arft.budget import count_calls
from arft.engines.base import EngineError
from arft.records import (FinishReason, Message, Rollout, RolloutStatus, Task, Timings, ToolCall,
                          ToolCallRecord, new_trace_id)
from arft.rollout.conversation import AssistantTurn, Conversation
from arft.telemetry import NO_ROLLOUT, RolloutTrace
from arft.tools.base import Tool, ToolContext, ToolOutcome, raised

if TYPE_CHECKING:
    from arft.config import RolloutSpec


@dataclass(frozen=True)
class RolloutLimits:
    """Stop conditions of one rollout: the job's ``rollout`` section and ``max_episode_steps``,
    built by ``from_spec`` (their defaults and documentation live in ``arft.config``)."""

    max_episode_steps: int
    """Most tool calls (executed) in the rollout."""
    on_max_episode_steps: Literal["refuse", "end"]
    max_turns: int
    timeout_s: float
    tool_output_max_chars: int

    @classmethod
    def from_spec(cls, spec: RolloutSpec, max_episode_steps: int) -> RolloutLimits:
        """The limits of ``spec`` (``job.rollout``) with ``max_episode_steps`` resolved
        (``job.rl.max_steps``)."""
        return cls(max_episode_steps=max_episode_steps, on_max_episode_steps=spec.on_max_episode_steps,
                   max_turns=spec.max_turns, timeout_s=spec.timeout_s,
                   tool_output_max_chars=spec.tool_output_max_chars)


@dataclass
class _Episode:
    """Mutable state while the rollout runs; frozen into a ``Rollout`` at the end."""

    trace_id: str
    messages: list[Message]
    records: list[ToolCallRecord] = field(default_factory=list)
    where: ToolContext | None = None
    """The rollout's place (run, step, task, sample) that every tool call's context carries."""
    trace: RolloutTrace = NO_ROLLOUT
    """The rollout's OpenTelemetry trace (a no-op unless ``logging.opentelemetry`` is on)."""
    n_turns: int = 0
    parse_errors: int = 0
    finish: FinishReason = "answer"
    status: RolloutStatus = "ok"
    error: str | None = None
    generate_s: float = 0.0
    tools_s: float = 0.0

    @property
    def n_calls(self) -> int:
        """Tool calls that actually ran (parse errors and refusals do not count)."""
        return count_calls(r.status for r in self.records)

    def end(self, finish: FinishReason, status: RolloutStatus, error: str | None = None) -> None:
        self.finish, self.status, self.error = finish, status, error


def task_tool_schemas(task: Task, tools: Mapping[str, Tool]) -> list[dict[str, Any]]:
    """The schemas shown for ``task``: the row's own ``tools`` (which limit the job's set), else all."""
    if task.tools is None:
        return [t.schema for t in tools.values()]
    return [dict(s) for s in task.tools]


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n...[truncated {len(text) - limit} characters]"


async def _run_call(call: ToolCall, tools: Mapping[str, Tool], allowed: set[str],
                    ctx: ToolContext) -> tuple[ToolOutcome, float]:
    start = time.perf_counter()
    name = call.function.name
    if name not in allowed or name not in tools:
        outcome = ToolOutcome(
            output=f"Error: unknown tool '{name}'. Available tools: {', '.join(sorted(allowed)) or 'none'}.",
            status="tool_error", error=f"unknown tool '{name}'")
    else:
        try:
            outcome = await tools[name].call(call.function.arguments, ctx)
        except Exception as e:  # a tool bug must not kill the rollout; the model sees the error
            outcome = raised(e)
    return outcome, time.perf_counter() - start


async def _traced(trace: RolloutTrace, call: ToolCall, tools: Mapping[str, Tool], allowed: set[str],
                  ctx: ToolContext) -> tuple[ToolOutcome, float]:
    """``_run_call`` inside the call's ``execute_tool`` span."""
    with trace.tool_call(call.function.name, call.id, tools.get(call.function.name)) as span:
        outcome, latency = await _run_call(call, tools, allowed, ctx)
        span.tool_result(outcome.status, outcome.error, outcome.http_status)
    return outcome, latency


async def _tool_turn(ep: _Episode, calls: Sequence[ToolCall], parse_errors: Sequence[str],
                     tools: Mapping[str, Tool], allowed: set[str], limits: RolloutLimits,
                     item: dict[str, object], workspace: Path | None) -> list[Message]:
    """Run one turn's calls concurrently; return the tool messages the model will see."""
    budget_left = limits.max_episode_steps - ep.n_calls
    runnable, refused = list(calls[:max(budget_left, 0)]), list(calls[max(budget_left, 0):])
    start = time.perf_counter()
    results = await asyncio.gather(*(
        _traced(ep.trace, c, tools, allowed, replace(ep.where or ToolContext(trace_id=ep.trace_id, call_id=""),
                                                     call_id=c.id, item=item, workspace=workspace,
                                                     turn=ep.n_turns - 1, tool_name=c.function.name))
        for c in runnable))
    ep.tools_s += time.perf_counter() - start
    replies: list[Message] = []
    for call, (outcome, latency) in zip(runnable, results):
        out = _truncate(outcome.output, limits.tool_output_max_chars)
        ep.records.append(ToolCallRecord(
            trace_id=ep.trace_id, call_id=call.id, name=call.function.name,
            arguments=call.function.arguments, output=out, status=outcome.status,
            error=outcome.error, http_status=outcome.http_status, latency_s=latency, turn=ep.n_turns - 1))
        replies.append(Message(role="tool", content=out, tool_call_id=call.id, name=call.function.name))
    for call in refused:
        msg = (f"Error: tool-call budget of {limits.max_episode_steps} calls is spent; "
               "answer with what you have.")
        ep.records.append(ToolCallRecord(
            trace_id=ep.trace_id, call_id=call.id, name=call.function.name,
            arguments=call.function.arguments, output=msg, status="refused",
            error="max_episode_steps", turn=ep.n_turns - 1))
        replies.append(Message(role="tool", content=msg, tool_call_id=call.id, name=call.function.name))
    for i, reason in enumerate(parse_errors):
        call_id = f"call_parse_error_{ep.n_turns - 1}_{i}"
        msg = f"Error: your tool call could not be parsed ({reason}). Use the exact tool-call format."
        ep.records.append(ToolCallRecord(
            trace_id=ep.trace_id, call_id=call_id, name="", arguments="", output=msg,
            status="parse_error", error=reason, turn=ep.n_turns - 1))
        replies.append(Message(role="tool", content=msg, tool_call_id=call_id))
    return replies


def _single_turn_done(limits: RolloutLimits, turn: AssistantTurn | None) -> bool:
    """Whether the turn limit ended a single-turn job as intended: with ``max_turns: 1`` the one
    turn's calls are the answer (a next turn was never meant to read their results), so only a turn
    cut short (by its token limit, or with a call that could not be parsed) leaves it truncated.
    With more turns, calls on the last allowed turn await results the model never sees: truncated."""
    return limits.max_turns == 1 and turn is not None and turn.finish != "length" and not turn.parse_errors


async def _episode(ep: _Episode, conv: Conversation, tools: Mapping[str, Tool], allowed: set[str],
                   limits: RolloutLimits, item: dict[str, object], workspace: Path | None) -> None:
    turn: AssistantTurn | None = None
    while True:
        if ep.n_turns >= limits.max_turns:
            return ep.end("max_turns", "ok" if _single_turn_done(limits, turn) else "truncated")
        start = time.perf_counter()
        with ep.trace.model_turn(ep.n_turns) as span:
            turn = await conv.assistant_turn()
            span.model_reply(turn.message, turn.finish, turn.input_tokens, turn.output_tokens, len(turn.parse_errors))
        ep.generate_s += time.perf_counter() - start
        ep.n_turns += 1
        ep.messages.append(turn.message)
        ep.parse_errors += len(turn.parse_errors)
        calls = list(turn.message.tool_calls or ())
        if turn.finish == "context":
            return ep.end("max_tokens", "truncated")
        if not calls and not turn.parse_errors:
            status: RolloutStatus = "truncated" if turn.finish == "length" else "ok"
            return ep.end("answer" if status == "ok" else "max_tokens", status)
        if calls and ep.n_calls >= limits.max_episode_steps and limits.on_max_episode_steps == "end":
            return ep.end("max_episode_steps", "truncated")
        replies = await _tool_turn(ep, calls, turn.parse_errors, tools, allowed, limits, item, workspace)
        ep.messages.extend(replies)
        failed = next((r for r in ep.records if r.status == "infra_error"), None)
        if failed is not None:
            return ep.end("infra_failed", "infra_failed", f"tool '{failed.name}': {failed.error}")
        if not conv.add_tool_results(replies):
            return ep.end("max_tokens", "truncated")


async def run_rollout(conv: Conversation, task: Task, tools: Mapping[str, Tool],
                      limits: RolloutLimits, *, trace_id: str | None = None, run_id: str = "",
                      sample_index: int = 0, workspace: Path | None = None,
                      step: int | None = None, trace: RolloutTrace = NO_ROLLOUT) -> Rollout:
    """Run one episode of ``task``; the conversation must not be started yet (``step``: the
    training step it belongs to, stamped on the record; ``trace``: the rollout's OpenTelemetry
    trace, which gets a span per model turn and tool call)."""
    trace_id = trace_id or new_trace_id()
    schemas = task_tool_schemas(task, tools)
    allowed = {s["function"]["name"] for s in schemas if "function" in s}
    ep = _Episode(trace_id=trace_id, messages=list(task.messages),
                  where=ToolContext(trace_id=trace_id, call_id="", run_id=run_id, step=step,
                                    task_id=task.id, sample_index=sample_index), trace=trace)
    t0 = time.perf_counter()
    try:
        conv.start(task.prompt_messages, schemas)  # the hint (training.rescue) only here, never in the record
        await asyncio.wait_for(_episode(ep, conv, tools, allowed, limits, task.item, workspace),
                               timeout=limits.timeout_s)
    except asyncio.TimeoutError:
        ep.end("timeout", "truncated", f"rollout exceeded {limits.timeout_s}s")
    except EngineError as e:
        ep.end("infra_failed", "infra_failed", f"engine: {e}")
    except Exception as e:  # a bug: keep the partial episode and say where it broke
        tb = traceback.format_exc(limit=4)
        ep.end("error", "error", f"{type(e).__name__}: {e}\n{tb}")
    return _freeze(ep, conv, task, run_id, sample_index, step, time.perf_counter() - t0)


def _freeze(ep: _Episode, conv: Conversation, task: Task, run_id: str, sample_index: int,
            step: int | None, total_s: float) -> Rollout:
    return Rollout(
        trace_id=ep.trace_id, task_id=task.id, sample_index=sample_index, run_id=run_id, step=step,
        messages=tuple(ep.messages), tool_calls=tuple(ep.records), n_turns=ep.n_turns,
        parse_errors=ep.parse_errors, finish_reason=ep.finish, status=ep.status,
        error=ep.error, item=task.item,
        timings=Timings(generate_s=ep.generate_s, tools_s=ep.tools_s, total_s=total_s),
        **conv.token_fields())

