"""PythonTool: runs real functions (sync, async, from files and modules) and reports failures."""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from arft.config import PythonToolSpec
from arft.tools.base import Tool, ToolContext
from arft.tools.python_fn import PythonTool


def ctx(**item: Any) -> ToolContext:
    return ToolContext(trace_id="trace_" + uuid.uuid4().hex, call_id="call_1", item=item,
                       workspace=Path("/tmp/ws"))


@pytest.fixture
def secret() -> str:
    """A token only the tool knows: seeing it in the output proves the function ran."""
    return "tok_" + uuid.uuid4().hex


async def test_sync_function_runs_and_has_a_schema(secret: str) -> None:
    def lookup(city: str, days: int = 1) -> str:
        """Weather of a city.

        Args:
            city: The city.
            days: Days ahead.
        """
        return f"{secret}:{city}:{days}"

    t = PythonTool.from_function(lookup)
    assert isinstance(t, Tool) and t.name == "lookup"
    assert t.schema["function"]["description"] == "Weather of a city."
    assert t.schema["function"]["parameters"]["required"] == ["city"]
    out = await t.call('{"city": "Oslo", "days": 3}', ctx())
    assert out.status == "ok" and out.error is None
    assert out.output == f"{secret}:Oslo:3"
    await t.aclose()


async def test_async_function_and_non_string_results(secret: str) -> None:
    async def search(q: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"hits": [q], "secret": secret, "path": Path("/x")}

    t = PythonTool.from_function(search, name="find")
    assert t.name == "find" and t.schema["function"]["name"] == "find"
    out = await t.call('{"q": "rl"}', ctx())
    assert out.status == "ok"
    assert json.loads(out.output) == {"hits": ["rl"], "secret": secret, "path": "/x"}
    none_tool = PythonTool.from_function(lambda: None, name="nothing")
    assert (await none_tool.call("", ctx())).output == "null"


async def test_exception_is_shown_to_the_model(secret: str) -> None:
    def divide(a: float, b: float) -> float:
        if b == 0:
            raise ZeroDivisionError(f"b must not be zero ({secret})")
        return a / b

    t = PythonTool.from_function(divide)
    out = await t.call('{"a": 1, "b": 0}', ctx())
    assert out.status == "tool_error"
    assert out.output == f"Error: ZeroDivisionError: b must not be zero ({secret})"
    assert out.error and out.error.startswith("ZeroDivisionError")
    assert (await t.call('{"a": 1, "b": 4}', ctx())).output == "0.25"


async def test_timeouts_sync_and_async() -> None:
    async def slow_async() -> str:
        await asyncio.sleep(5)
        return "never"

    def slow_sync() -> str:
        time.sleep(0.4)
        return "late"

    for fn in (slow_async, slow_sync):
        out = await PythonTool.from_function(fn, timeout_s=0.05).call("{}", ctx())
        assert out.status == "tool_error"
        assert out.output == f"Error: tool '{fn.__name__}' timed out after 0.05s"


@pytest.mark.parametrize("arguments,expected", [
    ('{"city": "Oslo", "color": "red"}', "unexpected keyword argument 'color'"),
    ('{"days": 2}', "missing a required argument: 'city'"),
    ('[1, 2]', "must be a JSON object, got list"),
    ('{"city": ', "not valid JSON"),
    ('{"city": "Oslo", "ctx": "mine"}', "unexpected keyword argument 'ctx'"),
])
async def test_bad_arguments_list_the_expected_parameters(arguments: str, expected: str) -> None:
    def forecast(city: str, days: int = 1, ctx: ToolContext | None = None) -> str:
        return city

    out = await PythonTool.from_function(forecast).call(arguments, ctx())
    assert out.status == "tool_error"
    assert expected in out.output
    assert "city (str, required), days (int, default 1)" in out.output
    assert "ctx" not in out.output.split("Expected")[-1]


async def test_ctx_is_injected_and_hidden_from_the_schema(secret: str) -> None:
    def whoami(prefix: str, ctx: ToolContext) -> dict[str, Any]:
        return {"p": prefix, "trace": ctx.trace_id, "answer": ctx.item["answer"],
                "ws": str(ctx.workspace)}

    t = PythonTool.from_function(whoami)
    assert list(t.schema["function"]["parameters"]["properties"]) == ["prefix"]
    c = ctx(answer=secret)
    out = await t.call('{"prefix": "x"}', c)
    assert json.loads(out.output) == {"p": "x", "trace": c.trace_id, "answer": secret,
                                      "ws": "/tmp/ws"}


