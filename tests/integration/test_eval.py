"""Full `arft eval` paths with real components: a tiny model built from a config, real HTTP tool
servers on 127.0.0.1, a fake OpenAI-compatible server, the real SQLite store and the CLI."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from typer.testing import CliRunner

from arft.cli.main import app as cli
from arft.config import load_job
from arft.engines.transformers.engine import TransformersEngine
from arft.app.evaluate import evaluate
from arft.data.splits import load_split
from arft.tracing.store import RunStore
from tests.servers import chat_completion, recording_app, serve, tool_output

ROWS = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"Look up key {i}."}], "answer": str(i)}
        for i in range(3)]


def write_job(tmp: Path, tools: list[dict[str, Any]], engine: dict[str, Any] | None = None) -> Path:
    (tmp / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    job = {"model": "smollm2-135m-instruct", "training_file": "val.jsonl", "validation_file": "val.jsonl",
           "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
                          "reference": "{{ item.answer }}", "operation": "like"},
               "tools": tools, "max_episode_steps": 3}},
           "sampling": {"max_new_tokens": 24}, "rollout": {"max_turns": 3, "max_tokens": 1024}}
    if engine:
        job["engine"] = engine
    (tmp / "job.json").write_text(json.dumps(job))
    return tmp / "job.json"


def lookup_app(seen: list[dict[str, Any]]) -> FastAPI:
    """A hosted-contract tool endpoint at /lookup that records every request body."""
    return recording_app("/lookup", seen, lambda body: tool_output(body, "v"))


async def test_eval_tiny_model_with_endpoint_tool(tmp_path: Path, tokenizer: Any, tiny_model: Any) -> None:
    seen: list[dict[str, Any]] = []
    app = lookup_app(seen)

    with serve(app) as url:
        job = load_job(write_job(tmp_path, [{"name": "lookup", "server_url": f"{url}/lookup",
                                             "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}]))
        engine = TransformersEngine(tiny_model, tokenizer, max_batch_size=8)
        try:
            result = await evaluate(job, load_split(job, "validation", None), 2, tmp_path / "run", engine=engine)
        finally:
            await engine.aclose()
    assert len(result.rollouts) == 6
    assert {r.status for r in result.rollouts} <= {"ok", "truncated"}
    assert all(r.score is not None and r.score.error is None for r in result.rollouts)
    assert all(sum(r.loss_mask) > 0 and len(r.token_ids) == len(r.logprobs) for r in result.rollouts)
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        stored = store.rollouts()
    assert {r.trace_id for r in stored} == {r.trace_id for r in result.rollouts}
    assert result.summary.n_rollouts == 6
    assert (tmp_path / "run" / "summary.json").exists()


def test_eval_openai_engine_endpoint_tools_and_cli(tmp_path: Path) -> None:
    """The whole CLI against real local servers: an OpenAI-compatible model server and a tool."""
    token = secrets.token_hex(6)
    tool_bodies: list[dict[str, Any]] = []
    tools_app = FastAPI()

    @tools_app.post("/lookup")
    async def lookup(req: Request) -> dict[str, Any]:
        body = await req.json()
        tool_bodies.append({"body": body, "auth": req.headers.get("authorization")})
        key = json.loads(body["arguments"])["key"]
        return tool_output(body, f"{key}:{token}")

    model_app = FastAPI()

    @model_app.post("/v1/chat/completions")
    async def chat(req: Request) -> dict[str, Any]:
        body = await req.json()
        last = body["messages"][-1]
        if last["role"] == "tool":  # answer with the tool's output: proves the result came back
            message = {"role": "assistant", "content": f"The answer is {last['content'].split(':')[0]}."}
            finish = "stop"
        else:
            key = last["content"].split()[-1].rstrip(".")
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{secrets.token_hex(4)}", "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"key": key})}}]}
            finish = "tool_calls"
        return chat_completion(body, message, finish, completion_tokens=5)

    with serve(tools_app) as tools_url, serve(model_app) as model_url:
        job = write_job(tmp_path, [{"name": "lookup", "server_url": f"{tools_url}/lookup",
                                    "headers": {"Authorization": "Bearer t0k"}}],
                        engine={"type": "openai", "base_url": f"{model_url}/v1", "served_model": "m"})
        out = CliRunner().invoke(cli, ["eval", str(job), "--samples", "2", "--out", str(tmp_path / "run"),
                                       "--set", "seed=11", "--set", "sampling.temperature=0.3"])
        assert out.exit_code == 0, out.output
        exported = CliRunner().invoke(cli, ["export", str(tmp_path / "run")])
    assert exported.exit_code == 0, exported.output
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:  # the --set overrides are the job the run ran
        (run,) = store.runs()
    assert run["job"]["seed"] == 11 and run["job"]["sampling"]["temperature"] == 0.3  # type: ignore[index]
    rows = [json.loads(line) for line in exported.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 6 and all(r["reward"] == 1.0 for r in rows)
    assert {(r["split"], r["step"]) for r in rows} == {("validation", None)}  # arft eval: its split, no step
    assert sorted(r["sample"] for r in rows) == [0, 0, 0, 1, 1, 1]
    assert len(tool_bodies) == 6 and all(b["auth"] == "Bearer t0k" for b in tool_bodies)
    by_trace = {b["body"]["trace_id"] for b in tool_bodies}
    assert by_trace == {r["trace_id"] for r in rows}  # one call per rollout, trace ids match the store
    assert all(token in r["tool_calls"][0]["output"] for r in rows)
    shown = CliRunner().invoke(cli, ["show", str(tmp_path / "run"), rows[0]["trace_id"]])
    assert shown.exit_code == 0 and rows[0]["trace_id"] in shown.output


async def test_endpoint_trace_id_constant_within_and_distinct_across_rollouts(
        tmp_path: Path, tokenizer: Any) -> None:
    """Three turns (two parallel calls, one call, answer) against a real HTTP tool server."""
    from arft.engines.scripted import ScriptedEngine

    bodies: list[dict[str, Any]] = []
    app = lookup_app(bodies)

    def call(key: str) -> str:
        return '<tool_call>\n{"name": "lookup", "arguments": {"key": "%s"}}\n</tool_call>' % key

    def reply(prompt_ids: Any) -> str:
        # tool results after the user's question (the tool block's example has some before it)
        seen = tokenizer.decode(list(prompt_ids)).split("Look up key")[-1].count("<tool_response>")
        return {0: call("a") + "\n" + call("b"), 2: call("c")}.get(seen, "The answer is 1.<|im_end|>")

    with serve(app) as url:
        job = load_job(write_job(tmp_path, [{"name": "lookup", "server_url": f"{url}/lookup"}]))
        job = job.model_copy(update={"sampling": job.sampling.model_copy(update={"max_new_tokens": 200})})
        engine = ScriptedEngine(tokenizer, reply)
        result = await evaluate(job, load_split(job, "validation", None), 2, tmp_path / "run", engine=engine)
    assert len(result.rollouts) == 6 and len(bodies) == 18
    for r in result.rollouts:
        mine = [b for b in bodies if b["trace_id"] == r.trace_id]
        assert len(mine) == 3  # every call of the rollout carried its trace_id
        assert {b["item"]["answer"] for b in mine} == {r.item["answer"]}
        assert [c.turn for c in r.tool_calls] == [0, 0, 1] and r.n_turns == 3
    assert len({b["trace_id"] for b in bodies}) == 6
    assert all(isinstance(b["arguments"], str) and b["type"] == "function_call" for b in bodies)
    assert result.summary.tool_calls.parallel_turn_share == 0.5


async def test_shell_tool_runs_in_a_fresh_workspace_per_rollout(tmp_path: Path, tokenizer: Any) -> None:
    from arft.engines.scripted import ScriptedEngine

    token = secrets.token_hex(8)
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "secret.txt").write_text(token)
    job_path = write_job(tmp_path, [{"type": "shell"}])
    raw = json.loads(job_path.read_text())
    raw["rollout"]["workspace"] = "repo"
    raw["sampling"]["max_new_tokens"] = 200
    job_path.write_text(json.dumps(raw))
    job = load_job(job_path)
    script = ('<tool_call>\n{"name": "shell", "arguments": {"command": "cat secret.txt; echo x >> secret.txt; '
              'wc -l secret.txt"}}\n</tool_call>')

    def reply(prompt_ids: Any) -> str:
        return script if "<tool_response>" not in tokenizer.decode(list(prompt_ids)).split("Look up key")[-1] \
            else "done<|im_end|>"

    result = await evaluate(job, load_split(job, "validation", 1), 3, tmp_path / "run",
                            engine=ScriptedEngine(tokenizer, reply))
    for r in result.rollouts:
        out = r.tool_calls[0].output
        assert r.tool_calls[0].status == "ok", out
        assert token in out and "1 secret.txt" in out  # each rollout started from a fresh copy
    assert (tmp_path / "repo" / "secret.txt").read_text() == token  # the template is untouched
    assert not any((tmp_path / "run" / "workspaces").glob("trace_*"))  # removed after grading


def test_a_row_naming_a_missing_tool_is_a_clear_error(tmp_path: Path) -> None:
    job = write_job(tmp_path, [{"type": "shell"}])
    row = {"id": "bad", "messages": [{"role": "user", "content": "hi"}],
           "tools": [{"type": "function", "function": {"name": "nope", "parameters": {"type": "object"}}}]}
    (tmp_path / "val.jsonl").write_text(json.dumps(row) + "\n")
    out = CliRunner().invoke(cli, ["eval", str(job), "--out", str(tmp_path / "run")])
    assert out.exit_code == 2
    assert "'nope'" in out.output and "available: shell" in out.output


async def test_workspace_per_task_from_a_row_placeholder(tmp_path: Path, tokenizer: Any) -> None:
    """`rollout.workspace: repos/{{ item.answer }}` copies each task's own folder; a row whose
    folder is missing is refused before any rollout runs, naming the task."""
    from arft.engines.scripted import ScriptedEngine

    for row in ROWS:
        (tmp_path / "repos" / row["answer"]).mkdir(parents=True)
        (tmp_path / "repos" / row["answer"] / "which.txt").write_text(f"repo-of-{row['id']}")
    job_path = write_job(tmp_path, [{"type": "shell"}])
    raw = json.loads(job_path.read_text())
    raw["rollout"]["workspace"] = "repos/{{ item.answer }}"
    raw["sampling"]["max_new_tokens"] = 200
    job_path.write_text(json.dumps(raw))
    job = load_job(job_path)
    script = '<tool_call>\n{"name": "shell", "arguments": {"command": "cat which.txt"}}\n</tool_call>'

    def reply(prompt_ids: Any) -> str:
        return script if "<tool_response>" not in tokenizer.decode(list(prompt_ids)).split("Look up key")[-1] \
            else "done<|im_end|>"

    tasks = load_split(job, "validation", None)
    result = await evaluate(job, tasks, 1, tmp_path / "run", engine=ScriptedEngine(tokenizer, reply))
    for r in result.rollouts:
        assert r.tool_calls[0].output.strip().endswith(f"repo-of-{r.task_id}")

    import shutil

    shutil.rmtree(tmp_path / "repos" / ROWS[0]["answer"])
    with pytest.raises(ValueError, match=f"task {ROWS[0]['id']}: .* is not a directory"):
        await evaluate(job, tasks, 1, tmp_path / "run2", engine=ScriptedEngine(tokenizer, reply))
    assert not (tmp_path / "run2" / "arft.sqlite").exists() or not any(
        (tmp_path / "run2" / "workspaces").glob("*"))  # refused before any rollout ran
