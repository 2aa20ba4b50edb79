"""The LangGraph example: the committed data is what make_data.py writes, the job loads with the
agent as its driver, the agent module imports and builds its graph (no network), its tools answer,
and every row reaches LangChain as messages it accepts (no training here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, convert_to_messages

from arft.app.gateway.driver import program_row
from arft.config import load_job
from arft.data.dataset import load_tasks
from arft.pyfile import load_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph"


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's folder on sys.path, as arft puts an entrypoint's folder."""
    monkeypatch.syspath_prepend(str(EXAMPLE))


def test_generator_is_deterministic_and_the_committed_data_is_current(on_path: None, tmp_path: Path) -> None:
    load_file(EXAMPLE / "make_data.py", "langgraph_make_data_test").main(tmp_path)
    for name in ("train.jsonl", "validation.jsonl"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes(), "run python make_data.py"


def test_the_job_runs_the_agent_program() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    assert job.agent.type == "python" and job.agent.entrypoint == "agent.py:run"
    assert job.method.reinforcement.tools == []


def test_the_agent_builds_a_react_graph_over_its_two_tools(on_path: None) -> None:
    agent = load_file(EXAMPLE / "agent.py", "langgraph_agent_test")
    graph = agent.build_agent("http://127.0.0.1:9/v1", "key", "policy")
    assert {"agent", "tools"} <= set(graph.get_graph().nodes)
    tools = {t.name: t for t in agent.TOOLS}
    assert tools["price"].invoke({"item": "zorvex"}) == "17.35"
    assert tools["price"].invoke({"item": "Nothing"}).startswith("Error")
    assert tools["calculator"].invoke({"expression": "58 * 33"}) == "1914"
    assert tools["calculator"].invoke({"expression": "import os"}).startswith("Error")


def test_rows_reach_langchain_with_their_worked_tool_calls() -> None:
    task = load_tasks(EXAMPLE / "validation.jsonl")[0]
    messages = convert_to_messages(program_row(task)["messages"])
    calls = [m.tool_calls[0]["name"] for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    assert calls[:2] == ["price", "calculator"]
    assert messages[-1].type == "human"
