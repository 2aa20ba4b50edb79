"""The Agents SDK example: the committed data is what make_data.py writes, the job loads with the
agent as its driver, the agent module imports and builds its Agent (no network), its tools
answer, and a row's worked examples become the SDK's input items (no training here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arft.app.gateway.driver import program_row
from arft.config import load_job
from arft.data.dataset import load_tasks
from arft.pyfile import load_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agents_sdk"


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's folder on sys.path, as arft puts an entrypoint's folder."""
    monkeypatch.syspath_prepend(str(EXAMPLE))


def test_generator_is_deterministic_and_the_committed_data_is_current(on_path: None, tmp_path: Path) -> None:
    load_file(EXAMPLE / "make_data.py", "agents_sdk_make_data_test").main(tmp_path)
    for name in ("train.jsonl", "validation.jsonl"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes(), "run python make_data.py"


def test_the_job_runs_the_agent_program() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    assert job.agent.type == "python" and job.agent.entrypoint == "agent.py:run"
    assert job.method.reinforcement.tools == []


def test_the_agent_and_its_function_tools(on_path: None) -> None:
    agent = load_file(EXAMPLE / "agent.py", "agents_sdk_agent_test")
    built = agent.build_agent("http://127.0.0.1:9/v1", "key", "policy", "Convert units.")
    assert [t.name for t in built.tools] == ["miles_to_km", "celsius_to_fahrenheit"]
    assert type(built.model).__name__ == "OpenAIResponsesModel"
    units = load_file(EXAMPLE / "unit_tools.py", "agents_sdk_unit_tools_test")
    assert units.miles_to_km(26.2) == "42.16" and units.celsius_to_fahrenheit(21) == "69.8"


def test_a_rows_worked_examples_become_input_items(on_path: None) -> None:
    agent = load_file(EXAMPLE / "agent.py", "agents_sdk_agent_items_test")
    row = program_row(load_tasks(EXAMPLE / "validation.jsonl")[0])
    items = agent.input_items([m for m in row["messages"] if m["role"] != "system"])
    call, output = items[1], items[2]
    assert items[0] == {"role": "user", "content": "How many kilometres is 12 miles?"}
    assert call["type"] == "function_call" and call["name"] == "miles_to_km"
    assert json.loads(call["arguments"]) == {"miles": 12}
    assert output == {"type": "function_call_output", "call_id": call["call_id"], "output": "19.31"}
    assert items[-1] == row["messages"][-1] == {"role": "user", "content": row["messages"][-1]["content"]}