async def test_file_reference_relative_to_base_dir(tmp_path: Path, secret: str) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "kit.py").write_text(textwrap.dedent(f'''
        from dataclasses import dataclass

        @dataclass
        class Hit:  # dataclasses need their module in sys.modules
            text: str

        class Box:
            @staticmethod
            def stamp(word: str) -> str:
                """Stamp a word."""
                return "{secret}:" + Hit(word).text
    '''))
    spec = PythonToolSpec(type="python", function="tools/kit.py:Box.stamp", name="stamp_it",
                          description="Custom.")
    t = PythonTool(spec, tmp_path)
    assert t.name == "stamp_it" and t.schema["function"]["description"] == "Custom."
    out = await t.call('{"word": "hi"}', ctx())
    assert out.output == f"{secret}:hi"
    spec = PythonToolSpec(type="python", function=f"{tmp_path}/tools/kit.py:Box.stamp")
    absolute = PythonTool(spec, Path("/nonexistent"))
    assert absolute.name == "stamp"
    assert (await absolute.call('{"word": "yo"}', ctx())).output == f"{secret}:yo"


async def test_module_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                secret: str) -> None:
    pkg = f"arft_test_pkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "tools.py").write_text(
        f"async def ping(n: int) -> str:\n    return '{secret}' * n\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    t = PythonTool(PythonToolSpec(type="python", function=f"{pkg}.tools:ping"), Path("."))
    assert t.schema["function"]["parameters"]["properties"] == {"n": {"type": "integer"}}
    assert (await t.call('{"n": 2}', ctx())).output == secret * 2


@pytest.mark.parametrize("ref,message", [
    ("no_colon_here", "write it as 'package.module:function'"),
    ("missing.py:f", "not found"),
    ("kit.py:nope", "has no attribute 'nope'; it defines: VALUE, f"),
    ("kit.py:VALUE", "is not callable (it is of type int)"),
    ("broken.py:f", "importing"),
    ("arft_no_such_module_xyz:f", "cannot import module 'arft_no_such_module_xyz'"),
])
def test_bad_references_say_what_to_fix(tmp_path: Path, ref: str, message: str) -> None:
    (tmp_path / "kit.py").write_text("VALUE = 3\n\ndef f():\n    return 1\n")
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom at import')\n")
    with pytest.raises(ValueError) as err:
        PythonTool(PythonToolSpec(type="python", function=ref), tmp_path)
    assert f"'{ref}'" in str(err.value) and message in str(err.value)


def _lookup_tool(tmp_path: Path, parameters: dict[str, Any]) -> PythonTool:
    (tmp_path / "kit.py").write_text(
        "def lookup(query: str, limit: int = 3) -> str:\n"
        "    '''Look a thing up.'''\n"
        "    return f'{query}:{limit}'\n")
    spec = PythonToolSpec(type="python", function="kit.py:lookup", parameters=parameters)
    return PythonTool(spec, tmp_path)


async def test_parameters_override_replaces_the_signature_schema(tmp_path: Path) -> None:
    schema = {"type": "object", "required": ["query"],
              "properties": {"query": {"type": "string", "maxLength": 40}}}
    t = _lookup_tool(tmp_path, schema)
    assert t.schema["function"]["parameters"] == schema
    assert t.schema["function"]["description"] == "Look a thing up."
    # The function still binds the model's arguments; the default of the unlisted one applies.
    assert (await t.call('{"query": "port"}', ctx())).output == "port:3"


@pytest.mark.parametrize(("parameters", "message"), [
    ({"type": "object", "properties": {"query": {"type": "string"}, "city": {}},
      "required": ["query"]}, "'city', which the function does not take"),
    ({"type": "object", "properties": {"query": {"type": "string"}}}, "must require 'query'"),
    ({"type": "array"}, "must be a JSON schema of type 'object'"),
])
def test_parameters_override_must_match_the_function(tmp_path: Path, parameters: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        _lookup_tool(tmp_path, parameters)
    assert "python tool 'lookup'" in str(err.value)
