"""EndpointTool against a real FastAPI server on 127.0.0.1: contract, retries, limits."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import defaultdict
from typing import Any, Iterator

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from arft.config import EndpointToolSpec
from arft.tools.base import Tool, ToolContext
from arft.tools.endpoint import EndpointTool
from tests.servers import free_port, serve

SECRET = "tok_" + uuid.uuid4().hex  # only the server knows it: seeing it proves the call ran


class Seen:
    """Requests the server received, by key (each test uses its own key)."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.headers: dict[str, list[dict[str, str]]] = defaultdict(list)
        self.ports: dict[str, list[int]] = defaultdict(list)


def make_app(seen: Seen) -> FastAPI:
    app = FastAPI()

    async def record(key: str, request: Request) -> dict[str, Any]:
        body = await request.json()
        seen.bodies[key].append(body)
        seen.headers[key].append(dict(request.headers))
        seen.ports[key].append(request.client.port if request.client else -1)
        return body

    def answer(body: dict[str, Any], output: Any) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": body["call_id"], "id": body["id"],
                "output": output}

    @app.post("/ok/{key}")
    async def ok(key: str, request: Request) -> Any:
        body = await record(key, request)
        args = json.loads(body["arguments"])
        return answer(body, f"{SECRET}:{args.get('q', '')}")

    @app.post("/json_output/{key}")
    async def json_output(key: str, request: Request) -> Any:
        return answer(await record(key, request), {"rows": [1, 2], "secret": SECRET})

    @app.post("/status/{code}/{key}")
    async def status(code: int, key: str, request: Request) -> Any:
        await record(key, request)
        return PlainTextResponse(f"no such city {SECRET} " + "x" * 2000, status_code=code)

    @app.post("/flaky/{fails}/{key}")
    async def flaky(fails: int, key: str, request: Request) -> Any:
        body = await record(key, request)
        if len(seen.bodies[key]) <= fails:
            return PlainTextResponse("upstream broke", status_code=503)
        return answer(body, SECRET)

    @app.post("/slow/{key}")
    async def slow(key: str, request: Request) -> Any:
        body = await record(key, request)
        await asyncio.sleep(1.0)
        return answer(body, SECRET)

    @app.post("/garbage/{kind}/{key}")
    async def garbage(kind: str, key: str, request: Request) -> Any:
        body = await record(key, request)
        if kind == "html":
            return Response("<html><body>Bad Gateway</body></html>", media_type="text/html")
        if kind == "list":
            return JSONResponse([1, 2, 3])
        if kind == "no_output":
            return {"type": "function_call_output", "call_id": body["call_id"]}
        return answer({**body, "call_id": "call_someone_else"}, SECRET)  # wrong call_id

    @app.post("/huge/{key}")
    async def huge(key: str, request: Request) -> Any:
        return answer(await record(key, request), "y" * (1 << 20) + SECRET)

    @app.post("/huge_stream/{key}")
    async def huge_stream(key: str, request: Request) -> Any:
        # No content-length: the client must notice the size while reading the stream.
        body = await record(key, request)
        head = json.dumps({"type": "function_call_output", "call_id": body["call_id"]})[:-1]

        async def chunks() -> Any:
            yield (head + ', "output": "').encode()
            for _ in range(64):  # 4 MB in 64 kB chunks
                yield b"y" * 65536
            yield (SECRET + '"}').encode()

        return StreamingResponse(chunks(), media_type="application/json")

    return app


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Seen]]:
    seen = Seen()
    with serve(make_app(seen)) as url:
        yield url, seen


@pytest.fixture
def key() -> str:
    return uuid.uuid4().hex


def ctx(**item: Any) -> ToolContext:
    return ToolContext(trace_id="trace_" + uuid.uuid4().hex, call_id="call_" + uuid.uuid4().hex,
                       item=item)


def tool(url: str, **kw: Any) -> EndpointTool:
    spec = EndpointToolSpec(name=kw.pop("name", "lookup"), server_url=url, **kw)
    return EndpointTool(spec, backoff_s=0.01)


async def test_contract_body_headers_and_pass_through(server: tuple[str, Seen], key: str) -> None:
    url, seen = server
    t = tool(f"{url}/ok/{key}", headers={"Authorization": "Bearer s3cret", "X-Team": "rl"})
    c = ctx(answer="Paris", n=3)
    args = '{"q": "capital of France"}'
    out = await t.call(args, c)
    await t.aclose()
    assert isinstance(t, Tool)
    assert out.status == "ok" and out.error is None and out.http_status == 200
    assert out.output == f"{SECRET}:capital of France"
    [body] = seen.bodies[key]
    assert set(body) == {"type", "id", "call_id", "name", "arguments", "trace_id", "item"}
    assert body["type"] == "function_call" and body["name"] == "lookup"
    assert body["id"].startswith("fc_") and len(body["id"]) == 3 + 32
    assert isinstance(body["arguments"], str) and body["arguments"] == args  # as given, unparsed
    assert body["call_id"] == c.call_id and body["trace_id"] == c.trace_id
    assert body["item"] == {"answer": "Paris", "n": 3}
    headers = seen.headers[key][0]
    assert headers["authorization"] == "Bearer s3cret" and headers["x-team"] == "rl"
    assert headers["content-type"] == "application/json"


