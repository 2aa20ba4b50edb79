"""A chat engine over any OpenAI-compatible ``/chat/completions`` server (evaluation only).

It sends chat messages and tool schemas and gets one assistant message back: no token ids, so
rollouts made with it cannot train (see ``arft.engines.base.ChatEngine``). Transient failures
(5xx, 429, timeouts, dropped connections, unreadable answers) are retried with exponential
backoff; any other 4xx is the caller's mistake and fails at once with the server's message.

The API key is read from the environment variable *named* in the job's ``engine.api_key_env``
(the user's contract): the key itself never appears in a job file.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import TYPE_CHECKING, Any, Sequence

import httpx

from arft.engines.base import ChatReply, EngineError, SamplingParams
from arft.http import RETRYABLE_4XX, LoopClient, backoff_delay
from arft.records import FunctionCall, Message, ToolCall

if TYPE_CHECKING:
    from arft.config import EngineSpec

_TOOL_CHOICE_WORDS = frozenset({"auto", "required", "none"})


class _Retryable(Exception):
    """A failure worth another try; the message says what happened."""


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
        self._client = LoopClient(timeout=timeout_s)

    @classmethod
    def from_spec(cls, model_name: str, spec: "EngineSpec") -> "OpenAIEngine":
        """Build from the job's ``engine`` section (``served_model`` defaults to ``model_name``)."""
        base_url = spec.base_url or os.environ.get("OPENAI_BASE_URL")
        if not base_url:
            raise ValueError("the openai engine needs a server: set engine.base_url in the job "
                             "(e.g. http://127.0.0.1:8000/v1) or the OPENAI_BASE_URL environment "
                             "variable")
        return cls(base_url, spec.served_model or model_name, api_key=os.environ.get(spec.api_key_env),
                   timeout_s=spec.timeout_s)

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    async def chat(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]],
                   tool_choice: str | dict[str, Any] | None, params: SamplingParams) -> ChatReply:
        """One assistant message for ``messages`` (with ``tool_calls`` when the model calls tools)."""
        body = self.request_body(messages, tools, tool_choice, params)
        last = "no attempt made"
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(backoff_delay(self.backoff_s, attempt))
            try:
                return parse_reply(await self._post(body), self.url)
            except _Retryable as e:
                last = str(e)
        raise EngineError(f"{self.url} failed {self.max_retries + 1} times (last: {last}); check "
                          "that the server is up and not overloaded, or raise engine.timeout_s")

    def request_body(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]],
                     tool_choice: str | dict[str, Any] | None, params: SamplingParams) -> dict[str, Any]:
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
        return body

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """The decoded JSON answer; raises ``_Retryable`` or ``EngineError``."""
        try:
            response = await self._client.get().post(self.url, json=body, headers=self._headers)
        except httpx.TimeoutException as e:
            raise _Retryable(f"timed out after {self.timeout_s} s ({type(e).__name__})") from e
        except httpx.TransportError as e:
            raise _Retryable(f"connection failed ({type(e).__name__}: {e})") from e
        if response.status_code >= 500 or response.status_code in RETRYABLE_4XX:
            raise _Retryable(f"HTTP {response.status_code}: {_server_message(response)}")
        if response.status_code >= 400:
            raise EngineError(f"{self.url} rejected the request with HTTP {response.status_code}: "
                              f"{_server_message(response)} (check engine.served_model "
                              f"'{self.model}', the API key variable and the sampling settings)")
        try:
            data = response.json()
        except ValueError as e:
            raise _Retryable(f"the answer is not JSON: {response.text[:200]!r}") from e
        if not isinstance(data, dict):
            raise _Retryable(f"the answer is not a JSON object: {response.text[:200]!r}")
        return data

    async def aclose(self) -> None:
        await self._client.aclose()


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    """A bare tool name becomes the chat-completions object that forces that tool."""
    if isinstance(choice, str) and choice not in _TOOL_CHOICE_WORDS:
        return {"type": "function", "function": {"name": choice}}
    return choice


def _server_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:500] or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data))
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])[:500]
        return json.dumps(err)[:500]
    return json.dumps(data)[:500]


def parse_reply(data: dict[str, Any], url: str = "the server") -> ChatReply:
    """A chat-completions answer as a ``ChatReply``; an answer of another shape is an EngineError."""
    try:
        choice = data["choices"][0]
        raw = choice["message"]
    except (KeyError, IndexError, TypeError) as e:
        raise EngineError(f"{url} answered without choices[0].message ({json.dumps(data)[:300]}): is "
                          "engine.base_url an OpenAI-compatible /v1 endpoint?") from e
    calls = tuple(_tool_call(c) for c in raw.get("tool_calls") or ())
    message = Message(role="assistant", content=raw.get("content"), tool_calls=calls or None)
    usage = data.get("usage") or {}
    return ChatReply(message=message, finish_reason=str(choice.get("finish_reason") or "stop"),
                     completion_tokens=int(usage.get("completion_tokens") or 0),
                     prompt_tokens=int(usage.get("prompt_tokens") or 0))


def _tool_call(raw: dict[str, Any]) -> ToolCall:
    fn = raw.get("function") or {}
    args = fn.get("arguments", "{}")
    # Some servers send the arguments as an object rather than a JSON string.
    arguments = args if isinstance(args, str) else json.dumps(args)
    return ToolCall(id=str(raw.get("id") or "call_" + uuid.uuid4().hex[:24]),
                    function=FunctionCall(name=str(fn.get("name", "")), arguments=arguments))
