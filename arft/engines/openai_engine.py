"""A chat engine over any OpenAI-compatible ``/chat/completions`` server (evaluation only).

It sends chat messages and tool schemas and gets one assistant message back: no token ids, so
rollouts made with it cannot train (see ``arft.engines.base.ChatEngine``). Transient failures
(5xx, 429, timeouts, dropped connections, unreadable answers) are retried with exponential
backoff (``arft.http.retrying_post``, the loop every HTTP client of arft shares); any other 4xx
is the caller's mistake and fails at once with the server's message.

The API key is ``engine.api_key`` (a ``${ENV_VAR}`` reference, resolved by ``arft.secrets``)
or else read from the environment variable *named* in ``engine.api_key_env``: the key itself
need never appear in a job file.
"""

from __future__ import annotations

import json
import os
import uuid
from functools import partial
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Sequence

from arft.config import JobError
from arft.engines.base import ChatReply, EngineError, SamplingParams
from arft.http import Exhausted, Rejected, json_client, retrying_post
from arft.records import FunctionCall, json_list, json_object, Message, ToolCall
from arft.secrets import resolve

if TYPE_CHECKING:
    from arft.config import OpenAIEngineSpec

_TOOL_CHOICE_WORDS = frozenset({"auto", "required", "none"})


class OpenAIEngine:
    """``ChatEngine`` over ``POST {base_url}/chat/completions``."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 timeout_s: float = 120.0, max_retries: int = 3, backoff_s: float = 0.5) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        """First wait between retries; it doubles after every failed try (capped at 30 s)."""
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = json_client(timeout_s)

    @classmethod
    def from_spec(cls, model_name: str, spec: "OpenAIEngineSpec") -> "OpenAIEngine":
        """Build from the job's ``engine`` section (``served_model`` defaults to ``model_name``)."""
        base_url = spec.base_url or os.environ.get("OPENAI_BASE_URL")
        if not base_url:
            raise JobError("the openai engine needs a server: set engine.base_url in the job "
                           "(e.g. http://127.0.0.1:8000/v1) or the OPENAI_BASE_URL environment "
                           "variable")
        api_key = (resolve(spec.api_key, "engine.api_key") if spec.api_key
                   else os.environ.get(spec.api_key_env))
        return cls(base_url, spec.served_model or model_name, api_key=api_key,
                   timeout_s=spec.timeout_s)

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    async def chat(self, messages: Sequence[Message], tools: Sequence[dict[str, object]],
                   tool_choice: str | dict[str, object] | None, params: SamplingParams) -> ChatReply:
        """One assistant message for ``messages`` (with ``tool_calls`` when the model calls tools)."""
        body = json.dumps(self.request_body(messages, tools, tool_choice, params)).encode()
        try:
            answer = await retrying_post(
                self._client.get(), self.url, body, what=self.url,
                parse=partial(parse_reply, url=self.url), attempts=self.max_retries + 1,
                timeout_s=self.timeout_s, backoff_s=self.backoff_s, headers=self._headers)
        except Rejected as e:
            raise EngineError(f"{e} (check engine.served_model '{self.model}', the API key "
                              "variable and the sampling settings)") from None
        except Exhausted as e:
            raise EngineError(f"{e}; check that the server is up and not overloaded, or raise "
                              "engine.timeout_s") from None
        return answer.value

    def request_body(self, messages: Sequence[Message], tools: Sequence[dict[str, object]],
                     tool_choice: str | dict[str, object] | None, params: SamplingParams) -> dict[str, Any]:
        """The JSON body sent to ``/chat/completions`` (``top_k`` has no field there: dropped)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_openai() for m in messages],
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if tools:
            body["tools"] = list(tools)
            if tool_choice is not None:
                body["tool_choice"] = _tool_choice(tool_choice)
            if not params.parallel_tool_calls:
                body["parallel_tool_calls"] = False
        return body

    async def aclose(self) -> None:
        await self._client.aclose()


def _tool_choice(choice: str | dict[str, object]) -> str | dict[str, Any]:
    """A bare tool name becomes the chat-completions object that forces that tool."""
    if isinstance(choice, str) and choice not in _TOOL_CHOICE_WORDS:
        return {"type": "function", "function": {"name": choice}}
    return choice


def parse_reply(data: dict[str, object], url: str = "the server") -> ChatReply:
    """A chat-completions answer as a ``ChatReply``; an answer of another shape is an EngineError."""
    try:
        choice = json_object(json_list(data["choices"])[0])
        raw = json_object(choice["message"])
    except (KeyError, IndexError, TypeError) as e:
        raise EngineError(f"{url} answered without choices[0].message ({json.dumps(data)[:300]}): is "
                          "engine.base_url an OpenAI-compatible /v1 endpoint?") from e
    calls = tuple(_tool_call(json_object(c)) for c in json_list(raw.get("tool_calls")))
    message = Message.model_validate({"role": "assistant", "content": raw.get("content"), "tool_calls": calls or None})
    usage = json_object(data.get("usage"))
    return ChatReply(message=message, finish_reason=str(choice.get("finish_reason") or "stop"),
                     completion_tokens=_count(usage.get("completion_tokens")),
                     prompt_tokens=_count(usage.get("prompt_tokens")))


def _count(value: object) -> int:
    """A token count of the usage block (absent or null: 0)."""
    return int(value) if isinstance(value, int | float | str) and value else 0


def _tool_call(raw: Mapping[str, object]) -> ToolCall:
    fn = json_object(raw.get("function"))
    args = fn.get("arguments", "{}")
    # Some servers send the arguments as an object rather than a JSON string.
    arguments = args if isinstance(args, str) else json.dumps(args)
    return ToolCall(id=str(raw.get("id") or "call_" + uuid.uuid4().hex[:24]),
                    function=FunctionCall(name=str(fn.get("name", "")), arguments=arguments))
