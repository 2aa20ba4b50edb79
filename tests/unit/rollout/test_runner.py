"""RolloutRunner.run_many with real parts: the real tokenizer and ChatFormat, a scripted engine (and
the tiny model for seeded sampling), real python / endpoint / shell tools, a real SQLite store."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, Sequence

import pytest
import torch
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from arft.config import JobSpec
from arft.engines.scripted import ScriptedEngine
from arft.engines.transformers.engine import TransformersEngine
from arft.records import Message, Rollout, Score, Task
from arft.rollout.runner import RolloutRunner
from arft.tools.python_fn import PythonTool
from arft.tools.registry import Toolbox, open_toolbox
from arft.tracing.store import RunStore
from tests.servers import chat_completion, recording_app, serve, tool_output
from tests.unit.engines.transformers.test_engine import varied_model

EOS = "<|im_end|>"


def job(tmp_path: Path, tools: list[dict[str, Any]] | None = None, **rollout: Any) -> JobSpec:
    raw = {"training_file": "train.jsonl",
           "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "string_check", "name": "unused", "input": "x", "reference": "x",
                          "operation": "eq"},
               "tools": tools or []}},
           "sampling": {"max_new_tokens": 120},
           "rollout": {"max_turns": 3, "max_tokens": 2048, **rollout}}
    return JobSpec.model_validate(raw).model_copy(update={"base_dir": tmp_path})


def tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}", messages=(Message(role="user", content=f"Task number {i}: wait, then answer."),),
                 item={"answer": str(i)}) for i in range(n)]


class RecordingGrader:
    """Scores 1.0 when the answer names the task's number; records which rollouts it graded."""

    name = "recording"

    def __init__(self) -> None:
        self.graded: list[str] = []

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        self.graded.append(sample["trajectory"]["trace_id"])
        return Score(score=1.0 if f"answer-{item['answer']}" in sample["output_text"] else 0.25)


