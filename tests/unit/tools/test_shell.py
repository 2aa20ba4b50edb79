"""The shell tool, run for real in per-rollout sandboxed workspaces."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from arft.config import ShellToolSpec
from arft.records import new_trace_id
from arft.sandbox import create_workspace
from arft.tools.base import Tool, ToolContext
from arft.tools.shell import ShellTool


@pytest.fixture
def token() -> str:
    return "tok-" + uuid.uuid4().hex


@pytest.fixture
def template(tmp_path: Path, token: str) -> Path:
    t = tmp_path / "template"
    t.mkdir()
    (t / "secret.txt").write_text(token + "\n")
    return t


def ctx_for(root: Path, template: Path | None) -> ToolContext:
    trace_id = new_trace_id()
    return ToolContext(trace_id=trace_id, call_id="call_1",
                       workspace=create_workspace(root, template, trace_id))


def cmd(command: str) -> str:
    return json.dumps({"command": command})


async def test_runs_in_the_rollout_workspace(tmp_path: Path, template: Path, token: str) -> None:
    tool = ShellTool(ShellToolSpec(type="shell"))
    ctx = ctx_for(tmp_path / "ws", template)
    # The token is only in the template file, never in the command: the output proves it ran.
    outcome = await tool.call(cmd("cat secret.txt"), ctx)
    assert outcome.status == "ok" and outcome.error is None
    assert outcome.output == token + "\n"


async def test_files_persist_within_a_rollout_only(tmp_path: Path, template: Path) -> None:
    tool = ShellTool(ShellToolSpec(type="shell"))
    a, b = ctx_for(tmp_path / "ws", template), ctx_for(tmp_path / "ws", template)
    assert (await tool.call(cmd("echo kept > note.txt"), a)).output == "(no output)"
    assert (await tool.call(cmd("cat note.txt"), a)).output == "kept\n"
    other = await tool.call(cmd("cat note.txt"), b)
    assert other.status == "tool_error" and "No such file" in other.output


async def test_nonzero_exit_shows_output_and_code(tmp_path: Path) -> None:
    tool = ShellTool(ShellToolSpec(type="shell"))
    outcome = await tool.call(cmd("echo partial; echo oops >&2; exit 3"), ctx_for(tmp_path, None))
    assert outcome.status == "tool_error" and outcome.error == "exit code 3"
    assert outcome.output == "partial\noops\n\n[exit code 3]"


async def test_timeout_is_a_tool_error(tmp_path: Path) -> None:
    tool = ShellTool(ShellToolSpec(type="shell", timeout_s=1))
    outcome = await tool.call(cmd("echo before; sleep 60"), ctx_for(tmp_path, None))
    assert outcome.status == "tool_error" and outcome.error == "timeout"
    assert outcome.output.startswith("command timed out after 1s (killed)")
    assert "before" in outcome.output


async def test_long_output_is_truncated_with_a_marker(tmp_path: Path) -> None:
    tool = ShellTool(ShellToolSpec(type="shell", max_output_chars=200))
    outcome = await tool.call(cmd("seq 1 100000"), ctx_for(tmp_path, None))
    assert outcome.status == "ok"
    assert outcome.output.startswith("1\n2\n3\n") and outcome.output.endswith("100000\n")
    assert "output truncated" in outcome.output and len(outcome.output) < 400


async def test_no_workspace_and_bad_arguments(tmp_path: Path) -> None:
    tool = ShellTool(ShellToolSpec(type="shell", name="bash"))
    no_ws = await tool.call(cmd("ls"), ToolContext(trace_id=new_trace_id(), call_id="c"))
    assert no_ws.status == "tool_error" and "rollout.workspace" in no_ws.output
    ctx = ctx_for(tmp_path, None)
    for bad in ('{"cmd": "ls"}', "not json", '{"command": 3}', '{"command": "  "}', "[1]"):
        outcome = await tool.call(bad, ctx)
        assert outcome.status == "tool_error" and '{"command": "ls -la"}' in outcome.output


def test_schema_and_protocol() -> None:
    tool = ShellTool(ShellToolSpec(type="shell", name="sh", description="Run it."))
    assert isinstance(tool, Tool) and tool.name == "sh"
    fn = tool.schema["function"]
    assert fn["name"] == "sh" and fn["description"] == "Run it."
    assert fn["parameters"]["required"] == ["command"]
    assert fn["parameters"]["properties"]["command"]["type"] == "string"
    assert "network" in ShellTool(ShellToolSpec(type="shell")).schema["function"]["description"]
