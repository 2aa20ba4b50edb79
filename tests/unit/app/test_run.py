"""``open_run``: what it builds (store at RunDir.store, runner over it), what it closes and in which
order (reverse of building, even when the body raises), what it leaves to the caller (a passed
engine unless ``close_engine``, a passed grader always), and the tool check before any rollout."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from arft.app.run import open_run
from arft.config import JobSpec
from arft.engines.scripted import ScriptedEngine
from arft.records import Message, Score, Task
from arft.tools.base import ToolContext, ToolOutcome
from arft.tracing.run_dir import RunDir
from arft.tracing.store import RunStore

EOS = "<|im_end|>"


def job(tmp_path: Path) -> JobSpec:
    (tmp_path / "train.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    raw = {"training_file": "train.jsonl",
           "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "string_check", "name": "g", "input": "{{ sample.output_text }}",
                          "reference": "hello", "operation": "eq"},
               "tools": [{"type": "python", "function": "tools.py:lookup"}]}},
           "sampling": {"max_new_tokens": 32}, "rollout": {"max_turns": 2, "max_tokens": 1024}}
    (tmp_path / "tools.py").write_text('def lookup(key: str) -> str:\n    """Look a key up."""\n'
                                       '    return key\n')
    return JobSpec.model_validate(raw).model_copy(update={"base_dir": tmp_path})


class Log(list):  # type: ignore[type-arg]
    """What closed, in order, and what was already closed at that moment."""


class ClosingEngine(ScriptedEngine):
    def __init__(self, tokenizer: Any, log: Log) -> None:
        super().__init__(tokenizer, lambda _ids: "hello" + EOS)
        self.log = log

    async def aclose(self) -> None:
        self.log.append("engine")


class ClosingGrader:
    name = "closing"

    def __init__(self, log: Log) -> None:
        self.log = log

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        return Score(score=1.0)

    async def aclose(self) -> None:
        self.log.append("grader")


class ClosingTool:
    """Added to the run's toolbox: closes with it and notes whether the store was closed first."""

    name = "probe"
    schema = {"type": "function", "function": {"name": "probe", "parameters": {"type": "object"}}}

    def __init__(self, log: Log, store: RunStore) -> None:
        self.log, self.store = log, store

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome(output="")

    async def aclose(self) -> None:
        self.log.append(("toolbox", "store closed" if closed(self.store) else "store open"))


def closed(store: RunStore) -> bool:
    try:
        store.runs()
    except sqlite3.ProgrammingError:
        return True
    return False


@pytest.mark.parametrize("close_engine", [True, None, False])
async def test_closes_in_reverse_order_when_the_body_raises(tmp_path: Path, tokenizer: Any,
                                                            close_engine: bool | None) -> None:
    log = Log()
    engine, grader = ClosingEngine(tokenizer, log), ClosingGrader(log)
    rd = RunDir(tmp_path / "run")
    with pytest.raises(RuntimeError, match="boom"):
        async with open_run(job(tmp_path), rd, engine=engine, close_engine=close_engine, grader=grader) as run:
            run.toolbox.add(ClosingTool(log, run.store))
            store = run.store
            out = await run.runner.run_many([Task(id="t", messages=(Message(role="user", content="hi"),))], 1,
                                            run_id="")
            assert out[0].reward == 1.0 and log == []  # nothing closed while the run is open
            raise RuntimeError("boom")
    expected: list[Any] = [("toolbox", "store closed")] + (["engine"] if close_engine else [])
    assert log == expected  # store, then toolbox, then engine; a passed grader is never closed
    assert closed(store)


async def test_the_jobs_own_grader_is_closed_last(tmp_path: Path, tokenizer: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log()
    built: list[Any] = []

    def build(spec: Any, base_dir: Path) -> ClosingGrader:
        built.append(spec)
        return ClosingGrader(log)

    monkeypatch.setattr("arft.app.run.build_grader", build)  # observe the close of a built grader
    async with open_run(job(tmp_path), RunDir(tmp_path / "run"), engine=ClosingEngine(tokenizer, log),
                        close_engine=True) as run:
        run.toolbox.add(ClosingTool(log, run.store))
    assert len(built) == 1  # the job's grader was built once, and closed
    assert log == [("toolbox", "store closed"), "engine", "grader"]


async def test_store_and_runner_live_in_the_run_directory(tmp_path: Path, tokenizer: Any) -> None:
    rd = RunDir(tmp_path / "nested" / "run")
    async with open_run(job(tmp_path), rd, engine=ClosingEngine(tokenizer, Log()),
                        grader=ClosingGrader(Log())) as run:
        assert run.run_dir == rd and run.store.path == rd.store == rd.path / "arft.sqlite"
        assert run.runner.store is run.store and run.runner.workspace_root == rd.workspaces
        assert set(run.toolbox.tools) == {"lookup"}
        run.store.create_run("r", "eval", {})
        await run.runner.run_many([Task(id="t", messages=(Message(role="user", content="hi"),))], 2, run_id="r")
    with RunStore(rd.store) as store:
        assert [r.task_id for r in store.rollouts("r")] == ["t", "t"]


async def test_a_split_naming_a_missing_tool_fails_before_any_rollout(tmp_path: Path, tokenizer: Any) -> None:
    log = Log()
    engine = ClosingEngine(tokenizer, log)
    bad = Task(id="bad", messages=(Message(role="user", content="hi"),),
               tools=({"type": "function", "function": {"name": "nope", "parameters": {"type": "object"}}},))
    rd = RunDir(tmp_path / "run")
    entered = False
    with pytest.raises(ValueError, match="'nope'") as err:
        async with open_run(job(tmp_path), rd, engine=engine, close_engine=True, grader=ClosingGrader(log),
                            splits={"validation": [bad]}):
            entered = True
    assert "available: lookup" in str(err.value) and "'bad'" in str(err.value)
    assert not entered and engine.calls == 0 and not rd.store.exists()
    assert log == ["engine"]  # what was built before the check is still closed
