"""`arft serve`'s Responses API for real: the FastAPI app on 127.0.0.1, called with the official
`openai` client (`client.responses.create`, streamed and not, a function-call round trip) and by an
OpenAI Agents SDK agent on its default model class (`OpenAIResponsesModel`). A scripted engine, so
the words are known; its prompts show what reached the model."""

from __future__ import annotations

import json
from typing import Any, Iterator

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai.types.responses import Response, ResponseFunctionToolCall, ResponseOutputMessage

from arft.app.serve.chat import ServedModel
from arft.app.serve.server import build_app
from arft.chat.formats import ChatFormat
from arft.engines.scripted import ScriptedEngine
from tests.integration.test_serve import EOS, Script, call
from tests.servers import serve

LOOKUP = {"type": "function", "name": "lookup", "description": "Look a key up.", "strict": True,
          "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"],
                         "additionalProperties": False}}


@pytest.fixture
def server(tokenizer: Any) -> Iterator[tuple[str, Script]]:
    script = Script(tokenizer)
    model = ServedModel("agent", ScriptedEngine(tokenizer, script), ChatFormat(tokenizer))
    with serve(build_app([model], api_key="sk-local")) as url:
        yield url + "/v1", script


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="sk-local", max_retries=0)


def test_a_function_call_round_trip_through_the_official_client(server: tuple[str, Script]) -> None:
    url, script = server
    script.replies += ["Let me look." + call("lookup", key="a"), "The code for a is 7." + EOS]
    c = client(url)
    first = c.responses.create(model="agent", instructions="Be brief.", input="What is the code for a?",
                               tools=[LOOKUP])  # type: ignore[list-item]
    assert isinstance(first, Response) and first.status == "completed" and first.model == "agent"
    message, fc = first.output
    assert isinstance(message, ResponseOutputMessage) and first.output_text == "Let me look."
    assert isinstance(fc, ResponseFunctionToolCall) and fc.call_id.startswith("call_")
    assert (fc.name, json.loads(fc.arguments)) == ("lookup", {"key": "a"})
    assert first.usage is not None and first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens
    history: list[Any] = [{"role": "user", "content": "What is the code for a?"},
                          *[item.model_dump(exclude_none=True) for item in first.output],
                          {"type": "function_call_output", "call_id": fc.call_id, "output": "a=7 (stamp-9c2d)"}]
    second = c.responses.create(model="agent", instructions="Be brief.", input=history, tools=[LOOKUP])  # type: ignore[list-item]
    assert second.output_text == "The code for a is 7." and second.output[0].type == "message"
    assert "stamp-9c2d" in script.prompts[1] and "stamp-9c2d" not in script.prompts[0]
    assert script.prompts[1].startswith(script.prompts[0])  # the sampled turn is re-rendered as it was
    assert script.prompts[0].index("Be brief.") < script.prompts[0].index("What is the code for a?")


def test_a_stream_assembles_into_the_same_response(server: tuple[str, Script]) -> None:
    url, script = server
    script.replies += ["Checking." + call("lookup", key="b")] * 2
    c = client(url)
    events = list(c.responses.create(model="agent", input="Code of b?", tools=[LOOKUP], stream=True))  # type: ignore[list-item]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for kind in ("response.output_item.added", "response.output_text.delta", "response.function_call_arguments.delta",
                 "response.function_call_arguments.done", "response.output_item.done"):
        assert kind in kinds
    done = events[-1].response  # type: ignore[union-attr]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert text == done.output_text == "Checking."
    assert [i.type for i in done.output] == ["message", "function_call"]
    # the SDK's own stream helper rebuilds the response from the events and agrees
    with c.responses.stream(model="agent", input="Code of b?", tools=[LOOKUP]) as stream:  # type: ignore[list-item]
        final = stream.get_final_response()
    assert final.output_text == "Checking." and final.output[1].arguments == '{"key": "b"}'  # type: ignore[union-attr]


def test_a_reply_cut_by_max_output_tokens_is_incomplete(server: tuple[str, Script]) -> None:
    url, script = server
    script.replies += ["one two three four five six seven eight" + EOS]
    r = client(url).responses.create(model="agent", input="Count.", max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens" and r.usage is not None and r.usage.output_tokens == 3


@pytest.mark.parametrize("fields, param, words", [
    ({"previous_response_id": "resp_1"}, "previous_response_id", "keeps no response state"),
    ({"tools": [{"type": "web_search"}]}, "tools", "'web_search' are not supported"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input", "'reasoning' are not supported"),
    ({"max_output_tokens": 5000}, "max_output_tokens", "above this server's limit"),
    ({"extra_body": {"magic": 1}}, "magic", "unrecognized request argument"),
    ({"text": {"format": {"type": "json_object"}}}, "text.format", "cannot constrain a reply to JSON"),
    ({"temperature": 3}, "temperature", "less than or equal to 2"),
])
def test_refusals_are_openai_shaped_and_name_the_field(server: tuple[str, Script], fields: dict[str, Any],
                                                       param: str, words: str) -> None:
    url, _ = server
    with pytest.raises(openai.BadRequestError) as err:
        client(url).responses.create(**{"model": "agent", "input": "hi", **fields})
    assert err.value.body["param"] == param and words in err.value.body["message"]  # type: ignore[index]


def test_an_unknown_model_is_an_openai_not_found(server: tuple[str, Script]) -> None:
    url, _ = server
    with pytest.raises(openai.NotFoundError, match="served: \\['agent'\\]"):
        client(url).responses.create(model="gpt-9", input="hi")


@function_tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"{key}=7 (stamp-41aa)"


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_agents_sdk_agent_on_its_default_model_class(server: tuple[str, Script], streamed: bool) -> None:
    url, script = server
    script.replies += [call("lookup", key="a"), "The code for a is 7." + EOS]
    set_tracing_disabled(True)
    c = openai.AsyncOpenAI(base_url=url, api_key="sk-local", max_retries=0)
    agent = Agent(name="coder", instructions="Answer with the code.", tools=[lookup],
                  model=OpenAIResponsesModel(model="agent", openai_client=c))
    try:
        if streamed:
            run = Runner.run_streamed(agent, "What is the code for a?")
            async for _ in run.stream_events():
                pass
            output = run.final_output
        else:
            output = (await Runner.run(agent, "What is the code for a?")).final_output
    finally:
        await c.close()
    assert output == "The code for a is 7."
    assert "stamp-41aa" in script.prompts[1]  # the SDK ran the tool and sent its output back
    assert script.prompts[1].startswith(script.prompts[0])
