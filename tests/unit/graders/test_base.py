"""build_sample: the sample namespace graders read, built from a real multi-turn rollout."""

from __future__ import annotations

import json

import pytest

from arft.config.graders import StringCheckSpec
from arft.graders.base import Grader, GraderError, build_sample, validate_spec
from arft.graders.string_check import StringCheckGrader
from arft.records import Message

from .helpers import make_rollout


def test_output_text_and_json() -> None:
    sample = build_sample(make_rollout())
    assert sample["output_text"] == "The capital is Paris."
    assert sample["output_json"] is None
    sample = build_sample(make_rollout(answer='{"city": "Paris", "n": [1, 2]}'))
    assert sample["output_json"] == {"city": "Paris", "n": [1, 2]}


def test_output_tools_lists_every_call_of_the_rollout() -> None:
    tools = build_sample(make_rollout())["output_tools"]
    assert tools == [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "France"}'}},
        {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "Paris"}'}},
        {"id": "c3", "type": "function", "function": {"name": "search", "arguments": '{"text": "x"}'}},
    ]


def test_choices_hold_the_final_message() -> None:
    choices = build_sample(make_rollout())["choices"]
    assert choices == [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "The capital is Paris."}}]
    truncated = build_sample(make_rollout(finish_reason="max_tokens", status="truncated"))
    assert truncated["choices"][0]["finish_reason"] == "length"


def test_final_message_with_calls_finishes_with_tool_calls() -> None:
    rollout = make_rollout()
    cut = make_rollout(messages=rollout.messages[:5], finish_reason="max_episode_steps")
    sample = build_sample(cut)
    assert sample["output_text"] == "Checking."
    assert sample["choices"][0]["finish_reason"] == "tool_calls"
    assert sample["trajectory"]["finish_reason"] == "max_episode_steps"


def test_no_assistant_message() -> None:
    rollout = make_rollout(messages=(Message(role="user", content="hi"),), tool_calls=())
    sample = build_sample(rollout)
    assert sample["output_text"] == "" and sample["output_tools"] == []
    assert sample["choices"][0]["message"] == {"role": "assistant", "content": ""}


def test_trajectory_has_everything() -> None:
    rollout = make_rollout()
    traj = build_sample(rollout)["trajectory"]
    assert traj["trace_id"] == rollout.trace_id
    assert len(traj["messages"]) == 8
    assert traj["messages"][3] == {"role": "tool", "content": "France: capital Paris",
                                   "tool_call_id": "c1"}
    assert traj["n_tool_calls"] == 3 and traj["n_turns"] == 3 and traj["parse_errors"] == 1
    assert traj["status"] == "ok" and traj["finish_reason"] == "answer"
    failed = traj["tool_calls"][2]
    assert failed["status"] == "tool_error" and failed["error"] == "HTTP 400"
    assert failed["output"] == "error: search is down" and failed["http_status"] == 400
    assert traj["tool_calls"][1]["latency_s"] == 0.5


def test_sample_is_plain_json() -> None:
    # Python graders run in a sandbox process: the sample must survive a JSON round trip.
    sample = build_sample(make_rollout(answer="[1, 2]"))
    assert json.loads(json.dumps(sample)) == sample


def test_string_check_grader_satisfies_protocol() -> None:
    spec = StringCheckSpec(type="string_check", name="g", input="a", reference="a", operation="eq")
    assert isinstance(StringCheckGrader(spec), Grader)


def test_validate_spec_names_grader_field_and_suggestion() -> None:
    with pytest.raises(GraderError) as err:
        validate_spec(StringCheckSpec, {"type": "string_check", "name": "exact", "input": "x",
                                        "reference": "y", "operaton": "eq"})
    message = str(err.value)
    assert "grader 'exact' (string_check)" in message
    assert "field 'operation': Field required" in message
    assert "field 'operaton': unknown field (did you mean 'operation'?" in message
