"""The HTTP face of ``arft serve``: an OpenAI-compatible API (FastAPI) over ``ServedModel``s.

* ``GET /v1/models``, ``GET /v1/models/{id}``: the served names (the tuned agent beside its base);
* ``POST /v1/chat/completions``: ``arft.app.serve.chat`` (``stream: true`` answers with
  server-sent events, ``data: {chunk}`` lines ending with ``data: [DONE]``);
* ``POST /v1/responses``: the Responses API, translated onto chat completions
  (``arft.app.serve.responses``);
* ``GET /health``.

Errors have the OpenAI shape ``{"error": {"message", "type", "param", "code"}}``: 400 for a
request arft cannot serve (naming the field), 401 without the bearer key when one is set, 404
for a model name that is not served and for an unknown route, 405 for a route asked with the
wrong method (both listing the routes), 500 when generation failed. A failure in the middle of
a stream ends it with one ``data: {"error": ...}`` event.

A request is checked and tokenized off the event loop (``prepared``: a long prompt does not hold
up the others), and a non-streamed generation is cancelled when its client disconnects
(``unless_disconnected``; a stream stops when its client goes). Every request is logged
(``arft.app.serve.access``).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
import hmac
import json
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Sequence, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from arft.app.serve.access import AccessLog
from arft.app.serve.fingerprint import policy_headers, stamp_of
from arft.app.serve.chat import (ChatRequest, ChatRequestError, Prepared, ServedModel, complete, prepare,
                                 stream_chunks)
from arft.engines.base import EngineError

T = TypeVar("T")


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

    app.add_middleware(AccessLog)  # added last: outermost, it logs the 401s too
    openai_errors(app)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [_card(m) for m in models]}

    @app.get("/v1/models/{name:path}")
    async def one_model(name: str) -> Any:
        model = by_name.get(name)
        return _card(model) if model else unknown_model(name, by_name)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await _chat(request, by_name)

    # Imported here: the Responses translation builds on this module's `error`.
    from arft.app.serve.responses import respond

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        return await respond(request, by_name)

    return app


B = TypeVar("B", bound=BaseModel)


async def read_body(request: Request, kind: type[B], what: str) -> B | JSONResponse:
    """The request body as ``kind``, or the OpenAI-shaped 400 naming the first bad field
    (``what``: the API, for the message: "a chat-completions", "a Responses")."""
    try:
        return kind.model_validate(await request.json())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, f"the request body is not JSON: send {what} request body")
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return error(400, f"{where}: {first['msg']}", where or None)


Preparer = Callable[[Request, ServedModel, ChatRequest], Awaitable[Prepared]]
"""How a checked request becomes what the engine runs: ``prepared`` here; the gateway's also
takes a rollout's captured ids (``arft.app.gateway``)."""


async def _chat(request: Request, by_name: Mapping[str, ServedModel], prepare: Preparer | None = None) -> Any:
    """``POST /v1/chat/completions``: a completion, a stream, or an OpenAI-shaped error
    (``prepare``: default ``prepared``)."""
    req = await read_body(request, ChatRequest, "a chat-completions")
    if isinstance(req, JSONResponse):
        return req
    model = by_name.get(req.model)
    if model is None:
        return unknown_model(req.model, by_name)
    try:
        prep = await (prepare or prepared)(request, model, req)
        if not req.stream:
            answer = await unless_disconnected(request, complete(model, req, prep))
            if answer is None:
                return error(499, "the client disconnected", kind="client_closed")
            return JSONResponse(answer, headers=policy_headers(stamp_of(model.engine)))
    except ChatRequestError as e:
        return error(e.status, str(e), e.param, e.code)
    except EngineError as e:
        return error(500, f"generation failed: {e}", kind="server_error")
    return StreamingResponse(_sse(stream_chunks(model, req, prep)), media_type="text/event-stream",
                             headers=policy_headers(stamp_of(model.engine)))


async def prepared(request: Request, model: ServedModel, req: ChatRequest,
                   executor: Executor | None = None) -> Prepared:
    """``prepare(model, req)`` in a worker thread of ``executor`` (default: the loop's; a huge
    prompt is tokenized there, so the event loop keeps answering), kept on ``request.state`` for
    the access log."""
    prep = await asyncio.get_running_loop().run_in_executor(executor, prepare, model, req)
    request.state.prep = prep
    return prep


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """``work``'s result, or None when the client disconnected first: then ``work`` is cancelled
    (an engine drops a cancelled request's rows), so nothing keeps computing for nobody."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        return task.result() if task.done() else None
    finally:
        task.cancel()  # a no-op once done; else the client left (or this handler was cancelled)
        watcher.cancel()


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (its body was read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def openai_errors(app: FastAPI) -> None:
    """Answer unknown routes (404), wrong methods (405) and bad path parameters in the OpenAI
    error shape, naming the routes there are."""

    def routes() -> str:
        return ", ".join(f"{'/'.join(sorted(r.methods or ()))} {r.path}" for r in app.routes if isinstance(r, APIRoute))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        asked = f"{request.method} {request.url.path}"
        if e.status_code == 404:
            message = f"no route {asked}; arft serve answers: {routes()}"
        elif e.status_code == 405:
            message = f"{asked}: the method is not allowed on this route; arft serve answers: {routes()}"
        else:
            message = str(e.detail)
        answer = error(e.status_code, message, code={404: "not_found", 405: "method_not_allowed"}.get(e.status_code))
        answer.headers.update(e.headers or {})
        return answer

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        return error(400, f"{where}: {first['msg']}", where or None)


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


def unknown_model(name: str, by_name: Mapping[str, ServedModel]) -> JSONResponse:
    return error(404, f"the model {name!r} is not served here; served: {sorted(by_name)}", "model",
                 "model_not_found")
