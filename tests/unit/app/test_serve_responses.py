"""``arft.app.serve.responses`` without HTTP: a Responses request becomes the chat request it
means, replies become ``response`` objects and stream events that the openai package's own models
validate strictly (not just construct). Real tokenizer and ChatFormat, a scripted engine (the HTTP
face and the real clients: tests/integration/test_serve_responses.py)."""

from __future__ import annotations

import json
from typing import Any, Sequence

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from arft.app.serve.chat import ChatRequestError, ServedModel, complete, prepare, stream_chunks
from arft.app.serve.responses import ResponseEvents, ResponsesRequest, output_items, response_object, to_chat
from arft.chat.formats import ChatFormat
from arft.engines.base import EngineError, Generation, SamplingParams
from arft.engines.scripted import ScriptedEngine

EOS = "<|im_end|>"
LOOKUP = {"type": "function", "name": "lookup", "description": "Look a key up.", "strict": True,
          "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def call(name: str, **args: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def request(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "Find a.", **fields})


def scripted(tokenizer: Any, reply: str) -> ServedModel:
    return ServedModel("m", ScriptedEngine(tokenizer, lambda _ids: reply), ChatFormat(tokenizer))


def test_an_agents_sdk_conversation_becomes_the_chat_messages_it_means() -> None:
    """What the Agents SDK sends on its second turn: its own output items back, then the tool's."""
    items = [{"role": "user", "content": "Find a."},
             {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
             {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup", "arguments": '{"key":"a"}'},
             {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "lookup", "arguments": '{"key":"b"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "7"}]},
             {"type": "function_call_output", "call_id": "call_2", "output": "8"},
             {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]}]
    chat = to_chat(request(input=items, instructions="You look keys up.", tools=[LOOKUP], parallel_tool_calls=False,
                           tool_choice={"type": "function", "name": "lookup"}, max_output_tokens=9, include=[],
                           text={"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
                           metadata={"run": "x"}, store=False, reasoning={"effort": "low"}, truncation="disabled"))
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "tool", "tool", "developer"]
    assert chat.messages[0]["content"] == "You look keys up."
    assert chat.messages[2]["content"] == "Looking." and [c["id"] for c in chat.messages[2]["tool_calls"]] == [
        "call_1", "call_2"]  # one turn: the text and both calls
    assert chat.messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "7"}
    assert chat.tools == [{"type": "function", "function": {k: v for k, v in LOOKUP.items() if k != "type"}}]
    assert chat.tool_choice == {"type": "function", "function": {"name": "lookup"}}
    assert (chat.parallel_tool_calls, chat.max_tokens) == (False, 9)
    assert chat.response_format == {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}}


@pytest.mark.parametrize("fields, param, words", [
    ({"conversation": "conv_1"}, "conversation", "keeps no response state"),
    ({"background": True}, "background", "not supported"),
    ({"truncation": "auto"}, "truncation", "never drops input items"),
    ({"include": ["message.output_text.logprobs"]}, "include", "/v1/chat/completions"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input", "'input_image'"),
    ({"input": [{"type": "function_call", "name": "lookup", "arguments": "{}"}]}, "input", "'call_id'"),
    ({"tool_choice": {"type": "web_search"}}, "tool_choice", "not supported"),
    ({"top_logprobs": 2}, "top_logprobs", "unrecognized request argument"),
])
def test_what_arft_cannot_honour_is_refused_by_name(fields: dict[str, Any], param: str, words: str) -> None:
    with pytest.raises(ChatRequestError) as err:
        to_chat(request(**fields))
    assert err.value.param == param and words in str(err.value)


async def test_a_reply_is_a_response_the_openai_model_validates(tokenizer: Any) -> None:
    req = request(tools=[LOOKUP])
    done = await complete(scripted(tokenizer, "Sure." + call("lookup", key="a")), to_chat(req))
    choice = done["choices"][0]
    response = Response.model_validate(response_object(req, "m", output_items(choice["message"]),
                                                       choice["finish_reason"], done["usage"]))
    assert response.status == "completed" and response.output_text == "Sure."
    assert response.output[1].type == "function_call" and response.output[1].arguments == '{"key": "a"}'
    assert response.usage is not None and response.usage.input_tokens == done["usage"]["prompt_tokens"]


@pytest.mark.parametrize("reply", ["Checking now." + call("lookup", key="a") + "\n" + call("lookup", key="b"),
                                   "Just text." + EOS, call("lookup", key="b"), "one two three four five six"])
async def test_stream_events_validate_and_end_in_the_non_streamed_output(tokenizer: Any, reply: str) -> None:
    req = request(tools=[LOOKUP], max_output_tokens=100 if "six" not in reply else 3)
    done = await complete(scripted(tokenizer, reply), to_chat(req))
    chat = to_chat(req.model_copy(update={"stream": True}))
    model = scripted(tokenizer, reply)
    events = [EVENTS.validate_python(e) async for e in
              ResponseEvents(req, "m").translate(stream_chunks(model, chat, prepare(model, chat)))]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    last = events[-1]
    expected = output_items(done["choices"][0]["message"])
    fresh = ("id", "call_id", "status")  # new ids on each reply; statuses are checked below
    assert [{k: v for k, v in i.model_dump(exclude_none=True).items() if k not in fresh}
            for i in last.response.output] == [{k: v for k, v in i.items() if k not in fresh} for i in expected]
    cut = done["choices"][0]["finish_reason"] == "length"
    assert last.type == ("response.incomplete" if cut else "response.completed")
    assert last.response.usage.output_tokens == done["usage"]["completion_tokens"]
    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    assert added == [e.item.id for e in events if e.type == "response.output_item.done"] == [
        i.id for i in last.response.output]


class Failing(ScriptedEngine):
    """Streams a few tokens, then fails as an engine does when its server goes away."""

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, on_tokens: Any = None) -> Generation:
        await super().generate(prompt_ids, params, on_tokens)
        raise EngineError("the engine went away")


async def test_an_engine_failure_mid_stream_ends_with_response_failed(tokenizer: Any) -> None:
    model = ServedModel("m", Failing(tokenizer, lambda _ids: "Partial text"), ChatFormat(tokenizer))
    req = request(stream=True)
    chat = to_chat(req)
    events = [EVENTS.validate_python(e) async for e in
              ResponseEvents(req, "m").translate(stream_chunks(model, chat, prepare(model, chat)))]
    assert events[-1].type == "response.failed" and events[-1].response.status == "failed"
    assert "the engine went away" in events[-1].response.error.message
