"""`arft serve` under what real clients do to it (issue 35), on 127.0.0.1 with the official `openai`
client: prompts over the context refused before any model work while other requests are
answered, a client that leaves cancels its generation, every unknown route or method answered in
the OpenAI error shape, one access-log line per request, seeded replies that repeat from the
first, and 400s a server user can act on. Scripted engines where the words must be known; the
tiny model where sampling or grammars matter."""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

import httpx
import openai
import pytest

from arft.app.serve.chat import ServedModel
from arft.app.serve.server import build_app
from arft.chat.formats import ChatFormat
from arft.engines.base import Generation, SamplingParams
from arft.engines.scripted import ScriptedEngine
from arft.engines.transformers.engine import TransformersEngine
from tests.servers import serve

EOS = "<|im_end|>"
HI = [{"role": "user", "content": "hi"}]


class Stalling(ScriptedEngine):
    """Answers "ok" at once, except a prompt holding "stall": that one waits until cancelled, and
    the engine counts the generations started, cancelled and still running."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer, lambda _ids: "ok" + EOS)
        self.started = self.cancelled = self.running = 0
        self.gone = threading.Event()

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams,
                       on_tokens: Callable[[tuple[int, ...]], None] | None = None) -> Generation:
        if "stall" not in self.tokenizer.decode(list(prompt_ids)):
            return await super().generate(prompt_ids, params, on_tokens)
        self.started += 1
        self.running += 1
        try:
            await asyncio.sleep(3600)
            raise AssertionError("a stalled generation is never answered")
        except asyncio.CancelledError:
            self.cancelled += 1
            self.gone.set()
            raise
        finally:
            self.running -= 1


@pytest.fixture
def small(tokenizer: Any) -> Iterator[tuple[str, Stalling]]:
    """A served model with a 64-token context over a stalling scripted engine."""
    engine = Stalling(tokenizer)
    with serve(build_app([ServedModel("m", engine, ChatFormat(tokenizer), max_tokens=16, context=64)])) as url:
        yield url, engine


def client(url: str, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, **options)


def test_a_prompt_over_the_context_is_refused_while_a_small_one_is_answered(small: tuple[str, Stalling]) -> None:
    url, engine = small
    huge = [{"role": "user", "content": "word " * 60_000}]
    with ThreadPoolExecutor(2) as pool:
        refused = pool.submit(client(url).chat.completions.create, model="m", messages=huge)
        answered = pool.submit(client(url).chat.completions.create, model="m", messages=HI)
        with pytest.raises(openai.BadRequestError) as err:
            refused.result()
        assert answered.result().choices[0].message.content == "ok"
    body = err.value.body
    assert body["param"] == "messages" and body["code"] == "context_length_exceeded"
    assert "at least 60,000 tokens" in body["message"] and "context is 64 tokens" in body["message"]
    assert engine.calls == 1  # the huge prompt never reached the engine
    words = [{"role": "user", "content": "a,b;c.d " * 12}]  # 12 words, many more tokens
    with pytest.raises(openai.BadRequestError, match=r"the prompt is \d+ tokens; this model's context is 64"):
        client(url).chat.completions.create(model="m", messages=words)
    with pytest.raises(openai.BadRequestError, match="max_tokens asks for 16 more") as err:
        client(url).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi " * 25}],
                                            max_tokens=16)
    assert err.value.body["param"] == "max_tokens"
    assert engine.calls == 1


def test_a_client_that_leaves_cancels_its_generation(small: tuple[str, Stalling]) -> None:
    url, engine = small
    with pytest.raises(openai.APITimeoutError):
        client(url, timeout=0.5).chat.completions.create(model="m", messages=[{"role": "user", "content": "stall"}])
    assert engine.gone.wait(10)
    assert (engine.started, engine.cancelled, engine.running) == (1, 1, 0)  # 0 left computing for nobody
    assert client(url).chat.completions.create(model="m", messages=HI).choices[0].message.content == "ok"


def test_unknown_routes_and_methods_are_openai_errors(small: tuple[str, Stalling]) -> None:
    url, _ = small
    with pytest.raises(openai.NotFoundError, match="no route POST /v1/completions") as err:
        client(url).completions.create(model="m", prompt="hi")
    assert "POST /v1/chat/completions" in err.value.body["message"]  # says which API to use
    wrong = httpx.get(url + "/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json()["error"]["type"] == "invalid_request_error"
    assert wrong.json()["error"]["code"] == "method_not_allowed"


def test_every_request_is_one_access_log_line(small: tuple[str, Stalling], caplog: pytest.LogCaptureFixture) -> None:
    url, _ = small
    caplog.set_level(logging.INFO, logger="arft.serve.access")
    c = client(url, default_headers={"x-arft-trace-id": "trace_5e1f"})
    r = c.chat.completions.create(model="m", messages=HI)
    httpx.get(url + "/nowhere")
    lines = [rec for rec in caplog.records if rec.name == "arft.serve.access"]
    chat, missing = lines
    assert (chat.method, chat.route, chat.status, chat.trace_id) == (  # type: ignore[attr-defined]
        "POST", "/v1/chat/completions", 200, "trace_5e1f")
    assert chat.prompt_tokens == r.usage.prompt_tokens  # type: ignore[attr-defined]
    assert chat.completion_tokens == r.usage.completion_tokens  # type: ignore[attr-defined]
    assert chat.latency_ms >= 0 and "POST /v1/chat/completions 200" in chat.getMessage()  # type: ignore[attr-defined]
    assert (missing.route, missing.status, missing.trace_id) == ("/nowhere", 404, None)  # type: ignore[attr-defined]


def test_bad_conversations_and_logprob_fields_are_400s(small: tuple[str, Stalling]) -> None:
    url, _ = small
    orphan = [*HI, {"role": "tool", "tool_call_id": "call_nope", "content": "7"}]
    with pytest.raises(openai.BadRequestError, match="no call has the id 'call_nope'") as err:
        client(url).chat.completions.create(model="m", messages=orphan)
    assert err.value.body["param"] == "messages[1]"
    r = client(url).chat.completions.create(model="m", messages=HI, logprobs=True, top_logprobs=0)
    assert [t.token for t in r.choices[0].logprobs.content] == ["ok", EOS]
    with pytest.raises(openai.BadRequestError, match="top_logprobs above 0"):
        client(url).chat.completions.create(model="m", messages=HI, logprobs=True, top_logprobs=3)
    with pytest.raises(openai.BadRequestError, match="logprobs cannot be streamed"):
        client(url).chat.completions.create(model="m", messages=HI, logprobs=True, stream=True)


async def test_seeded_replies_repeat_from_the_first_and_schema_errors_name_the_server_option(
        tokenizer: Any, tiny_model: Any) -> None:
    engine = TransformersEngine(tiny_model, tokenizer, max_batch_size=4)
    try:
        with serve(build_app([ServedModel("tiny", engine, ChatFormat(tokenizer))])) as url:
            c = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
            ask = [{"role": "user", "content": "Tell me a story about a cat and a dog please."}]

            async def reply(seed: int) -> str | None:
                r = await c.chat.completions.create(model="tiny", messages=ask, temperature=1, seed=seed,
                                                    max_tokens=30)
                return r.choices[0].message.content

            # one after another: a cold prompt, then the same with its keys and values stored (this
            # prompt and seed sampled another first reply when a cold prompt ran whole)
            first, second, third = [await reply(7) for _ in range(3)]
            assert first == second == third and first
            assert await reply(8) != first
            bad = {"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"x": {"type": "strin"}}}}}
            with pytest.raises(openai.BadRequestError) as err:
                await c.chat.completions.create(model="tiny", messages=ask, tools=[bad])
            message = err.value.body["message"]
            assert "Unsupported type" in message and "--no-constrain" in message
            assert ".cc:" not in message and "rollout.constrained_tool_calls" not in message
            await c.close()
    finally:
        await engine.aclose()
