"""The HTTP face of ``arft serve``: an OpenAI-compatible API (FastAPI) over ``ServedModel``s.

* ``GET /v1/models``, ``GET /v1/models/{id}``: the served names (the tuned agent beside its base);
* ``POST /v1/chat/completions``: ``arft.app.serve.chat`` (``stream: true`` answers with
  server-sent events, ``data: {chunk}`` lines ending with ``data: [DONE]``);
* ``GET /health``.

Errors have the OpenAI shape ``{"error": {"message", "type", "param", "code"}}``: 400 for a
request arft cannot serve (naming the field), 401 without the bearer key when one is set, 404
for a model name that is not served, 500 when generation failed. A failure in the middle of a
stream ends it with one ``data: {"error": ...}`` event.
"""

from __future__ import annotations

import hmac
import json
from typing import Any, AsyncIterator, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from arft.app.serve.chat import ChatRequest, ChatRequestError, ServedModel, complete, prepare, stream_chunks
from arft.engines.base import EngineError


def error(status: int, message: str, param: str | None = None, code: str | None = None,
          kind: str = "invalid_request_error") -> JSONResponse:
    """An error answer in the OpenAI shape."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                        status_code=status)


def build_app(models: Sequence[ServedModel], api_key: str | None = None) -> FastAPI:
    """The API over ``models`` (names must be unique); with ``api_key`` every ``/v1`` request
    must carry ``Authorization: Bearer <api_key>``."""
    by_name = {m.name: m for m in models}
    if len(by_name) != len(models):
        raise ValueError(f"two served models share a name: {[m.name for m in models]}")
    app = FastAPI(title="arft serve", docs_url=None, redoc_url=None)

    @app.middleware("http")
    async def bearer(request: Request, call_next: Any) -> Any:
        if api_key is not None and request.url.path.startswith("/v1"):
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return error(401, "missing or wrong API key: send Authorization: Bearer <key> "
                             "(the key arft serve was started with)", code="invalid_api_key")
        return await call_next(request)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [_card(m) for m in models]}

    @app.get("/v1/models/{name:path}")
    async def one_model(name: str) -> Any:
        model = by_name.get(name)
        return _card(model) if model else _unknown(name, by_name)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await _chat(request, by_name)

    return app


async def _chat(request: Request, by_name: dict[str, ServedModel]) -> Any:
    """``POST /v1/chat/completions``: a completion, a stream, or an OpenAI-shaped error."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "the request body is not JSON: send a chat-completions request body")
    try:
        req = ChatRequest.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return error(400, f"{where}: {first['msg']}", where or None)
    model = by_name.get(req.model)
    if model is None:
        return _unknown(req.model, by_name)
    try:
        if not req.stream:
            return await complete(model, req)
        prep = prepare(model, req)
    except ChatRequestError as e:
        return error(e.status, str(e), e.param, e.code)
    except EngineError as e:
        return error(500, f"generation failed: {e}", kind="server_error")
    return StreamingResponse(_sse(stream_chunks(model, req, prep)), media_type="text/event-stream")


async def _sse(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[str]:
    try:
        async for chunk in chunks:
            yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
    except EngineError as e:
        yield "data: " + json.dumps({"error": {"message": f"generation failed: {e}", "type": "server_error",
                                               "param": None, "code": None}}) + "\n\n"
    yield "data: [DONE]\n\n"


def _card(model: ServedModel) -> dict[str, Any]:
    return {"id": model.name, "object": "model", "created": model.created, "owned_by": "arft"}


def _unknown(name: str, by_name: dict[str, ServedModel]) -> JSONResponse:
    return error(404, f"the model {name!r} is not served here; served: {sorted(by_name)}", "model",
                 "model_not_found")