def call(name: str, **args: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def after_question(tokenizer: Any, prompt_ids: Sequence[int]) -> tuple[int, str]:
    """(the task's number, the conversation after the user's question) of a prompt."""
    text = tokenizer.decode(list(prompt_ids)).split("Task number ")[-1]
    return int(re.match(r"\d+", text).group()), text  # type: ignore[union-attr]


async def test_run_many_keeps_task_order_stamps_grades_stores_and_reports(tmp_path: Path,
                                                                          tokenizer: Any) -> None:
    async def wait(seconds: float) -> str:
        """Wait a while.

        Args:
            seconds: How long.
        """
        await asyncio.sleep(seconds)
        return f"waited {seconds}"

    def reply(prompt_ids: Sequence[int]) -> str:
        i, text = after_question(tokenizer, prompt_ids)
        if "<tool_response>" not in text:  # task 0 waits longest: it finishes last
            return call("wait", seconds=0.25 * (2 - i))
        return f"answer-{i}" + EOS

    box = Toolbox()
    box.add(PythonTool.from_function(wait))
    grader = RecordingGrader()
    done: list[Rollout] = []
    with RunStore(tmp_path / "arft.sqlite") as store:
        store.create_run("r1", "eval", {})
        runner = RolloutRunner.from_job(job(tmp_path, concurrency=8), ScriptedEngine(tokenizer, reply), box,
                                        grader, store=store)
        out = await runner.run_many(tasks(3), 2, run_id="r1", step=4, on_done=done.append)
        stored = {r.trace_id: r for r in store.rollouts("r1")}
    assert [(r.task_id, r.sample_index) for r in out] == [(f"t{i}", k) for i in range(3) for k in range(2)]
    assert all(r.run_id == "r1" and r.step == 4 for r in out)
    assert all(r.status == "ok" and r.tool_calls[0].status == "ok" for r in out)
    assert [r.reward for r in out] == [1.0] * 6
    # on_done: once per rollout, as each finishes (the fast task first), not in task order
    assert sorted(r.trace_id for r in done) == sorted(r.trace_id for r in out) and len(done) == 6
    assert done[0].task_id == "t2" and done[-1].task_id == "t0"
    assert sorted(grader.graded) == sorted(r.trace_id for r in out)  # each graded exactly once
    assert stored.keys() == {r.trace_id for r in out}
    for r in out:  # the stored record is the graded one
        s = stored[r.trace_id]
        assert s.score == r.score and s.step == 4 and s.run_id == "r1" and s.token_ids == r.token_ids


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    torch.set_num_threads(1)
    return varied_model(tokenizer, seed=3)


async def test_same_seed_same_rollouts_whatever_the_concurrency(tmp_path: Path, tokenizer: Any,
                                                               model: Any) -> None:
    rows: list[int] = []

    async def sample(concurrency: int, max_batch_size: int, seed: int | None) -> list[Rollout]:
        engine = TransformersEngine(model, tokenizer, max_batch_size=max_batch_size)
        spec = job(tmp_path, concurrency=concurrency)
        spec = spec.model_copy(update={"sampling": spec.sampling.model_copy(update={"max_new_tokens": 10})})
        runner = RolloutRunner.from_job(spec, engine, Toolbox(), RecordingGrader())
        try:
            return await runner.run_many(tasks(3), 2, seed=seed)
        finally:
            rows.append(engine.stats.max_rows)
            await engine.aclose()

    one_at_a_time = await sample(1, 1, seed=11)
    all_at_once = await sample(6, 8, seed=11)
    other_seed = await sample(6, 8, seed=12)
    assert rows[0] == 1 and rows[1] > 1  # one request per forward pass vs. shared batches
    ids = [r.token_ids for r in one_at_a_time]
    assert all(sum(r.loss_mask) > 0 for r in one_at_a_time)
    assert [r.token_ids for r in all_at_once] == ids
    for a, b in zip(all_at_once, one_at_a_time):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert len(set(ids)) == 6  # every (task, sample) draws from its own seed
    assert [r.token_ids for r in other_seed] != ids


def failing_tool_app(seen: list[dict[str, Any]]) -> FastAPI:
    """A hosted-contract tool endpoint that is down (503) for task 'down' and fine otherwise."""

    def answer(body: dict[str, Any]) -> Any:
        if body["item"]["id"] == "down":
            return JSONResponse({"error": "overloaded"}, status_code=503)
        return tool_output(body, "v")

    return recording_app("/lookup", seen, answer)


async def test_infra_failed_rollout_is_stored_but_never_graded(tmp_path: Path, tokenizer: Any) -> None:
    def reply(prompt_ids: Sequence[int]) -> str:
        i, text = after_question(tokenizer, prompt_ids)
        return call("lookup", key="k") if "<tool_response>" not in text else f"answer-{i}" + EOS

    seen: list[dict[str, Any]] = []
    grader = RecordingGrader()
    two = [Task(id=t.id, messages=t.messages, item={**t.item, "id": "down" if t.id == "t1" else "up"})
           for t in tasks(2)]
    with serve(failing_tool_app(seen)) as url:
        spec = job(tmp_path, tools=[{"name": "lookup", "server_url": f"{url}/lookup", "max_retries": 1,
                                     "parameters": {"type": "object",
                                                    "properties": {"key": {"type": "string"}}}}])
        box = await open_toolbox(spec.rl.tools, tmp_path)
        try:
            with RunStore(tmp_path / "arft.sqlite") as store:
                store.create_run("r", "eval", {})
                runner = RolloutRunner.from_job(spec, ScriptedEngine(tokenizer, reply), box, grader, store=store)
                ok, down = await runner.run_many(two, 1, run_id="r")
                stored = {r.trace_id: r for r in store.rollouts("r")}
        finally:
            await box.aclose()
    assert ok.status == "ok" and ok.reward == 1.0
    assert down.status == "infra_failed" and "503" in (down.error or "")
    assert down.score is None and down.reward is None  # never a fake zero
    assert grader.graded == [ok.trace_id]
    assert [b["trace_id"] for b in seen if b["item"]["id"] == "down"] == [down.trace_id] * 2  # 1 + 1 retry
    assert stored[down.trace_id].status == "infra_failed" and stored[down.trace_id].score is None
    assert stored[ok.trace_id].reward == 1.0


@pytest.mark.parametrize("template", [False, True])
async def test_a_workspace_toolbox_without_workspace_root_is_a_clear_error(
        tmp_path: Path, tokenizer: Any, template: bool) -> None:
    (tmp_path / "repo").mkdir()
    spec = job(tmp_path, tools=[{"type": "shell"}], **({"workspace": "repo"} if template else {}))
    box = await open_toolbox(spec.rl.tools, tmp_path)
    assert box.needs_workspace
    engine = ScriptedEngine(tokenizer, lambda _ids: "hi" + EOS)
    runner = RolloutRunner.from_job(spec, engine, box, RecordingGrader())
    try:
        with pytest.raises(ValueError, match="tools need a workspace: give the runner a run directory"):
            await runner.run_many(tasks(1), 1)
    finally:
        await box.aclose()
    assert engine.calls == 0  # refused before the model was asked anything


def chat_app(bodies: list[dict[str, Any]]) -> FastAPI:
    """An OpenAI-compatible fake that answers at once and records every request body."""
    return recording_app("/v1/chat/completions", bodies,
                         lambda body: chat_completion(body, {"role": "assistant", "content": "ok"}))


async def test_a_seed_reaches_a_chat_engine(tmp_path: Path) -> None:
    from arft.engines.openai_engine import OpenAIEngine

    bodies: list[dict[str, Any]] = []
    with serve(chat_app(bodies)) as url:
        engine = OpenAIEngine(url + "/v1", "m", api_key="sk-test", backoff_s=0.01)
        try:
            runner = RolloutRunner.from_job(job(tmp_path), engine, Toolbox(), RecordingGrader())
            out = await runner.run_many(tasks(2), 2, seed=11)
        finally:
            await engine.aclose()
    assert [r.status for r in out] == ["ok"] * 4 and len(bodies) == 4
    seeds = [b.get("seed") for b in bodies]
    assert None not in seeds and len(set(seeds)) == 4  # one seed per (task, sample), as with token engines


async def test_when_one_rollout_raises_the_others_stop(tmp_path: Path, tokenizer: Any) -> None:
    finished: list[str] = []

    async def wait() -> str:
        """Wait a while."""
        await asyncio.sleep(0.3)
        finished.append("tool")
        return "waited"

    def reply(prompt_ids: Sequence[int]) -> str:
        i, text = after_question(tokenizer, prompt_ids)
        return call("wait") if "<tool_response>" not in text else f"answer-{i}" + EOS

    (tmp_path / "repos" / "present").mkdir(parents=True)
    box = Toolbox()
    box.add(PythonTool.from_function(wait))
    two = [Task(id=f"t{i}", messages=(Message(role="user", content=f"Task number {i}: go."),), item={"repo": repo})
           for i, repo in enumerate(["missing", "present"])]
    done: list[Rollout] = []
    with RunStore(tmp_path / "arft.sqlite") as store:
        store.create_run("r", "eval", {})
        runner = RolloutRunner.from_job(job(tmp_path, workspace="repos/{{ item.repo }}"),
                                        ScriptedEngine(tokenizer, reply), box, RecordingGrader(), store=store,
                                        workspace_root=tmp_path / "workspaces")
        with pytest.raises(ValueError, match="task t0: .*missing is not a directory"):
            await runner.run_many(two, 1, run_id="r", on_done=done.append)
        for _ in range(50):  # up to 5 s for an orphaned rollout of t1 to get anywhere
            if finished and done:
                break
            await asyncio.sleep(0.1)
        assert finished == [] and done == [] and store.rollouts("r") == []


@pytest.mark.parametrize("job_parallel", [True, False])
async def test_a_rows_parallel_tool_calls_wins_over_the_jobs(tmp_path: Path, tokenizer: Any,
                                                             job_parallel: bool) -> None:
    runner = RolloutRunner.from_job(job(tmp_path, parallel_tool_calls=job_parallel),
                                    ScriptedEngine(tokenizer, lambda _ids: "hi" + EOS), Toolbox(), RecordingGrader())
    plain, = tasks(1)
    assert runner.conversation(plain).params.parallel_tool_calls is job_parallel
    for row in (True, False):
        own = plain.model_copy(update={"parallel_tool_calls": row})
        assert runner.conversation(own).params.parallel_tool_calls is row
