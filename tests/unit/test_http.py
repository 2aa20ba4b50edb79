"""retrying_post against a real FastAPI server on 127.0.0.1: retries, rejections, limits, headers.

The scripted server here is shared with the tests of arft.http's clients (the endpoint grader):
each POST to ``/<route>`` takes the next ``(status, body, delay_s)`` from ``script.steps[route]``
(the last one repeats; ``script.ok`` for a route without steps) and records what it received.
``/stream/<route>`` answers a 64 kB JSON object as a stream with no content-length.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse

from arft.http import (TRACE_HEADER, Answer, BadAnswer, Exhausted, Rejected, TooLarge,
                       backoff_delay, is_http_url, json_client, json_object, retrying_post,
                       server_message)
from tests.servers import free_port, serve

OK = (200, b'{"value": 7}', 0.0)


@dataclass
class Seen:
    body: dict[str, Any] | None
    headers: dict[str, str]
    port: int
    at: float


@dataclass
class Script:
    ok: tuple[int, bytes, float] = OK
    steps: dict[str, list[tuple[int, bytes, float]]] = field(default_factory=dict)
    seen: dict[str, list[Seen]] = field(default_factory=dict)

    async def record(self, route: str, request: Request) -> int:
        """Note the request; how many ``route`` has had, this one included."""
        raw = await request.body()
        seen = self.seen.setdefault(route, [])
        seen.append(Seen(json.loads(raw) if raw else None, dict(request.headers),
                         request.client.port if request.client else 0, time.monotonic()))
        return len(seen)


def make_app(script: Script) -> FastAPI:
    app = FastAPI()

    @app.post("/stream/{route}")
    async def stream(route: str, request: Request) -> Response:
        await script.record(route, request)

        async def chunks() -> Any:  # no content-length: the size shows only while reading
            yield b'{"value": "'
            for _ in range(16):
                yield b"y" * 4096
            yield b'"}'

        return StreamingResponse(chunks(), media_type="application/json")

    @app.post("/{route}")
    async def play(route: str, request: Request) -> Response:
        n = await script.record(route, request)
        steps = script.steps.get(route, [script.ok])
        status, body, delay = steps[min(n, len(steps)) - 1]
        if delay:
            await asyncio.sleep(delay)
        return Response(content=body, status_code=status, media_type="application/json")

    return app


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    with serve(make_app(script)) as url:
        yield url, script


@pytest.fixture
def route() -> str:
    return uuid.uuid4().hex


def value(answer: dict[str, Any]) -> Any:
    if "value" not in answer:
        raise BadAnswer(f"no 'value' in {sorted(answer)}")
    return answer["value"]


async def post(url: str, **kw: Any) -> Answer[Any]:
    http = json_client(5.0)  # httpx's per-read timeout; retrying_post's timeout_s bounds it all
    args: dict[str, Any] = {"what": "test server", "parse": value, "attempts": 4,
                            "timeout_s": 5.0, "backoff_s": 0.01, **kw}
    try:
        return await retrying_post(http.get(), url, b'{"q": 1}', **args)
    finally:
        await http.aclose()


async def test_5xx_is_retried_then_succeeds(server: tuple[str, Script], route: str) -> None:
    url, script = server
    script.steps[route] = [(503, b"down", 0), (500, b'{"error": {"message": "oops"}}', 0), OK]
    answer = await post(f"{url}/{route}")
    assert answer == Answer(value=7, status=200, attempts=3)
    assert len(script.seen[route]) == 3


async def test_5xx_exhausted_says_what_failed_how_often_and_the_last_reason(
        server: tuple[str, Script], route: str) -> None:
    url, script = server
    script.steps[route] = [(500, b"first", 0), (502, b'{"error": {"message": "bad gateway"}}', 0)]
    with pytest.raises(Exhausted) as err:
        await post(f"{url}/{route}", attempts=3)
    assert str(err.value) == "test server failed 3 time(s); last: HTTP 502: bad gateway"
    assert err.value.reason == "HTTP 502: bad gateway" and err.value.status == 502
    assert err.value.attempts == 3 and len(script.seen[route]) == 3


async def test_backoff_doubles_between_attempts(server: tuple[str, Script], route: str) -> None:
    url, script = server
    script.steps[route] = [(503, b"", 0)]
    start = time.monotonic()
    with pytest.raises(Exhausted):
        await post(f"{url}/{route}", attempts=3, backoff_s=0.1)
    assert time.monotonic() - start >= 0.1 + 0.2 - 1e-3
    assert [backoff_delay(0.5, n) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert backoff_delay(10, 5) == 30.0  # capped


async def test_4xx_is_rejected_at_once_with_the_servers_message(
        server: tuple[str, Script], route: str) -> None:
    url, script = server
    script.steps[route] = [(422, b'{"detail": "missing item.answer"}', 0), OK]
    with pytest.raises(Rejected) as err:
        await post(f"{url}/{route}")
    assert str(err.value) == "test server rejected the request with HTTP 422: missing item.answer"
    assert err.value.status == 422 and err.value.body == b'{"detail": "missing item.answer"}'
    assert len(script.seen[route]) == 1


@pytest.mark.parametrize("status", [408, 429])
async def test_not_now_4xx_is_retried_unless_the_caller_says_otherwise(
        server: tuple[str, Script], route: str, status: int) -> None:
    url, script = server
    script.steps[route] = [(status, b"slow down", 0), OK]
    assert (await post(f"{url}/{route}")).attempts == 2
    script.seen.clear()
    with pytest.raises(Rejected):
        await post(f"{url}/{route}", retry_4xx=frozenset())
    assert len(script.seen[route]) == 1


async def test_connection_refused_is_retried_then_exhausted() -> None:
    with pytest.raises(Exhausted) as err:
        await post(f"http://127.0.0.1:{free_port()}/x", attempts=2)
    assert err.value.attempts == 2 and err.value.status is None
    assert err.value.reason.startswith("connection failed: ConnectError")


async def test_timeout_bounds_the_whole_exchange(server: tuple[str, Script], route: str) -> None:
    url, script = server
    script.steps[route] = [(200, b'{"value": 1}', 1.0)]
    start = time.monotonic()
    with pytest.raises(Exhausted, match="no answer within 0.2s"):
        await post(f"{url}/{route}", attempts=2, timeout_s=0.2)
    assert time.monotonic() - start < 0.9 and len(script.seen[route]) == 2


async def test_trace_id_and_caller_headers_go_with_every_attempt(
        server: tuple[str, Script], route: str) -> None:
    url, script = server
    script.steps[route] = [(503, b"", 0), OK]
    trace_id = "trace_" + uuid.uuid4().hex
    await post(f"{url}/{route}", trace_id=trace_id, headers={"Authorization": "Bearer k"})
    seen = [s.headers for s in script.seen[route]]
    assert len(seen) == 2
    assert all(h[TRACE_HEADER.lower()] == trace_id for h in seen)
    assert all(h["authorization"] == "Bearer k" for h in seen)
    assert all(h["content-type"] == "application/json" for h in seen)
    other = uuid.uuid4().hex
    await post(f"{url}/{other}")
    assert TRACE_HEADER.lower() not in script.seen[other][0].headers  # no trace_id, no header


@pytest.mark.parametrize("body, reason", [
    (b"<html>oops</html>", "answer is not JSON: b'<html>oops</html>'"),
    (b"[1]", "answer is a JSON list, not an object"),
    (b'{"other": 1}', "no 'value' in ['other']"),  # the parser's BadAnswer
])
async def test_unusable_answers_are_retried_and_keep_their_status(
        server: tuple[str, Script], route: str, body: bytes, reason: str) -> None:
    url, script = server
    script.steps[route] = [(201, body, 0)]
    with pytest.raises(Exhausted) as err:
        await post(f"{url}/{route}", attempts=2)
    assert err.value.reason == reason and err.value.status == 201
    assert len(script.seen[route]) == 2


async def test_other_parser_errors_propagate_without_retry(
        server: tuple[str, Script], route: str) -> None:
    url, script = server

    def broken(answer: dict[str, Any]) -> Any:
        raise KeyError("choices")

    with pytest.raises(KeyError):
        await post(f"{url}/{route}", parse=broken)
    assert len(script.seen[route]) == 1


async def test_before_attempt_runs_before_every_attempt(
        server: tuple[str, Script], route: str) -> None:
    url, script = server
    script.steps[route] = [(500, b"", 0), (500, b"", 0), OK]
    calls: list[int] = []

    async def hook() -> None:
        calls.append(len(script.seen.get(route, [])))

    await post(f"{url}/{route}", before_attempt=hook)
    assert calls == [0, 1, 2]


@pytest.mark.parametrize("streamed", [False, True])
async def test_too_large_answers_are_not_retried(server: tuple[str, Script], route: str,
                                                 streamed: bool) -> None:
    url, script = server
    script.steps[route] = [(200, b'{"value": "' + b"y" * 65536 + b'"}', 0)]
    with pytest.raises(TooLarge) as err:
        await post(f"{url}/stream/{route}" if streamed else f"{url}/{route}", max_bytes=1000)
    # A declared content-length is refused up front; a stream is abandoned at the limit.
    assert ("stopped" in err.value.reason) == streamed
    assert str(err.value).startswith("test server: answer ")
    assert len(script.seen[route]) == 1
    assert (await post(f"{url}/stream/{route}")).value == "y" * 65536  # no limit: read it all


def test_json_object_and_server_message() -> None:
    assert json_object(b'{"a": 1}') == {"a": 1}
    with pytest.raises(BadAnswer, match="not JSON"):
        json_object(b"\xff\xfe")
    assert server_message(b'{"error": {"message": "bad key"}}') == "bad key"
    assert server_message(b'{"detail": "missing"}') == "missing"
    assert server_message(b'{"detail": [{"loc": ["q"]}]}') == '[{"loc": ["q"]}]'
    assert server_message(b"") == "(empty body)"
    assert server_message(b"x" * 1000, limit=10) == "x" * 10


@pytest.mark.parametrize("url, ok", [("http://127.0.0.1:8/x", True), ("https://h/v1", True),
                                     ("ftp://h/x", False), ("not a url", False), ("http://", False)])
def test_is_http_url(url: str, ok: bool) -> None:
    assert is_http_url(url) is ok


def test_json_client_sends_json_and_lets_caller_headers_win() -> None:
    async def headers() -> httpx.Headers:
        http = json_client(1.0, {"X-Team": "rl", "content-type": "application/json; charset=x"})
        try:
            return http.get().headers
        finally:
            await http.aclose()

    got = asyncio.run(headers())
    assert got["x-team"] == "rl" and got["content-type"] == "application/json; charset=x"
