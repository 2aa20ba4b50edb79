"""open_toolbox turns every kind of tool spec into live tools (and closes them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from arft.config import ToolSpec
from arft.tools.registry import ToolSetupError, open_toolbox

SERVER = Path(__file__).resolve().parents[2] / "fixtures" / "mcp_server.py"


def specs(*raw: dict) -> list:
    return [TypeAdapter(ToolSpec).validate_python(r) for r in raw]


async def test_every_kind(tmp_path: Path) -> None:
    (tmp_path / "mytools.py").write_text("def double(x: int) -> int:\n    '''Double x.'''\n    return 2 * x\n")
    box = await open_toolbox(specs(
        {"type": "endpoint", "name": "lookup", "server_url": "http://127.0.0.1:9/x"},
        {"type": "python", "function": "mytools.py:double"},
        {"type": "shell"},
        {"type": "mcp", "command": [sys.executable, str(SERVER)], "include": ["add"], "name_prefix": "m_"},
    ), tmp_path)
    try:
        assert set(box.tools) == {"lookup", "double", "shell", "m_add"}
        assert box.needs_workspace
        assert all(t.schema["function"]["name"] == n for n, t in box.tools.items())
    finally:
        await box.aclose()


async def test_duplicate_names_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(ToolSetupError, match="two tools are named 'shell'"):
        await open_toolbox(specs({"type": "shell"}, {"type": "shell"}), tmp_path)


async def test_bad_python_reference_names_the_spec(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nope.py"):
        await open_toolbox(specs({"type": "python", "function": "nope.py:f"}), tmp_path)
