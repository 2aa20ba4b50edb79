"""Real ASGI apps on 127.0.0.1 for tests and benchmarks: the library's own mechanism, plus the
fakes several tests share (an app that records what it is sent, the answers of the hosted tool
contract and of an OpenAI-compatible chat server)."""

from __future__ import annotations

import secrets
from typing import Any, Callable

from fastapi import FastAPI, Request

from arft.serving import free_port, serve

__all__ = ["chat_completion", "chat_model_app", "free_port", "recording_app", "serve", "tool_output"]


def recording_app(route: str, bodies: list[dict[str, Any]],
                  answer: Callable[[dict[str, Any]], Any]) -> FastAPI:
    """An app whose one POST ``route`` appends each request's JSON body to ``bodies`` and
    returns ``answer(body)`` (JSON data, or a ``Response`` such as a 503)."""
    app = FastAPI()

    @app.post(route)
    async def handle(req: Request) -> Any:
        body = await req.json()
        bodies.append(body)
        return answer(body)

    return app


def tool_output(body: dict[str, Any], output: str) -> dict[str, Any]:
    """A hosted-contract tool endpoint's answer to the call ``body``."""
    return {"type": "function_call_output", "call_id": body["call_id"], "id": body["id"],
            "output": output}


def chat_completion(body: dict[str, Any], message: dict[str, Any], finish_reason: str = "stop",
                    completion_tokens: int = 1) -> dict[str, Any]:
    """An OpenAI-compatible ``/chat/completions`` answer to the request ``body``: one choice."""
    return {"id": "x", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": completion_tokens,
                      "total_tokens": 10 + completion_tokens}}


Reply = str | tuple[str, str]
"""A fake model's answer: the assistant's text, or ``(tool name, arguments JSON)`` for one call."""


def chat_model_app(reply: Callable[[list[dict[str, Any]]], Reply]) -> FastAPI:
    """A fake OpenAI-compatible model at ``/v1/chat/completions``: ``reply(messages)`` decides
    each answer (a text, or one tool call with a fresh call id)."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(req: Request) -> dict[str, Any]:
        body = await req.json()
        out = reply(body["messages"])
        if isinstance(out, str):
            return chat_completion(body, {"role": "assistant", "content": out})
        call = {"id": f"call_{secrets.token_hex(4)}", "type": "function",
                "function": {"name": out[0], "arguments": out[1]}}
        return chat_completion(body, {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")

    return app
