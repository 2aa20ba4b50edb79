"""``arft.app.serve.chat`` without HTTP: requests become the rollouts' prompt and sampling, replies
become chat-completions messages, and a stream's deltas add up to the same message. Real
tokenizer and ChatFormat; scripted and tiny-model engines (the HTTP face: tests/integration/test_serve.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from arft.app.serve.chat import (ChatRequest, ChatRequestError, ServedModel, StreamSplitter, complete,
                                 prepare, stream_chunks)
from arft.data.dataset import parse_messages
from arft.engines.scripted import ScriptedEngine
from arft.engines.transformers.engine import TransformersEngine
from arft.chat.formats import ChatFormat
from arft.chat.constraints import JsonGrammar

EOS = "<|im_end|>"
LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string", "enum": ["a", "b"]}},
                   "required": ["key"], "additionalProperties": False}}}
USER = [{"role": "user", "content": "Find a."}]


def call(name: str, **args: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def scripted(tokenizer: Any, *replies: str) -> ServedModel:
    it = iter(replies)
    return ServedModel("m", ScriptedEngine(tokenizer, lambda _ids: next(it)), ChatFormat(tokenizer))


def request(**fields: Any) -> ChatRequest:
    return ChatRequest.model_validate({"model": "m", "messages": USER, **fields})


def accumulate(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What an OpenAI client builds from a stream's deltas."""
    content, calls, finish = "", {}, None
    for c in chunks:
        for choice in c["choices"]:
            delta, finish = choice["delta"], choice["finish_reason"] or finish
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or ():
                slot = calls.setdefault(tc["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.get("id") or slot["id"]
                slot["name"] += tc.get("function", {}).get("name") or ""
                slot["arguments"] += tc.get("function", {}).get("arguments") or ""
    return {"content": content or None, "calls": [calls[i] for i in sorted(calls)], "finish": finish}


async def test_a_call_reply_is_tool_calls_and_the_prompt_is_the_rollouts(tokenizer: Any) -> None:
    model = scripted(tokenizer, "Sure." + call("lookup", key="a"))
    out = await complete(model, request(tools=[LOOKUP]))
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Sure."
    (tc,) = choice["message"]["tool_calls"]
    assert tc["type"] == "function" and tc["id"].startswith("call_")
    assert tc["function"] == {"name": "lookup", "arguments": '{"key": "a"}'}
    rendered = model.fmt.render_prompt(parse_messages(USER), [LOOKUP], "auto")
    assert out["usage"]["prompt_tokens"] == len(rendered.ids)
    assert out["usage"]["completion_tokens"] == len(tokenizer.encode("Sure." + call("lookup", key="a")))


async def test_a_forced_tool_and_parallel_calls_off_reach_the_sampling(tokenizer: Any) -> None:
    model = scripted(tokenizer)
    named = prepare(model, request(tools=[LOOKUP], tool_choice={"type": "function", "function": {"name": "lookup"}},
                                   parallel_tool_calls=False, stop="END", max_tokens=7, temperature=0.2, seed=3))
    assert named.rendered.prefill.startswith("<tool_call>") and '"lookup"' in named.rendered.prefill
    p = named.params
    assert p.stop_unless_followed_by == () and "END" in p.stop and "</tool_call>" in p.stop
    assert (p.max_new_tokens, p.temperature, p.seed, p.parallel_tool_calls) == (7, 0.2, 3, False)
    free = prepare(model, request(tools=[LOOKUP]))
    assert free.params.stop_unless_followed_by == ("<tool_call>",) and free.params.grammar is None  # scripted: no masks


@pytest.mark.parametrize("fields, param, words", [
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages", "role 'robot'"),
    ({"tools": [{"type": "web_search"}]}, "tools", "only function tools"),
    ({"tool_choice": "required"}, "tool_choice", "needs at least one tool"),
    ({"tools": [LOOKUP], "tool_choice": "nope"}, "tool_choice", "names tool 'nope'"),
    ({"frequency_penalty": 0.5}, "frequency_penalty", "not supported"),
    ({"magic": 1}, "magic", "unrecognized request argument"),
    ({"max_tokens": 5000}, "max_tokens", "above this server's limit of 1024"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "up to 4"),
    ({"stream": True, "n": 2}, "n", "cannot be streamed"),
    ({"response_format": {"type": "json_object"}}, "response_format", "cannot constrain a reply to JSON"),
    ({"response_format": {"type": "xml"}}, "response_format", "unknown"),
])
def test_bad_requests_name_the_field(tokenizer: Any, fields: dict[str, Any], param: str, words: str) -> None:
    with pytest.raises(ChatRequestError) as err:
        prepare(scripted(tokenizer), request(**fields))
    assert err.value.param == param and words in str(err.value)


def test_neutral_values_and_bookkeeping_fields_are_accepted(tokenizer: Any) -> None:
    prepare(scripted(tokenizer), request(frequency_penalty=0, presence_penalty=0, logit_bias={}, user="u",
                                         metadata={"a": "b"}, store=False, response_format={"type": "text"}))


async def test_an_unreadable_call_is_returned_as_written(tokenizer: Any) -> None:
    broken = '<tool_call>\n{"name": "lookup", "arguments": {"key": a}}\n</tool_call>'
    out = await complete(scripted(tokenizer, broken), request(tools=[LOOKUP], max_tokens=200))
    message = out["choices"][0]["message"]
    assert message == {"role": "assistant", "content": broken}
    assert out["choices"][0]["finish_reason"] == "stop"  # it ended at the call's close, a stop


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_cut_by_max_tokens_is_dropped_and_the_complete_ones_kept(tokenizer: Any, stream: bool) -> None:
    """One rule for both paths: finish_reason length, complete calls kept, the cut one's text gone."""
    cut = "Looking." + call("lookup", key="a") + '\n<tool_call>\n{"name": "lookup", "arguments": {"key": "b'
    only_cut = '<tool_call>\n{"name": "lookup", "arguments": {"k'
    for reply, calls in ((cut, [("lookup", '{"key": "a"}')]), (only_cut, [])):
        model = scripted(tokenizer, reply)
        req = request(tools=[LOOKUP], max_tokens=200, stream=stream)
        if stream:
            got = accumulate([c async for c in stream_chunks(model, req, prepare(model, req))])
        else:
            choice = (await complete(model, req))["choices"][0]
            got = {"content": choice["message"]["content"], "finish": choice["finish_reason"],
                   "calls": [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                             for c in choice["message"].get("tool_calls") or ()]}
        assert got["finish"] == "length"  # the scripted reply ends without eos or a stop
        assert [(c["name"], c["arguments"]) for c in got["calls"]] == calls
        assert got["content"] == ("Looking." if calls else None)


def test_a_constrained_stream_announces_a_call_only_once_it_is_closed() -> None:
    s = StreamSplitter("", early_names=True)
    assert s.feed('<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}') == []  # max_tokens may still cut it
    (named,) = s.feed('<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call>')
    assert named["tool_calls"][0]["function"] == {"name": "lookup", "arguments": ""}


async def test_echoed_assistant_messages_and_tool_results_are_accepted(tokenizer: Any) -> None:
    """What an OpenAI client sends back: the reply's message (with null refusal, audio...) and a
    tool message answering its call."""
    model = scripted(tokenizer, "It is 7." + EOS)
    history = [*USER, {"role": "assistant", "content": None, "refusal": None, "audio": None, "annotations": None,
                       "function_call": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                           "name": "lookup", "arguments": '{"key": "a"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "a=7"}]
    out = await complete(model, request(messages=history, tools=[LOOKUP]))
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "It is 7."}
    assert out["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("reply", ["Checking now." + call("lookup", key="a") + "\n" + call("lookup", key="b"),
                                   "Just text, no call at all." + EOS,
                                   '<tool_call>\n{"name": "lookup", "arguments": {"key": "a"',
                                   "   " + call("lookup", key="b")])
async def test_stream_deltas_add_up_to_the_completion(tokenizer: Any, reply: str) -> None:
    done = await complete(scripted(tokenizer, reply), request(tools=[LOOKUP], max_tokens=200))
    model = scripted(tokenizer, reply)
    req = request(tools=[LOOKUP], max_tokens=200, stream=True, stream_options={"include_usage": True})
    chunks = [c async for c in stream_chunks(model, req, prepare(model, req))]
    got = accumulate(chunks)
    message = done["choices"][0]["message"]
    assert got["content"] == message["content"] and got["finish"] == done["choices"][0]["finish_reason"]
    assert [(c["name"], c["arguments"]) for c in got["calls"]] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == done["usage"]
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks[1:-2]]
    if message["content"] and "text" in message["content"]:
        assert sum(1 for p in pieces if p) > 3  # streamed token by token, not at the end


def test_splitter_holds_back_a_marker_in_the_making_and_names_calls_early() -> None:
    s = StreamSplitter("", early_names=True)
    assert s.feed("Hello <tool_c") == [{"content": "Hello"}]  # the space and '<tool_c' wait
    assert s.feed('Hello <tool_call>\n{"name": "look') == []
    assert s.feed('Hello <tool_call>\n{"name": "lookup", "arguments": {"k') == []  # not closed yet
    named = s.feed('Hello <tool_call>\n{"name": "lookup", "arguments": {"k": 1}}\n</tool_call>')
    assert named == [{"tool_calls": [{"index": 0, "id": s.call_ids[0], "type": "function",
                                      "function": {"name": "lookup", "arguments": ""}}]}]
    final = {"content": "Hello", "tool_calls": [{"id": s.call_ids[0], "type": "function",
                                                  "function": {"name": "lookup", "arguments": '{"k": 1}'}}]}
    assert s.finish(final) == [{"tool_calls": [{"index": 0, "function": {"arguments": '{"k": 1}'}}]}]
    plain = StreamSplitter("", early_names=False)
    assert plain.feed('<tool_call>\n{"name": "lookup", "arguments": {') == []  # unconstrained: whole at the end


async def test_a_constrained_stream_names_the_call_before_its_arguments(tokenizer: Any, tiny_model: Any) -> None:
    """On the tiny real model with the grammar: a forced call is valid, streamed as several
    chunks, and its name arrives in an earlier chunk than its arguments."""
    engine = TransformersEngine(tiny_model, tokenizer, max_batch_size=4)
    model = ServedModel("m", engine, ChatFormat(tokenizer), constrain=True)
    try:
        req = request(tools=[LOOKUP], tool_choice="required", parallel_tool_calls=False, max_tokens=60,
                      stream=True, seed=1)
        prep = prepare(model, req)
        assert prep.params.grammar is not None
        chunks = [c async for c in stream_chunks(model, req, prep)]
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        named = next(i for i, d in enumerate(deltas) if (d.get("tool_calls") or [{}])[0].get("function", {}).get("name"))
        argued = next(i for i, d in enumerate(deltas) if (d.get("tool_calls") or [{}])[0].get("function", {}).get("arguments"))
        assert named < argued
        got = accumulate(chunks)
        assert got["finish"] == "tool_calls" and got["calls"][0]["name"] == "lookup"
        assert json.loads(got["calls"][0]["arguments"])["key"] in ("a", "b")
    finally:
        await engine.aclose()


async def test_a_json_schema_response_format_gives_schema_valid_json(tokenizer: Any, tiny_model: Any) -> None:
    engine = TransformersEngine(tiny_model, tokenizer, max_batch_size=4)
    model = ServedModel("m", engine, ChatFormat(tokenizer))
    schema = {"type": "object", "properties": {"result": {"enum": [0, 1, 2]},
                                               "why": {"type": "string", "maxLength": 6}},
              "required": ["result", "why"], "additionalProperties": False}
    try:
        req = request(response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}},
                      max_tokens=40, seed=2)
        assert isinstance(prepare(model, req).params.grammar, JsonGrammar)
        out = await complete(model, req)
        data = json.loads(out["choices"][0]["message"]["content"])
        assert set(data) == {"result", "why"} and data["result"] in (0, 1, 2) and len(data["why"]) <= 6
        bad = request(response_format={"type": "json_schema", "json_schema": {"name": "v", "schema": {
            "type": "object", "properties": {"x": {"not": {"type": "string"}}}}}})
        with pytest.raises(ChatRequestError, match="response_format 'v': the schema keyword 'not'"):
            prepare(model, bad)
        with pytest.raises(ChatRequestError, match="cannot be combined"):
            prepare(model, request(tools=[LOOKUP], response_format={"type": "json_object"}))
    finally:
        await engine.aclose()
