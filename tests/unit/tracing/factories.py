"""Hand-made rollouts for the store, export and report tests (real records, no engine)."""

from __future__ import annotations

from arft.records import (FunctionCall, Message, Rollout, Score, Timings, ToolCall,
                          ToolCallRecord, new_trace_id)


def tool_record(trace_id: str, call_id: str, name: str = "search", *, turn: int = 0,
                status: str = "ok", latency_s: float = 0.1, output: str = "result",
                error: str | None = None, http_status: int | None = 200) -> ToolCallRecord:
    return ToolCallRecord(trace_id=trace_id, call_id=call_id, name=name,
                          arguments='{"q": "x"}', output=output,
                          status=status,  # type: ignore[arg-type]
                          error=error, http_status=http_status, latency_s=latency_s, turn=turn)


def make_rollout(task_id: str = "t1", *, sample_index: int = 0, run_id: str = "run1",
                 score: Score | None = None, status: str = "ok",
                 calls: list[tuple[str, int]] | None = None, parse_errors: int = 0,
                 finish_reason: str = "answer", n_tokens: int = 0,
                 failing: set[int] | None = None) -> Rollout:
    """A rollout whose tool calls are ``calls`` = [(tool name, turn), ...].

    Messages mirror the calls: per turn an assistant message with its tool calls and one tool
    message per call; then a final answer. Calls whose index is in ``failing`` have status
    "tool_error". ``n_tokens`` tokens, the second half of them sampled.
    """
    tid = new_trace_id()
    calls = calls or []
    failing = failing or set()
    records = [tool_record(tid, f"call_{i}", name, turn=turn, latency_s=0.1 * (i + 1),
                           status="tool_error" if i in failing else "ok",
                           error="boom" if i in failing else None)
               for i, (name, turn) in enumerate(calls)]
    messages: list[Message] = [Message(role="system", content="be brief"),
                               Message(role="user", content="find [bold]x[/bold]")]
    for turn in sorted({r.turn for r in records}):
        in_turn = [r for r in records if r.turn == turn]
        messages.append(Message(role="assistant", content=None, tool_calls=tuple(
            ToolCall(id=r.call_id, function=FunctionCall(name=r.name, arguments=r.arguments))
            for r in in_turn)))
        messages += [Message(role="tool", content=r.output, tool_call_id=r.call_id)
                     for r in in_turn]
    messages.append(Message(role="assistant", content="the answer is 42"))
    half = n_tokens // 2
    mask = tuple([0] * half + [1] * (n_tokens - half))
    return Rollout(
        trace_id=tid, task_id=task_id, sample_index=sample_index, run_id=run_id,
        messages=tuple(messages), tool_calls=tuple(records),
        token_ids=tuple(range(100, 100 + n_tokens)), loss_mask=mask,
        logprobs=tuple(-(i + 1) / 3 if m else 0.0 for i, m in enumerate(mask)),
        prompt_len=half, n_turns=len({r.turn for r in records}) + 1,
        parse_errors=parse_errors, finish_reason=finish_reason,  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
        timings=Timings(generate_s=1.0, tools_s=0.5, grade_s=0.25, total_s=1.75),
        score=score, item={"answer": 42, "tags": ["a", "b"]},
    )
