"""Tool cassettes end to end through `arft eval --record / --replay`: every tool kind recorded live,
then replayed with the tool gone (the endpoint server shut down, the python file deleted, the MCP
command pointing nowhere) -> the same tool outputs and the same rewards. The model is a scripted
OpenAI-compatible server on 127.0.0.1 (its calls are known, so a replay is checked call by call);
tests/integration/test_cassette_model.py does the same with the tiny transformers model."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from typer.testing import CliRunner

from arft.app.evaluate import EvalResult, evaluate
from arft.app.regrade import regrade
from arft.cli.main import app as cli
from arft.config import load_job
from arft.data.splits import load_split
from arft.records import Rollout
from arft.tracing.store import RunStore
from tests.servers import chat_model_app, Reply, serve, tool_output

MCP_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py"


def model_app() -> FastAPI:
    """A model that makes the call its task names (``CALL <tool> <json args>``), then answers
    with the tool's output."""
    def reply(messages: list[dict[str, Any]]) -> Reply:
        last = messages[-1]
        if last["role"] == "tool":
            return f"Result: {last['content']}"
        _, tool, args = last["content"].split(" ", 2)
        return tool, args

    return chat_model_app(reply)


def write_job(tmp: Path, name: str, tools: list[dict[str, Any]], rows: list[dict[str, Any]],
              model_url: str, grader: dict[str, Any] | None = None) -> Path:
    (tmp / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = {"model": "m", "training_file": f"{name}.jsonl", "validation_file": f"{name}.jsonl",
           "method": {"type": "reinforcement", "reinforcement": {
               "grader": grader or {"type": "string_check", "name": "has", "input": "{{ sample.output_text }}",
                                    "reference": "{{ item.answer }}", "operation": "like"},
               "tools": tools, "max_episode_steps": 2}},
           "engine": {"type": "openai", "base_url": f"{model_url}/v1", "served_model": "m"},
           "rollout": {"max_turns": 2}}
    (tmp / f"{name}.json").write_text(json.dumps(job))
    return tmp / f"{name}.json"


def row(i: int, tool: str, args: dict[str, Any], answer: str) -> dict[str, Any]:
    return {"id": f"t{i}", "messages": [{"role": "user", "content": f"CALL {tool} {json.dumps(args)}"}],
            "answer": answer}


def eval_run(job: Path, out: Path, *flags: str) -> tuple[list[Rollout], dict[str, Any]]:
    result = CliRunner().invoke(cli, ["eval", str(job), "--samples", "2", "--out", str(out), *flags])
    assert result.exit_code == 0, result.output
    with RunStore(out / "arft.sqlite") as store:
        rollouts = store.rollouts()
    return rollouts, json.loads((out / "summary.json").read_text())


def by_place(rollouts: list[Rollout]) -> dict[tuple[str, int], tuple[list[str], float | None]]:
    """(task, sample) -> (the tool outputs, the reward)."""
    return {(r.task_id, r.sample_index): ([c.output for c in r.tool_calls], r.score.score if r.score else None)
            for r in rollouts}


def record_then_replay(tmp: Path, live_job: Path, replay_job: Path, stop: Any = None) -> dict[str, Any]:
    live, live_summary = eval_run(live_job, tmp / "live", "--record", str(tmp / "tape"))
    assert live_summary["cassette"]["recorded"] == len(live) == 4
    if stop is not None:
        stop()
    replayed, summary = eval_run(replay_job, tmp / "replay", "--replay", str(tmp / "tape"))
    assert summary["cassette"] == {"recorded": 0, "replayed": 4, "misses": 0, "live": 0}
    assert {r.status for r in replayed} == {"ok"}
    assert by_place(replayed) == by_place(live)  # the same outputs, the same rewards, bit for bit
    return {"live": live, "replay": replayed, "summary": summary}


def test_endpoint_replays_with_the_server_down_and_secrets_scrubbed(tmp_path: Path, monkeypatch: Any) -> None:
    token, secret = secrets.token_hex(6), "sek-" + secrets.token_hex(8)
    monkeypatch.setenv("CASSETTE_TOOL_TOKEN", secret)
    tools_app = FastAPI()

    @tools_app.post("/lookup")
    async def lookup(req: Request) -> dict[str, Any]:
        body = await req.json()  # the output echoes the secret header: it must not reach the cassette
        return tool_output(body, f"{json.loads(body['arguments'])['key']}:{token}:{req.headers['authorization']}")

    rows = [row(i, "lookup", {"key": f"k{i}", "api_key": secret}, f"k{i}:{token}") for i in range(2)]
    with serve(model_app()) as model_url:
        with serve(tools_app) as tools_url:
            spec = {"name": "lookup", "server_url": f"{tools_url}/lookup",
                    "headers": {"Authorization": "Bearer ${CASSETTE_TOOL_TOKEN}"}}
            job = write_job(tmp_path, "job", [spec], rows, model_url)
            live, _ = eval_run(job, tmp_path / "live", "--record", str(tmp_path / "tape"))
        # the server is shut down now: a live call would be an infra failure
        replayed, summary = eval_run(job, tmp_path / "replay", "--replay", str(tmp_path / "tape"))
    tape = (tmp_path / "tape" / "cassette.jsonl").read_text()
    assert secret not in tape and token in tape
    calls = [json.loads(line) for line in tape.splitlines() if '"type": "call"' in line]
    assert len(calls) == 4 and all(c["args"]["api_key"] == "***" and c["output"].endswith("Bearer ***")
                                   for c in calls)
    assert {(c["task_id"], c["sample_index"], c["run_id"], c["call_index"]) for c in calls} == {
        (f"t{i}", k, "live", 0) for i in range(2) for k in range(2)}
    assert summary["cassette"]["replayed"] == 4 and summary["cassette"]["misses"] == 0
    assert [r.score.score for r in replayed if r.score] == [1.0] * 4
    # What replays is the recorded output: the same but for the secret the tool echoed, scrubbed.
    masked = {k: ([o.replace(secret, "***") for o in outs], reward) for k, (outs, reward) in by_place(live).items()}
    assert by_place(replayed) == masked


def test_python_tool_replays_with_its_file_gone(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(
        "import secrets\n\ndef stamp(text: str) -> str:\n    \"\"\"Stamp it.\n\n    Args:\n"
        "        text: The text.\n    \"\"\"\n    return text + '-' + secrets.token_hex(4)\n")
    rows = [row(i, "stamp", {"text": f"x{i}"}, f"x{i}-") for i in range(2)]
    with serve(model_app()) as model_url:
        job = write_job(tmp_path, "job", [{"type": "python", "function": "tools.py:stamp"}], rows, model_url)
        run = record_then_replay(tmp_path, job, job, stop=(tmp_path / "tools.py").unlink)
    assert all(r.score and r.score.score == 1.0 for r in run["replay"])


async def eval_direct(job_file: Path, out: Path, cassette: dict[str, Any]) -> EvalResult:
    """``arft eval`` without the CLI runner (whose captured stderr an MCP server cannot inherit)."""
    job = load_job(job_file, [f"rollout.tool_cassette={json.dumps(cassette)}"])
    return await evaluate(job, load_split(job, "validation", None), 2, out)


async def test_mcp_tool_replays_without_starting_the_server(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(6)
    rows = [row(i, "stamp", {"text": f"m{i}"}, f"m{i} {token}") for i in range(2)]
    mcp = {"type": "mcp", "command": [sys.executable, str(MCP_SERVER)], "env": {"ARFT_TEST_TOKEN": token}}
    tape = str(tmp_path / "tape")
    with serve(model_app()) as model_url:
        job = write_job(tmp_path, "job", [mcp], rows, model_url)
        gone = write_job(tmp_path, "gone", [{**mcp, "command": [str(tmp_path / "no-such-server")]}], rows, model_url)
        live = await eval_direct(job, tmp_path / "live", {"mode": "record", "path": tape})
        replayed = await eval_direct(gone, tmp_path / "replay", {"mode": "replay", "path": tape})
    assert live.cassette is not None and live.cassette.recorded == 4
    assert replayed.cassette is not None and (replayed.cassette.replayed, replayed.cassette.misses) == (4, 0)
    assert by_place(replayed.rollouts) == by_place(live.rollouts)
    assert all(r.score and r.score.score == 1.0 for r in replayed.rollouts)  # the token came from the tape


def test_shell_workspace_files_replay_for_the_grader(tmp_path: Path) -> None:
    """The shell writes a file the grader checks: a replay must leave the same file behind."""
    rows = [row(i, "shell", {"command": f"echo w{i}-$RANDOM$RANDOM > out.txt; mkdir -p d; cp out.txt d/; "
                                        "cat out.txt"}, "") for i in range(2)]
    grader = {"type": "builtin", "name": "tests_pass", "command": "grep -q '^w[0-9]-[0-9]' d/out.txt",
              "parser": "exit_code"}
    with serve(model_app()) as model_url:
        job = write_job(tmp_path, "job", [{"type": "shell"}], rows, model_url, grader)
        run = record_then_replay(tmp_path, job, job)
    assert all(r.score and r.score.score == 1.0 for r in run["replay"])
    tape = [json.loads(line) for line in (tmp_path / "tape" / "cassette.jsonl").read_text().splitlines()]
    files = [c["files"] for c in tape if c["type"] == "call"]
    assert all({f["path"] for f in fs} == {"out.txt", "d/out.txt"} for fs in files)


def test_miss_is_infra_failed_and_counted_then_live(tmp_path: Path) -> None:
    seen: list[str] = []
    tools_app = FastAPI()

    @tools_app.post("/lookup")
    async def lookup(req: Request) -> dict[str, Any]:
        body = await req.json()
        seen.append(json.loads(body["arguments"])["key"])
        return tool_output(body, "v-" + json.loads(body["arguments"])["key"])

    rows = [row(0, "lookup", {"key": "a"}, "v-a")]
    more = [*rows, row(1, "lookup", {"key": "new"}, "v-new")]
    with serve(model_app()) as model_url, serve(tools_app) as tools_url:
        spec = [{"name": "lookup", "server_url": f"{tools_url}/lookup"}]
        first = write_job(tmp_path, "job", spec, rows, model_url)
        eval_run(first, tmp_path / "live", "--record", str(tmp_path / "tape"))
        job = write_job(tmp_path, "more", spec, more, model_url)
        missed, summary = eval_run(job, tmp_path / "miss", "--replay", str(tmp_path / "tape"))
        assert seen == ["a", "a"]  # the replay called nothing
        live, live_summary = eval_run(job, tmp_path / "mixed", "--replay", str(tmp_path / "tape"),
                                      "--replay-miss", "live", "--record", str(tmp_path / "more-tape"))
    assert summary["cassette"] == {"recorded": 0, "replayed": 2, "misses": 2, "live": 0}
    failed = [r for r in missed if r.task_id == "t1"]
    assert [r.status for r in failed] == ["infra_failed"] * 2 and all(r.score is None for r in failed)
    assert all("cassette miss" in (r.error or "") and '{"key":"new"}' in (r.error or "") for r in failed)
    assert summary["n_infra_failed"] == 2 and summary["reward"]["n_graded"] == 2  # left out, not zeros
    assert live_summary["cassette"] == {"recorded": 2, "replayed": 2, "misses": 0, "live": 2}
    assert seen == ["a", "a", "new", "new"] and {r.status for r in live} == {"ok"}
    added = (tmp_path / "more-tape" / "cassette.jsonl").read_text()
    assert added.count('"type": "call"') == 2 and '"new"' in added
    # Re-grading the run with the misses: their rollouts show as failed, never as 0.
    grader = {"type": "string_check", "name": "eq", "input": "{{ sample.output_text }}",
              "reference": "Result: v-a", "operation": "eq"}
    regraded = asyncio.run(regrade(tmp_path / "miss", grader, tmp_path))
    tasks = {t.task_id: t for t in regraded.tasks}
    t1 = tasks["t1"]
    assert (t1.old_mean, t1.new_mean, t1.old_failed, t1.delta) == (None, None, 2, None)
    assert (tasks["t0"].old_mean, tasks["t0"].new_mean) == (1.0, 1.0) and regraded.new_failed == 2


def test_grade_replay_compares_old_and_new_per_task(tmp_path: Path) -> None:
    rows = [row(i, "stamp", {"text": f"x{i}"}, f"x{i}-") for i in range(2)]
    (tmp_path / "tools.py").write_text("def stamp(text: str) -> str:\n    \"\"\"Stamp.\n\n    Args:\n"
                                       "        text: The text.\n    \"\"\"\n    return text + '-ok'\n")
    with serve(model_app()) as model_url:
        job = write_job(tmp_path, "job", [{"type": "python", "function": "tools.py:stamp"}], rows, model_url)
        eval_run(job, tmp_path / "run")
    new = {"type": "string_check", "name": "strict", "input": "{{ sample.output_text }}",
           "reference": "Result: x0-ok", "operation": "eq"}
    (tmp_path / "new.json").write_text(json.dumps(new))
    out = CliRunner().invoke(cli, ["grade", "--replay", str(tmp_path / "run"), "--grader",
                                   str(tmp_path / "new.json"), "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout.strip().splitlines()[-1])
    tasks = {t["task_id"]: t for t in result["tasks"]}
    assert tasks["t0"]["old_mean"] == 1.0 and tasks["t0"]["new_mean"] == 1.0 and tasks["t0"]["delta"] == 0.0
    assert tasks["t1"]["old_mean"] == 1.0 and tasks["t1"]["new_mean"] == 0.0 and tasks["t1"]["delta"] == -1.0
    assert result["rollouts"] == 4 and result["old_mean"] == 1.0 and result["new_mean"] == 0.5
    table = CliRunner().invoke(cli, ["grade", "--replay", str(tmp_path / "run"), "--grader",
                                     str(tmp_path / "new.json")])
    assert table.exit_code == 0 and "overall" in table.output and "-1.0000" in table.output


@pytest.mark.parametrize("flags, says", [(["--replay-miss", "live"], "--replay-miss needs --replay"),
                                         (["--replay", "nowhere-at-all"], "no cassette at")])
def test_flags_errors(tmp_path: Path, flags: list[str], says: str) -> None:
    job = write_job(tmp_path, "job", [], [row(0, "x", {}, "")], "http://127.0.0.1:9")
    out = CliRunner().invoke(cli, ["eval", str(job), "--out", str(tmp_path / "run"), *flags])
    assert out.exit_code != 0 and says in out.output
