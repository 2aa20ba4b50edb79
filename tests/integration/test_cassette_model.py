"""Tool cassettes with real sampling and a real example: the tiny transformers model (seeded)
recorded against a real HTTP tool, then replayed with the server shut down -> the same sampled
tokens and rewards, bit for bit; and examples/fix_tests, whose grader runs the tests on the
rollout's workspace, replayed with the tool files' changes applied from the cassette."""

from __future__ import annotations

import json
import random
import re
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from arft.app.evaluate import EvalResult, evaluate
from arft.config import load_job
from arft.data.splits import load_split
from arft.engines.transformers.engine import TransformersEngine
from arft.records import Rollout
from tests.servers import chat_model_app, recording_app, Reply, serve, tool_output

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def cassette(spec: dict[str, Any]) -> str:
    return f"rollout.tool_cassette={json.dumps(spec)}"


def same(a: list[Rollout], b: list[Rollout], exact: bool = False) -> None:
    """Rollout by rollout (task, sample): the same tokens, tool outputs and reward. Logprobs are
    bit for bit the same only ``exact`` (one rollout at a time, or lockstep rounds): their last
    bits depend on which rows share a decode step, which the tools' timing changes, so a sampled
    token on a near-tie can (rarely) flip (docs/replay.md). Not ``exact``: at most one rollout
    flips, and it agrees with its replay up to a token the policy sampled."""
    def key(r: Rollout) -> tuple[str, int]:
        return r.task_id, r.sample_index
    flipped = []
    for x, y in zip(sorted(a, key=key), sorted(b, key=key), strict=True):
        assert key(x) == key(y)
        if not exact and x.token_ids != y.token_ids:
            n = next(i for i, (s, t) in enumerate(zip(x.token_ids, y.token_ids)) if s != t)
            assert x.loss_mask[n] == 1 and y.loss_mask[n] == 1  # a sampled token, not a tool's output
            assert x.logprobs[:n] == pytest.approx(y.logprobs[:n], abs=1e-4)
            flipped.append(key(x))
            continue
        assert x.token_ids == y.token_ids
        assert x.logprobs == y.logprobs if exact else x.logprobs == pytest.approx(y.logprobs, abs=1e-4)
        assert [c.output for c in x.tool_calls] == [c.output for c in y.tool_calls]
        assert (x.score.score if x.score else None) == (y.score.score if y.score else None)
    assert len(flipped) <= 1, f"{flipped}: more than one rollout's sampled tokens differ from the replay's"


def lookup_job(tmp: Path, url: str, token: str, **rollout: Any) -> Path:
    """Three rows that must call ``lookup`` (an endpoint at ``url``) first; seeded sampling."""
    rows = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"Look up key {i}."}], "answer": token}
            for i in range(3)]
    (tmp / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = {"model": "smollm2-135m-instruct", "training_file": "val.jsonl", "validation_file": "val.jsonl",
           "seed": 3, "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "text_similarity", "name": "sim", "input": "{{ sample.output_text }}",
                          "reference": "{{ item.answer }}", "evaluation_metric": "fuzzy_match"},
               "tools": [{"name": "lookup", "server_url": f"{url}/lookup",
                          "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}],
               "max_episode_steps": 2}},
           "sampling": {"max_new_tokens": 24, "seed": 7},
           "rollout": {"max_turns": 2, "max_tokens": 1024, "tool_choice": "required", **rollout}}
    (tmp / "job.json").write_text(json.dumps(job))
    return tmp / "job.json"


def slow_answer(seen: list[dict[str, Any]], token: str) -> Any:
    """The tool's answer after a random wait, so live and replayed calls return at other times."""
    rng = random.Random(len(seen))

    def answer(body: dict[str, Any]) -> Any:
        time.sleep(rng.uniform(0, 0.02))
        return tool_output(body, f"v{len(seen)}-{token}")
    return answer


@pytest.mark.parametrize("concurrency,schedule", [(1, "continuous"), (32, "continuous"), (32, "lockstep")])
async def test_tiny_model_replays_bit_for_bit(tmp_path: Path, tokenizer: Any, tiny_model: Any,
                                              concurrency: int, schedule: str) -> None:
    token = secrets.token_hex(6)
    seen: list[dict[str, Any]] = []
    with serve(recording_app("/lookup", seen, slow_answer(seen, token))) as url:
        lookup_job(tmp_path, url, token, concurrency=concurrency, schedule=schedule)
        live = await _tiny_eval(tmp_path, tokenizer, tiny_model, {"mode": "record", "path": "tape"}, "live")
    assert seen and live.cassette is not None and live.cassette.recorded == len(seen)
    replayed = await _tiny_eval(tmp_path, tokenizer, tiny_model, {"mode": "replay", "path": "tape"}, "replay")
    assert replayed.cassette is not None and replayed.cassette.misses == 0
    assert replayed.cassette.replayed == len(seen)
    same(live.rollouts, replayed.rollouts, exact=concurrency == 1 or schedule == "lockstep")
    assert any(token in c.output for r in replayed.rollouts for c in r.tool_calls)  # answered from the tape


