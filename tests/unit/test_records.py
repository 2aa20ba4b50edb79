"""Every record round-trips through JSON unchanged."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from arft.records import (FunctionCall, Message, Rollout, Score, Task, Timings, ToolCall, ToolCallRecord,
                          TrainBatch, new_trace_id)


def full_rollout() -> Rollout:
    tid = new_trace_id()
    call = ToolCall(id="call_1", function=FunctionCall(name="lookup", arguments='{"k": "é"}'))
    return Rollout(
        trace_id=tid, task_id="t1", sample_index=2, run_id="r",
        messages=(Message(role="user", content="q"), Message(role="assistant", tool_calls=(call,)),
                  Message(role="tool", content="v", tool_call_id="call_1", name="lookup"),
                  Message(role="assistant", content="a")),
        tool_calls=(ToolCallRecord(trace_id=tid, call_id="call_1", name="lookup", arguments='{"k": "é"}',
                                   output="v", status="tool_error", error="HTTP 404", http_status=404,
                                   latency_s=0.25, turn=0),),
        token_ids=(1, 2, 3, 4), loss_mask=(0, 0, 1, 1), logprobs=(0.0, 0.0, -0.5, -1.25), prompt_len=2,
        n_turns=2, parse_errors=1, finish_reason="answer", status="ok",
        timings=Timings(generate_s=1.5, tools_s=0.25, grade_s=0.01, total_s=1.8),
        score=Score(score=0.5, sub_scores={"a": 1.0}, passed=False, flags=("hack:x",), grader="g"),
        item={"answer": "a", "nested": {"list": [1, 2]}})


@pytest.mark.parametrize("record", [
    full_rollout(),
    Task(id="t", messages=(Message(role="user", content="hi"),), tools=({"type": "function",
         "function": {"name": "f", "parameters": {"type": "object"}}},), tool_choice="required",
         item={"x": 1}),
    TrainBatch(input_ids=((1, 2),), loss_mask=((0, 1),), old_logprobs=((0.0, -0.1),),
               advantages=(0.5,), trace_ids=("trace_x",)),
])
def test_round_trip(record: object) -> None:
    cls = type(record)
    text = record.model_dump_json()  # type: ignore[attr-defined]
    assert cls.model_validate_json(text) == record  # type: ignore[attr-defined]
    assert cls.model_validate(json.loads(text)) == record  # type: ignore[attr-defined]


def test_records_are_frozen_and_strict() -> None:
    r = full_rollout()
    with pytest.raises(ValidationError):
        r.status = "error"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Message(role="user", content="x", unknown_key=1)  # type: ignore[call-arg]


def test_trace_id_format() -> None:
    a, b = new_trace_id(), new_trace_id()
    assert a != b and a.startswith("trace_") and len(a) == 38 and int(a[6:], 16) >= 0


def test_output_text_is_the_last_assistant_message() -> None:
    assert full_rollout().output_text == "a"
    assert full_rollout().n_sampled_tokens == 2
