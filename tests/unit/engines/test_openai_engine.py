"""OpenAIEngine against a real FastAPI fake of /v1/chat/completions on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from arft.config import OpenAIEngineSpec
from arft.engines.base import ChatEngine, EngineError
from arft.engines.openai_engine import OpenAIEngine
from arft.records import FunctionCall, Message, ToolCall
from tests.servers import free_port, serve
from tests.specs import sampling

WEATHER = {"type": "function", "function": {"name": "weather", "description": "Weather of a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}}}}}
CONVERSATION = (
    Message(role="system", content="You are terse."),
    Message(role="user", content="Weather in Oslo and Paris?"),
    Message(role="assistant", tool_calls=(ToolCall(id="c0", function=FunctionCall(name="weather",
                                                                                   arguments='{"city": "Rome"}')),)),
    Message(role="tool", tool_call_id="c0", content="sunny"),
)
REPLY = {
    "id": "chatcmpl-1", "object": "chat.completion", "model": "fake",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}},
        ]}}],
    "usage": {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59},
}


class Fake:
    """The fake server's script: statuses to answer in turn (then 200), and what it received."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.bodies: list[dict[str, Any]] = []
        self.auth: list[str | None] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def completions(request: Request) -> Any:
            self.bodies.append(await request.json())
            self.auth.append(request.headers.get("authorization"))
            status = self.statuses.pop(0) if self.statuses else 200
            if status == 200:
                return REPLY
            if status == 299:  # a 200 whose body is not JSON (a proxy glitch)
                return PlainTextResponse("<html>oops</html>")
            return JSONResponse({"error": {"message": f"scripted failure {status}"}}, status_code=status)

        return app


@pytest.fixture
def fake() -> Iterator[tuple[Fake, str]]:
    script = Fake()
    with serve(script.app()) as url:
        yield script, url + "/v1"


def engine(url: str, **kw: Any) -> OpenAIEngine:
    return OpenAIEngine(url, "served-model", api_key="sk-test", backoff_s=0.01, **kw)


async def test_sends_the_chat_completions_body_and_parses_tool_calls(fake: tuple[Fake, str]) -> None:
    script, url = fake
    eng = engine(url)
    assert isinstance(eng, ChatEngine)
    params = sampling(temperature=0.3, top_p=0.9, top_k=5, max_new_tokens=64, seed=7, stop=("</x>",))
    reply = await eng.chat(CONVERSATION, [WEATHER], "auto", params)
    await eng.aclose()

    body = script.bodies[0]
    assert body["model"] == "served-model"
    assert body["messages"] == [m.to_openai() for m in CONVERSATION]
    assert body["messages"][2]["tool_calls"][0]["function"]["name"] == "weather"
    assert body["tools"] == [WEATHER] and body["tool_choice"] == "auto"
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.3, 0.9, 64, 7)
    assert body["stop"] == ["</x>"] and "top_k" not in body
    assert script.auth == ["Bearer sk-test"]

    calls = reply.message.tool_calls
    assert reply.message.role == "assistant" and reply.message.content is None
    assert [c.id for c in calls] == ["call_a", "call_b"]
    assert [json.loads(c.function.arguments) for c in calls] == [{"city": "Oslo"}, {"city": "Paris"}]
    assert reply.finish_reason == "tool_calls"
    assert (reply.prompt_tokens, reply.completion_tokens) == (42, 17)


async def test_omits_tools_tool_choice_and_seed_when_unset(fake: tuple[Fake, str]) -> None:
    script, url = fake
    eng = engine(url)
    await eng.chat(CONVERSATION[:2], [], "required", sampling())
    await eng.chat(CONVERSATION[:2], [WEATHER], "weather", sampling())
    await eng.aclose()
    assert not {"tools", "tool_choice", "seed", "stop", "parallel_tool_calls"} & set(script.bodies[0])
    assert script.bodies[1]["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert "parallel_tool_calls" not in script.bodies[1]  # the API's default (true) is not sent


async def test_parallel_tool_calls_off_is_sent(fake: tuple[Fake, str]) -> None:
    script, url = fake
    eng = engine(url)
    await eng.chat(CONVERSATION[:2], [WEATHER], "auto", sampling(parallel_tool_calls=False))
    await eng.aclose()
    assert script.bodies[0]["parallel_tool_calls"] is False


async def test_retries_5xx_429_and_garbage_then_succeeds(fake: tuple[Fake, str]) -> None:
    script, url = fake
    script.statuses = [500, 429, 299]
    eng = engine(url)
    reply = await eng.chat(CONVERSATION[:2], [WEATHER], None, sampling())
    await eng.aclose()
    assert len(script.bodies) == 4
    assert len(reply.message.tool_calls or ()) == 2


async def test_gives_up_after_max_retries(fake: tuple[Fake, str]) -> None:
    script, url = fake
    script.statuses = [503] * 10
    eng = engine(url, max_retries=2)
    with pytest.raises(EngineError, match=r"failed 3 time\(s\).*scripted failure 503"):
        await eng.chat(CONVERSATION[:2], [], None, sampling())
    await eng.aclose()
    assert len(script.bodies) == 3


async def test_client_error_fails_at_once_with_the_servers_message(fake: tuple[Fake, str]) -> None:
    script, url = fake
    script.statuses = [400]
    eng = engine(url)
    with pytest.raises(EngineError, match="HTTP 400: scripted failure 400"):
        await eng.chat(CONVERSATION[:2], [], None, sampling())
    await eng.aclose()
    assert len(script.bodies) == 1  # no retry


async def test_connection_refused_is_retried_then_engine_error() -> None:
    eng = OpenAIEngine(f"http://127.0.0.1:{free_port()}/v1", "m", max_retries=1, backoff_s=0.01)
    with pytest.raises(EngineError, match=r"failed 2 time\(s\).*connection failed"):
        await eng.chat(CONVERSATION[:2], [], None, sampling())
    await eng.aclose()


def test_from_spec_reads_url_and_key_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-from-env")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    spec = OpenAIEngineSpec(type="openai", base_url="http://h:1/v1/", api_key_env="MY_KEY", timeout_s=5)
    eng = OpenAIEngine.from_spec("job-model", spec)
    assert (eng.url, eng.model, eng.timeout_s) == ("http://h:1/v1/chat/completions", "job-model", 5)
    assert eng._headers == {"Authorization": "Bearer sk-from-env"}
    served = OpenAIEngine.from_spec("job-model", spec.model_copy(update={"served_model": "other"}))
    assert served.model == "other"

    monkeypatch.setenv("OPENAI_BASE_URL", "http://env:2/v1")
    assert OpenAIEngine.from_spec("m", OpenAIEngineSpec(type="openai")).base_url == "http://env:2/v1"
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(ValueError, match="set engine.base_url"):
        OpenAIEngine.from_spec("m", OpenAIEngineSpec(type="openai"))