async def test_each_call_has_a_fresh_id_and_reuses_the_connection(
        server: tuple[str, Seen], key: str) -> None:
    url, seen = server
    t = tool(f"{url}/ok/{key}")
    for _ in range(3):
        assert (await t.call("{}", ctx())).status == "ok"
    await t.aclose()
    await t.aclose()  # closing twice is harmless
    ids = [b["id"] for b in seen.bodies[key]]
    assert len(set(ids)) == 3
    assert len(set(seen.ports[key])) == 1  # one keep-alive connection served all three calls


async def test_non_string_output_is_json_encoded(server: tuple[str, Seen], key: str) -> None:
    url, _ = server
    t = tool(f"{url}/json_output/{key}")
    out = await t.call("{}", ctx())
    await t.aclose()
    assert out.status == "ok"
    assert json.loads(out.output) == {"rows": [1, 2], "secret": SECRET}


async def test_4xx_is_shown_to_the_model_without_retry(server: tuple[str, Seen], key: str) -> None:
    url, seen = server
    t = tool(f"{url}/status/404/{key}", name="weather")
    out = await t.call('{"city": "Atlantis"}', ctx())
    await t.aclose()
    assert out.status == "tool_error" and out.http_status == 404 and out.error == "HTTP 404"
    assert out.output.startswith(f"Error: HTTP 404 from tool 'weather': no such city {SECRET}")
    assert len(out.output) < 700  # the 2 kB body is truncated
    assert len(seen.bodies[key]) == 1


async def test_5xx_is_retried_until_it_succeeds(server: tuple[str, Seen], key: str) -> None:
    url, seen = server
    t = tool(f"{url}/flaky/2/{key}", max_retries=3)
    out = await t.call("{}", ctx())
    await t.aclose()
    assert out.status == "ok" and out.output == SECRET
    assert len(seen.bodies[key]) == 3
    assert len({b["call_id"] for b in seen.bodies[key]}) == 1  # the same call, retried


async def test_5xx_forever_is_an_infra_error(server: tuple[str, Seen], key: str) -> None:
    url, seen = server
    t = tool(f"{url}/status/502/{key}", max_retries=3)
    out = await t.call("{}", ctx())
    await t.aclose()
    assert out.status == "infra_error" and out.http_status == 502
    assert "HTTP 502" in (out.error or "") and "4 time(s)" in (out.error or "")
    assert len(seen.bodies[key]) == 4


async def test_timeout_is_retried_then_infra_error(server: tuple[str, Seen], key: str) -> None:
    url, seen = server
    t = tool(f"{url}/slow/{key}", timeout_s=0.2, max_retries=1)
    out = await t.call("{}", ctx())
    await t.aclose()
    assert out.status == "infra_error"
    assert "no answer within 0.2s" in (out.error or "")
    assert len(seen.bodies[key]) == 2


async def test_connection_refused_is_an_infra_error() -> None:
    t = tool(f"http://127.0.0.1:{free_port()}/nobody", max_retries=1)
    out = await t.call("{}", ctx())
    await t.aclose()
    assert out.status == "infra_error" and "connection failed" in (out.error or "")


@pytest.mark.parametrize("kind,reason", [("html", "not JSON"), ("list", "not an object"),
                                         ("no_output", "no 'output'"),
                                         ("wrong_call_id", "call_someone_else")])
async def test_garbage_answers_are_retried_then_infra_error(
        server: tuple[str, Seen], key: str, kind: str, reason: str) -> None:
    url, seen = server
    t = tool(f"{url}/garbage/{kind}/{key}", max_retries=2)
    out = await t.call("{}", ctx())
    await t.aclose()
    assert out.status == "infra_error" and reason in (out.error or "")
    assert len(seen.bodies[key]) == 3


@pytest.mark.parametrize("route", ["huge", "huge_stream"])
async def test_oversized_answer_is_a_tool_error(server: tuple[str, Seen], key: str,
                                                route: str) -> None:
    url, seen = server
    t = tool(f"{url}/{route}/{key}")
    out = await t.call("{}", ctx())
    await t.aclose()
    assert out.status == "tool_error" and out.output.startswith("Error: tool output exceeds 1 MB")
    assert SECRET not in out.output
    # A declared content-length is refused up front; a stream is abandoned at the limit.
    assert ("stopped" in (out.error or "")) == (route == "huge_stream")
    assert len(seen.bodies[key]) == 1  # not retried: it would only be fetched again


async def test_oversized_arguments_are_not_sent(server: tuple[str, Seen], key: str) -> None:
    url, seen = server
    t = tool(f"{url}/ok/{key}")
    out = await t.call(json.dumps({"q": "z" * (1 << 20)}), ctx())
    await t.aclose()
    assert out.status == "tool_error" and "arguments too large" in out.output
    assert seen.bodies[key] == []


def test_schema_and_bad_url() -> None:
    params = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    t = tool("http://127.0.0.1:9/x", description="Search the docs.", parameters=params)
    assert t.name == "lookup"
    assert t.schema == {"type": "function", "function": {
        "name": "lookup", "description": "Search the docs.", "parameters": params}}
    bare = tool("http://127.0.0.1:9/x").schema["function"]
    assert bare["description"] == "" and bare["parameters"] == {"type": "object", "properties": {}}
    with pytest.raises(ValueError, match="not an http"):
        tool("ftp://example.com/x")
