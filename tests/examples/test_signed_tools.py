"""The signed_tools example against its real server on 127.0.0.1: signed requests are accepted;
unsigned, tampered, wrong-secret, stale and replayed ones are all refused with 401; arft's
endpoint tool and endpoint grader sign every request (retries included) so that it passes."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from arft.config import EndpointToolSpec, load_job
from arft.config.graders import EndpointSpec
from arft.graders.endpoint import EndpointGrader
from arft.pyfile import load_file
from arft.secrets import SecretError
from arft.signing import SIGNATURE_HEADER, ReplayCache, SignatureError, sign, verify_request
from arft.tools.base import ToolContext
from arft.tools.endpoint import EndpointTool
from tests.servers import serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "signed_tools"
SECRET = secrets.token_hex(32)
TOKEN = secrets.token_hex(16)
N = 20
"""Requests of each kind sent to the server."""


def server() -> ModuleType:
    return load_file(EXAMPLE / "server.py", "signed_tools_server")


@pytest.fixture
def url() -> Iterator[str]:
    with serve(server().create_app(SECRET, TOKEN)) as base:
        yield base


def call_body(name: str = "ada") -> bytes:
    return json.dumps({"type": "function_call", "id": "fc_" + secrets.token_hex(8),
                       "call_id": "call_" + secrets.token_hex(4), "name": "lookup",
                       "arguments": json.dumps({"name": name}), "trace_id": "trace_x",
                       "item": {}}).encode()


def post(base: str, body: bytes, signature: str | None, token: str = TOKEN) -> httpx.Response:
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    if signature is not None:
        headers[SIGNATURE_HEADER] = signature
    return httpx.post(f"{base}/lookup", content=body, headers=headers, timeout=10)


def test_signed_requests_are_accepted_and_every_bad_one_is_refused(url: str) -> None:
    """N of each kind; the figure: every signed request accepted, every bad one refused (401)."""
    statuses: dict[str, list[int]] = {k: [] for k in (
        "signed", "unsigned", "tampered", "wrong_secret", "stale", "future", "replayed",
        "wrong_token")}
    for _ in range(N):
        body = call_body()
        signature = sign(body, SECRET)
        accepted = post(url, body, signature)
        statuses["signed"].append(accepted.status_code)
        assert accepted.json()["output"] == "A-7731"
        statuses["replayed"].append(post(url, body, signature).status_code)
        statuses["unsigned"].append(post(url, call_body(), None).status_code)
        statuses["tampered"].append(post(url, body.replace(b"ada", b"bob"), sign(body, SECRET))
                                    .status_code)
        fresh = call_body()
        statuses["wrong_secret"].append(post(url, fresh, sign(fresh, "not-the-secret")).status_code)
        statuses["stale"].append(post(url, fresh, sign(fresh, SECRET, int(time.time()) - 301))
                                 .status_code)
        statuses["future"].append(post(url, fresh, sign(fresh, SECRET, int(time.time()) + 400))
                                  .status_code)
        other = call_body()
        statuses["wrong_token"].append(post(url, other, sign(other, SECRET), "nope").status_code)
    assert statuses.pop("signed") == [200] * N
    rejected = {kind: codes.count(401) for kind, codes in statuses.items()}
    assert rejected == {kind: N for kind in statuses}, rejected  # 100 % of each kind refused


def test_the_reason_of_a_refusal_is_in_the_answer(url: str) -> None:
    assert "unsigned request" in post(url, call_body(), None).json()["detail"]
    body = call_body()
    assert "bad signature" in post(url, body + b" ", sign(body, SECRET)).json()["detail"]


def ctx() -> ToolContext:
    return ToolContext(trace_id="trace_" + secrets.token_hex(16), call_id="call_1", item={})


async def test_the_endpoint_tool_signs_every_call(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOL_SIGNING_SECRET", SECRET)
    monkeypatch.setenv("TOOL_TOKEN", TOKEN)
    spec = EndpointToolSpec(name="lookup", server_url=f"{url}/lookup",
                            headers={"Authorization": "Bearer ${TOOL_TOKEN}"},
                            signing_secret="${TOOL_SIGNING_SECRET}")
    tool = EndpointTool(spec)
    unsigned = EndpointTool(spec.model_copy(update={"signing_secret": None}))
    try:
        outcomes = [await tool.call(json.dumps({"name": n}), ctx()) for n in ("ada", "grace") * 5]
        refused = await unsigned.call(json.dumps({"name": "ada"}), ctx())
    finally:
        await tool.aclose()
        await unsigned.aclose()
    assert [o.status for o in outcomes] == ["ok"] * 10
    assert [o.output for o in outcomes[:2]] == ["A-7731", "G-1906"]
    assert refused.status == "tool_error" and refused.http_status == 401
    assert "unsigned request" in refused.output


async def test_the_endpoint_grader_signs_every_request(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOL_SIGNING_SECRET", SECRET)
    grader = EndpointGrader(EndpointSpec(type="endpoint", url=f"{url}/grade",
                                         headers={"Authorization": f"Bearer {TOKEN}"},
                                         signing_secret="${TOOL_SIGNING_SECRET}"))
    try:
        scores = [await grader.grade({"output_text": f"code A-7731 ({i})", "trajectory": {}},
                                     {"answer": "A-7731"}) for i in range(5)]
    finally:
        await grader.aclose()
    assert [(s.score, s.error) for s in scores] == [(1.0, None)] * 5


def test_a_missing_signing_secret_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_SECRET", raising=False)
    with pytest.raises(SecretError, match=r"endpoint tool 'lookup': signing_secret references "
                                          r"\$\{NO_SUCH_SECRET\}"):
        EndpointTool(EndpointToolSpec(name="lookup", server_url="http://127.0.0.1:1/x",
                                      signing_secret="${NO_SUCH_SECRET}"))


async def test_a_retry_is_signed_anew_and_passes_a_replay_cache() -> None:
    """The first attempt is accepted by the signature check, then answered 503; the retry must
    not look like a replay to the server's cache."""
    seen, statuses = ReplayCache(), []
    app = FastAPI()

    @app.post("/flaky")
    async def flaky(request: Request) -> Any:
        try:
            verify_request(await request.body(), request.headers.get(SIGNATURE_HEADER), SECRET,
                           replay_cache=seen)
        except SignatureError as e:
            statuses.append(401)
            return JSONResponse({"detail": str(e)}, status_code=401)
        statuses.append(503 if len(statuses) < 2 else 200)
        if statuses[-1] == 503:
            return JSONResponse({"detail": "busy"}, status_code=503)
        body = json.loads(await request.body())
        return {"type": "function_call_output", "call_id": body["call_id"], "output": "ok"}

    with serve(app) as base:
        tool = EndpointTool(EndpointToolSpec(name="flaky", server_url=f"{base}/flaky",
                                             signing_secret=SECRET), backoff_s=0.01)
        try:
            outcome = await tool.call("{}", ctx())
        finally:
            await tool.aclose()
    assert outcome.status == "ok", outcome.output
    assert statuses == [503, 503, 200]


def test_the_job_holds_references_only(monkeypatch: pytest.MonkeyPatch) -> None:
    job = load_job(EXAMPLE / "job.yaml")
    tool = job.rl.tools[0]
    assert tool.headers == {"Authorization": "Bearer ${TOOL_TOKEN}"}
    assert tool.signing_secret == "${TOOL_SIGNING_SECRET}"
    assert job.rl.grader_dict["signing_secret"] == "${TOOL_SIGNING_SECRET}"
    assert server().DEFAULT_PORT == 8766 and ":8766/" in tool.server_url


def test_services_serve_the_example_with_the_secrets_arft_resolves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.servers import free_port

    monkeypatch.setenv("TOOL_SIGNING_SECRET", SECRET)
    monkeypatch.setenv("TOOL_TOKEN", TOKEN)
    services = load_file(EXAMPLE / "services.py", "signed_tools_services")
    with services.serve(free_port()) as base:
        assert httpx.get(f"{base}/health", timeout=10).json() == {"service": "signed_tools"}
        body = call_body("donald")
        assert post(base, body, sign(body, SECRET)).json()["output"] == "K-1938"
        assert post(base, body, None).status_code == 401