async def test_a_lockstep_training_run_replays_to_the_same_eval_curve_and_adapter(tmp_path: Path,
                                                                                   tokenizer: Any) -> None:
    """Two steps of training (an evaluation before and after each), recorded against the slow tool,
    then replayed with the server gone: the same eval rewards and a bit-identical adapter."""
    from arft.app.train import train
    from tests.integration.test_train import adapter, tiny

    token = secrets.token_hex(6)
    seen: list[dict[str, Any]] = []
    overrides = ["training.max_steps=2", "training.group_size=2", "training.micro_batch_size=4",
                 "training.bf16_autocast=false", "training.lora={\"r\": 4, \"alpha\": 8}",
                 "training.learning_rate=0.05", "method.reinforcement.hyperparameters.batch_size=2",
                 "method.reinforcement.hyperparameters.eval_interval=1"]
    runs = {}
    with serve(recording_app("/lookup", seen, slow_answer(seen, token))) as url:
        job_file = lookup_job(tmp_path, url, token, concurrency=4, schedule="lockstep")
        runs["live"] = await train(load_job(job_file, [*overrides, cassette({"mode": "record", "path": "tape"})]),
                                   tmp_path / "live", model=tiny(tokenizer), tokenizer=tokenizer)
    runs["replay"] = await train(load_job(job_file, [*overrides, cassette({"mode": "replay", "path": "tape"})]),
                                 tmp_path / "replay", model=tiny(tokenizer), tokenizer=tokenizer)
    curves = {name: {step: e.reward.mean for step, e in r.evals.items()} for name, r in runs.items()}
    assert seen and set(curves["live"]) == {0, 1, 2} and curves["live"] == curves["replay"]
    assert runs["replay"].history[-1]["cassette/replayed"] > 0 and runs["replay"].history[-1]["cassette/misses"] == 0
    live, replayed = adapter(tmp_path / "live"), adapter(tmp_path / "replay")
    assert live.keys() == replayed.keys() and all(live[k].equal(replayed[k]) for k in live)


async def _tiny_eval(tmp: Path, tokenizer: Any, model: Any, spec: dict[str, Any], out: str) -> EvalResult:
    job = load_job(tmp / "job.json", [cassette(spec)])
    engine = TransformersEngine(model, tokenizer, max_batch_size=8)
    try:
        return await evaluate(job, load_split(job, "validation", None), 2, tmp / out, engine=engine)
    finally:
        await engine.aclose()


def fixer_app() -> FastAPI:
    """A model that fixes the line the task names, runs the tests, then answers."""
    def reply(messages: list[dict[str, Any]]) -> Reply:
        last = messages[-1]
        if last["role"] != "tool":
            path, old, new = re.search(r"line `(.+?)` in (\S+?); it should be `(.+?)`", last["content"]).group(2, 1, 3)  # type: ignore[union-attr]
            return "replace", json.dumps({"path": path, "old": old, "new": new})
        if messages[-2]["tool_calls"][0]["function"]["name"] == "run_tests":
            return "Fixed the bug; the tests pass."
        return "run_tests", "{}"

    return chat_model_app(reply)


async def test_fix_tests_grader_reads_the_replayed_workspace(tmp_path: Path) -> None:
    tape = str(tmp_path / "tape")
    with serve(fixer_app()) as url:
        base = [f"engine={json.dumps({'type': 'openai', 'base_url': f'{url}/v1', 'served_model': 'm'})}"]

        async def run(spec: dict[str, Any], out: str) -> EvalResult:
            job = load_job(EXAMPLES / "fix_tests" / "job.yaml", [*base, cassette(spec)])
            return await evaluate(job, load_split(job, "validation", 2), 1, tmp_path / out)

        live = await run({"mode": "record", "path": tape}, "live")
        replayed = await run({"mode": "replay", "path": tape}, "replay")
    assert [r.score.score > 0.9 for r in live.rollouts if r.score] == [True, True]  # fixed, tested, answered
    same(live.rollouts, replayed.rollouts)
    assert replayed.cassette is not None and (replayed.cassette.replayed, replayed.cassette.misses) == (4, 0)
    calls = [json.loads(line) for line in Path(tape, "cassette.jsonl").read_text().splitlines()]
    edits = [c for c in calls if c.get("tool") == "replace"]
    assert len(edits) == 2 and all(len(c["files"]) == 1 and c["files"][0]["op"] == "write" for c in edits)
