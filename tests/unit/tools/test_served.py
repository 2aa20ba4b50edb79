"""Rows that bring their own tools: one entry with ``serves`` answers every tool a row names that
the job does not declare, told the name it was called as (python and endpoint tools), and the
row's schema is the one shown and enforced. A dataset of 700 distinct tools runs with one entry."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from arft.app.run import open_run
from arft.chat.formats import ChatFormat
from arft.config import EndpointToolSpec, JobSpec, PythonToolSpec
from arft.data.dataset import DatasetError, check_task_tools, load_tasks
from arft.engines.scripted import ScriptedEngine
from arft.records import Message, Task
from arft.rollout.loop import task_tool_schemas
from arft.tools.base import ToolContext, ToolSetupError
from arft.tools.endpoint import EndpointTool
from arft.tools.python_fn import PythonTool
from arft.tools.registry import open_toolbox
from arft.tracing.run_dir import RunDir
from tests.servers import recording_app, serve, tool_output

EOS = "<|im_end|>"
SECRET = "tok_" + uuid.uuid4().hex  # only the handler writes it: seeing it proves the handler ran
HANDLER = ("def handle(tool_name, ctx, **arguments):\n"
           f"    return {{'secret': {SECRET!r}, 'tool': tool_name, 'ctx_name': ctx.tool_name,\n"
           "            'args': arguments}\n")


def row_tool(name: str, description: str = "") -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description or f"Look up {name}.",
        "parameters": {"type": "object", "properties": {"x": {"type": "integer"}},
                       "required": ["x"]}}}


def call_text(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def ctx(name: str = "") -> ToolContext:
    return ToolContext(trace_id="trace_x", call_id="call_x", tool_name=name)


async def test_toolbox_lookup_finds_declared_then_served_names(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(HANDLER + "def own(x: int) -> int:\n    return x\n")
    box = await open_toolbox([
        PythonToolSpec(type="python", function="tools.py:own"),
        PythonToolSpec(type="python", function="tools.py:handle", serves="weather_*")], tmp_path)
    try:
        assert list(box.tools) == ["own"] and list(box.lookup) == ["own"]  # handle is no tool
        assert "own" in box.lookup and "weather_now" in box.lookup and "stock_now" not in box.lookup
        with pytest.raises(KeyError):
            box.lookup["handle"]
        served = box.lookup["weather_now"]
        assert served is box.lookup["weather_now"]  # bound once per name
        out = json.loads((await served.call('{"x": 3}', ctx())).output)
        assert out == {"secret": SECRET, "tool": "weather_now", "ctx_name": "weather_now",
                       "args": {"x": 3}}
        assert (await box.lookup["own"].call('{"x": 4}', ctx("own"))).output == "4"
    finally:
        await box.aclose()


def test_a_serving_entry_takes_no_parameters_override(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(HANDLER)
    spec = PythonToolSpec(type="python", function="tools.py:handle", serves="*",
                          parameters={"type": "object", "properties": {}})
    with pytest.raises(ToolSetupError, match="row's own; remove 'parameters'"):
        PythonTool(spec, tmp_path)
    with pytest.raises(ToolSetupError, match="row's own; remove 'parameters'"):
        EndpointTool(EndpointToolSpec(name="c", server_url="http://127.0.0.1:9/x", serves="*",
                                      parameters={"type": "object"}))


async def test_a_serving_endpoint_posts_the_called_name() -> None:
    bodies: list[dict[str, Any]] = []
    app = recording_app("/tools", bodies, lambda b: tool_output(b, f"{SECRET}:{b['name']}"))
    with serve(app) as url:
        tool = EndpointTool(EndpointToolSpec(name="catalog", server_url=f"{url}/tools", serves="*"))
        try:
            outcome = await tool.call('{"x": 1}', ctx("get_price"))
        finally:
            await tool.aclose()
    assert outcome.status == "ok" and outcome.output == f"{SECRET}:get_price"
    assert bodies[0]["name"] == "get_price" and tool.serves == "*"


def write_dataset(path: Path, n_tools: int, per_row: int) -> None:
    """Rows of ``per_row`` distinct tools each; row r asks for its last tool."""
    lines = []
    for r in range(n_tools // per_row):
        names = [f"tool_{r * per_row + i:04d}" for i in range(per_row)]
        lines.append(json.dumps({"id": f"r{r}", "want": names[-1],
                                 "messages": [{"role": "user", "content": f"use {names[-1]}"}],
                                 "tools": [row_tool(n, f"Row {r} tool {n}.") for n in names]}))
    path.write_text("\n".join(lines) + "\n")


def served_job(tmp_path: Path) -> JobSpec:
    (tmp_path / "tools.py").write_text(HANDLER)
    raw = {"training_file": "train.jsonl",
           "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "string_check", "name": "g", "input": "{{ sample.output_text }}",
                          "reference": "done", "operation": "eq"},
               "tools": [{"type": "python", "function": "tools.py:handle", "serves": "*"}]}},
           "sampling": {"max_new_tokens": 64}, "rollout": {"max_turns": 3, "max_tokens": 8192}}
    return JobSpec.model_validate(raw).model_copy(update={"base_dir": tmp_path})


def reply(tokenizer: Any):  # type: ignore[no-untyped-def]
    """Call the tool the user names, then answer ``done`` once the tool has answered."""
    def answer(ids: Any) -> str:
        text = tokenizer.decode(ids)
        if SECRET in text:
            return "done" + EOS
        want = text.rsplit("use tool_", 1)[1][:4]
        return call_text(f"tool_{want}", {"x": int(want)}) + EOS
    return answer


async def test_a_dataset_of_700_tools_runs_with_one_entry(tmp_path: Path, tokenizer: Any) -> None:
    write_dataset(tmp_path / "train.jsonl", n_tools=700, per_row=70)
    tasks = load_tasks(tmp_path / "train.jsonl")
    job = served_job(tmp_path)
    engine = ScriptedEngine(tokenizer, reply(tokenizer))
    async with open_run(job, RunDir(tmp_path / "run"), engine=engine,
                        splits={"train": tasks}) as run:  # the dataset check passes: all served
        assert len({t["function"]["name"] for task in tasks for t in task.tools or ()}) == 700
        rollouts = await run.runner.run_many(tasks, 1, run_id="")
    assert [r.status for r in rollouts] == ["ok"] * 10 and all(r.reward == 1.0 for r in rollouts)
    for task, r in zip(tasks, rollouts):
        (record,) = r.tool_calls
        out = json.loads(record.output)
        assert record.status == "ok" and out["secret"] == SECRET
        assert out["tool"] == record.name == task.item["want"]
        assert out["args"] == {"x": int(record.name[-4:])}


async def test_the_rows_schema_is_shown_and_enforced(tmp_path: Path, tokenizer: Any) -> None:
    (tmp_path / "tools.py").write_text(HANDLER)
    box = await open_toolbox([PythonToolSpec(type="python", function="tools.py:handle",
                                             serves="*")], tmp_path)
    task = Task(id="t", messages=(Message(role="user", content="hi"),),
                tools=(row_tool("get_rate", "Row-only description."),))
    schemas = task_tool_schemas(task, box.lookup)
    fmt = ChatFormat(tokenizer)
    grammar = fmt.tool_grammar(schemas, constrain_all=True)
    await box.aclose()
    assert grammar is not None and [t.name for t in grammar.tools] == ["get_rate"]
    assert grammar.tools[0].parameters == row_tool("get_rate")["function"]["parameters"]
    assert "Row-only description." in fmt.render_prompt(task.messages, schemas, "auto").text


def test_an_unserved_row_tool_is_still_an_error(tmp_path: Path) -> None:
    task = Task(id="t", messages=(Message(role="user", content="hi"),), tools=(row_tool("x"),))
    with pytest.raises(DatasetError, match="serves"):
        check_task_tools([task], set(), tmp_path / "train.jsonl")


async def test_the_doctor_passes_rows_whose_tools_are_served(tmp_path: Path) -> None:
    from tests.unit.app.test_doctor import good_rows, static, write_job

    train, val = good_rows()
    for i, r in enumerate(train + val):
        r["tools"] = [row_tool(f"tool_{i:03d}")]
    path = write_job(tmp_path, train, val)
    job = json.loads(path.read_text())
    job["method"]["reinforcement"]["tools"] = [
        {"type": "python", "function": "tools.py:handle", "serves": "tool_*"}]
    path.write_text(json.dumps(job))
    (tmp_path / "tools.py").write_text(HANDLER)
    c = (await static(path))["task.tools"]
    assert c.verdict == "pass" and "handle serving 'tool_*'" in c.measured
