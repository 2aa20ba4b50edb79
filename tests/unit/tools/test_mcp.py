"""MCP servers as tools, against a real stdio server (tests/fixtures/mcp_server.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from arft.config import McpToolSpec
from arft.tools.base import Tool, ToolContext
from arft.tools.mcp import McpServerError, open_mcp_server

SERVER = Path(__file__).resolve().parents[2] / "fixtures" / "mcp_server.py"
CTX = ToolContext(trace_id="trace_" + uuid.uuid4().hex, call_id="call_1")


def spec(**kw: object) -> McpToolSpec:
    return McpToolSpec.model_validate({"type": "mcp", "command": [sys.executable, str(SERVER)], **kw})


async def test_lists_calls_and_reports_errors() -> None:
    token = "tok-" + uuid.uuid4().hex
    server = await open_mcp_server(spec(env={"ARFT_TEST_TOKEN": token}))
    try:
        tools = {t.name: t for t in server.tools}
        assert set(tools) == {"add", "stamp", "fail", "whoami"}
        assert all(isinstance(t, Tool) for t in tools.values())
        add = tools["add"].schema["function"]
        assert add["description"] == "Add two integers."
        assert add["parameters"]["required"] == ["a", "b"]
        assert add["parameters"]["properties"]["a"]["type"] == "integer"
        assert (await tools["add"].call('{"a": 2, "b": 40}', CTX)).output == "42"
        # The token only exists in the server's environment: the call really reached it.
        stamped = await tools["stamp"].call('{"text": "hi"}', CTX)
        assert stamped.status == "ok" and stamped.output == f"hi {token}"
        # The rollout's trace_id reaches the server in the request's _meta.
        assert (await tools["whoami"].call("{}", CTX)).output == CTX.trace_id
        failed = await tools["fail"].call('{"reason": "boom"}', CTX)
        assert failed.status == "tool_error" and "failed on purpose: boom" in failed.output
        bad = await tools["add"].call('{"a": "x"}', CTX)
        assert bad.status == "tool_error" and "b" in bad.output
        not_object = await tools["add"].call("[1, 2]", CTX)
        assert not_object.status == "tool_error" and "JSON object" in not_object.output
    finally:
        await server.aclose()
    after = await server.tools[0].call('{"a": 1, "b": 2}', CTX)
    assert after.status == "infra_error"
    await server.aclose()  # idempotent


async def test_prefix_and_include() -> None:
    server = await open_mcp_server(spec(name_prefix="calc.", include=["add"]))
    try:
        assert [t.name for t in server.tools] == ["calc_add"]  # '.' is not valid in a name
        assert (await server.tools[0].call('{"a": 1, "b": 2}', CTX)).output == "3"
    finally:
        await server.aclose()


async def test_concurrent_calls_from_many_tasks() -> None:
    server = await open_mcp_server(spec(include=["add"]))
    try:
        add = server.tools[0]
        results = await asyncio.gather(
            *[asyncio.create_task(add.call(f'{{"a": {i}, "b": 1000}}', CTX)) for i in range(12)])
        assert [r.output for r in results] == [str(i + 1000) for i in range(12)]
    finally:
        await server.aclose()


async def test_dead_server_is_an_infra_error(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    server = await open_mcp_server(spec(env={"ARFT_TEST_PIDFILE": str(pidfile)}, include=["add"]))
    try:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        outcome = None
        for _ in range(50):  # the client notices the closed pipe asynchronously
            outcome = await server.tools[0].call('{"a": 1, "b": 2}', CTX)
            if outcome.status != "ok":
                break
            await asyncio.sleep(0.05)
        assert outcome is not None and outcome.status == "infra_error"
        assert "not answering" in (outcome.error or "")
    finally:
        await server.aclose()


async def test_startup_errors_say_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(McpServerError, match="offers .*add.*fix `include`"):
        await open_mcp_server(spec(include=["add", "nope"]))
    with pytest.raises(McpServerError, match="failed to start.*check `command`"):
        await open_mcp_server(McpToolSpec(type="mcp", command=[str(tmp_path / "missing")]))
    not_mcp = McpToolSpec(type="mcp", command=[sys.executable, "-c", "import time; time.sleep(30)"],
                          timeout_s=1)
    with pytest.raises(McpServerError, match="did not answer within 1s"):
        await open_mcp_server(not_mcp)
