"""A realistic finished rollout for grader tests: two tool turns, then a final answer."""

from __future__ import annotations

from typing import Any

from arft.records import FunctionCall, Message, Rollout, ToolCall, ToolCallRecord


def make_rollout(answer: str = "The capital is Paris.", **overrides: Any) -> Rollout:
    """user -> assistant calls lookup -> tool -> assistant calls 2 tools -> tools -> answer."""
    trace = "trace_" + "ab" * 16
    c1 = ToolCall(id="c1", function=FunctionCall(name="lookup", arguments='{"q": "France"}'))
    c2 = ToolCall(id="c2", function=FunctionCall(name="lookup", arguments='{"q": "Paris"}'))
    c3 = ToolCall(id="c3", function=FunctionCall(name="search", arguments='{"text": "x"}'))
    messages = (
        Message(role="system", content="Be brief."),
        Message(role="user", content="Capital of France?"),
        Message(role="assistant", content=None, tool_calls=(c1,)),
        Message(role="tool", content="France: capital Paris", tool_call_id="c1"),
        Message(role="assistant", content="Checking.", tool_calls=(c2, c3)),
        Message(role="tool", content="Paris: a city", tool_call_id="c2"),
        Message(role="tool", content="error: search is down", tool_call_id="c3"),
        Message(role="assistant", content=answer),
    )
    records = (
        ToolCallRecord(trace_id=trace, call_id="c1", name="lookup", arguments='{"q": "France"}',
                       output="France: capital Paris", latency_s=0.25, turn=1),
        ToolCallRecord(trace_id=trace, call_id="c2", name="lookup", arguments='{"q": "Paris"}',
                       output="Paris: a city", latency_s=0.5, turn=2),
        ToolCallRecord(trace_id=trace, call_id="c3", name="search", arguments='{"text": "x"}',
                       output="error: search is down", status="tool_error",
                       error="HTTP 400", http_status=400, turn=2),
    )
    fields: dict[str, Any] = dict(
        trace_id=trace, task_id="t1", messages=messages, tool_calls=records, n_turns=3,
        parse_errors=1, finish_reason="answer", status="ok",
        item={"id": "t1", "answer": "Paris", "facts": ["Paris", "France", "capital"],
              "key with space": "v", "meta": {"level": 2}},
    )
    fields.update(overrides)
    return Rollout(**fields)
