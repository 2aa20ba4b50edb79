"""`arft sft` on a tiny model: demonstrations from a JSONL or an eval run, the loss falls, resume
is exact, and `training.init_from` starts `arft train` from the warm start's weights."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi import FastAPI, Request

from arft.app.evaluate import evaluate
from arft.app.policy import init_from_run
from arft.app.sft import SftOptions, sft
from arft.app.sft_data import load_demonstrations, select
from arft.app.train import train
from arft.config import OpenAIEngineSpec, load_job
from arft.data.splits import load_split
from arft.engines.scripted import ScriptedEngine
from arft.chat.formats import ChatFormat
from arft.pyfile import load_file
from arft.rollout.demonstration import replay, split_at_first_assistant
from arft.rollout.loop import task_tool_schemas
from arft.tools.python_fn import PythonTool
from arft.tracing.run_dir import RunDir
from tests.integration.test_train import adapter, tiny
from tests.servers import chat_completion, serve
from tests.training import LengthGrader

TOOLS = '''
def lookup(key: str) -> str:
    """Look a code up.

    Args:
        key: The key.
    """
    return f"code of {key} is {len(key)}"
'''


def _call(key: str) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "lookup", "arguments": json.dumps({"key": key})}}]}


def _demo(i: int, tool: str = "lookup") -> dict[str, Any]:
    key = f"k{i}"
    call = _call(key)
    call["tool_calls"][0]["function"]["name"] = tool
    return {"id": f"t{i}", "messages": [
        {"role": "user", "content": f"What is the code of {key}?"}, call,
        {"role": "tool", "tool_call_id": "c1", "content": f"code of {key} is {len(key)}"},
        {"role": "assistant", "content": f"The code is {len(key)}."}]}


def write_job(tmp: Path, **training: Any) -> Path:
    rows = [{"id": f"t{i}", "messages": [{"role": "user", "content": f"What is the code of k{i}?"}]}
            for i in range(8)]
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    (tmp / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[6:]))
    (tmp / "tools.py").write_text(TOOLS)
    demos = [_demo(i) for i in range(4)] + [_demo(4, tool="delete_everything"), _demo(6)]
    (tmp / "demos.jsonl").write_text("".join(json.dumps(d) + "\n" for d in demos))
    job = {"model": "smollm2-135m-instruct", "training_file": "train.jsonl", "validation_file": "val.jsonl",
           "seed": 3, "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "string_check", "name": "unused", "input": "x", "reference": "x",
                          "operation": "eq"},
               "tools": [{"type": "python", "function": "tools.py:lookup"}],
               "hyperparameters": {"batch_size": 2, "eval_interval": 5, "eval_samples": 2}}},
           "sampling": {"max_new_tokens": 8},
           "rollout": {"max_turns": 2, "max_tokens": 1024, "concurrency": 4},
           "training": {"group_size": 2, "max_steps": 1, "checkpoint_every": 1, "learning_rate": 0.02,
                        "micro_batch_size": 4, "bf16_autocast": False, "lora": {"r": 4, "alpha": 8},
                        **training}}
    (tmp / "job.json").write_text(json.dumps(job))
    return tmp / "job.json"


KW: dict[str, Any] = dict(grader=LengthGrader(), max_batch_size=1)
OPTS = SftOptions(epochs=3, batch_size=2)


async def test_sft_from_conversations_learns_and_resumes_exactly(tmp_path: Path, tokenizer: Any) -> None:
    job = load_job(write_job(tmp_path))
    a = await sft(job, tmp_path / "demos.jsonl", tmp_path / "a", options=OPTS, model=tiny(tokenizer),
                  tokenizer=tokenizer, **KW)
    assert a.demos == 4 and a.recorded == 0 and a.steps == 6 and len(a.history) == 6
    assert a.dropped == {"a validation task (it would leak into the evaluation)": 1,
                         "calls a tool the job does not have (delete_everything)": 1}
    nll = [m["sft/nll"] for m in a.history]
    assert sum(nll[-2:]) < sum(nll[:2])  # it imitates: the last epoch's loss is below the first's
    assert set(a.evals) == {0, 6}
    with RunDir(tmp_path / "a").open_store() as store:
        kinds = {r["run_id"]: r["kind"] for r in store.runs()}
    assert kinds == {"sft": "sft", "sft:eval-000000": "eval", "sft:eval-000006": "eval"}
    assert json.loads((tmp_path / "a" / "sft.json").read_text())["demos"] == 4
    # Kill after step 3 (simulated: its checkpoint is the latest) and resume: the same weights.
    b = tmp_path / "b"
    shutil.copytree(tmp_path / "a", b)
    (b / "checkpoints" / "latest").write_text("step-000003")
    await sft(job, tmp_path / "demos.jsonl", b, options=OPTS, resume=True, model=tiny(tokenizer),
              tokenizer=tokenizer, **KW)
    for k, v in adapter(tmp_path / "a").items():
        assert torch.equal(v, adapter(b)[k]), k
    # What the first process recorded after step 3 is re-recorded once, not kept beside it.
    def nll_steps(run: Path) -> list[int]:
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return sorted(r["step"] for r in rows if "sft/nll" in r)
    assert nll_steps(b) == nll_steps(tmp_path / "a") == [1, 2, 3, 4, 5, 6]
    with RunDir(b).open_store() as store:
        assert {r["run_id"] for r in store.runs()} == set(kinds)
        assert len(store.rollouts("sft:eval-000006")) == len(store.rollouts("sft:eval-000000"))


async def test_init_from_starts_training_from_the_warm_start(tmp_path: Path, tokenizer: Any) -> None:
    job = load_job(write_job(tmp_path))
    warm = await sft(job, tmp_path / "demos.jsonl", tmp_path / "warm", options=OPTS, model=tiny(tokenizer),
                     tokenizer=tokenizer, **KW)
    rl_job = load_job(write_job(tmp_path, init_from="warm"))
    rl = await train(rl_job, tmp_path / "rl", model=tiny(tokenizer), tokenizer=tokenizer, **KW)
    # The RL baseline samples with the eval seeds from the warm start's weights: the same rollouts.
    with RunDir(tmp_path / "warm").open_store() as s1, RunDir(tmp_path / "rl").open_store() as s2:
        after_sft = [r.token_ids for r in s1.rollouts(f"sft:eval-{warm.steps:06d}")]
        rl_baseline = [r.token_ids for r in s2.rollouts("train:eval-000000")]
    assert after_sft == rl_baseline
    assert rl.evals[0].reward.mean == warm.evals[warm.steps].reward.mean


async def test_init_from_refuses_weights_that_do_not_fit(tmp_path: Path, tokenizer: Any) -> None:
    from arft.app.policy import policy_engine
    from arft.trainer.learner import Learner

    job = load_job(write_job(tmp_path))
    await sft(job, tmp_path / "demos.jsonl", tmp_path / "warm", options=SftOptions(epochs=1, evaluate=False),
              model=tiny(tokenizer), tokenizer=tokenizer, **KW)
    other = load_job(write_job(tmp_path, lora={"r": 8, "alpha": 16}))
    policy, _, _ = policy_engine(other, tiny(tokenizer), tokenizer, 1)
    learner = Learner(policy, other.training, 1e-3, 1, 1.0, 0)
    with pytest.raises(ValueError, match="different adapter"):
        init_from_run(learner, other, tmp_path / "warm")
    with pytest.raises(ValueError, match="no checkpoint"):
        init_from_run(learner, other, tmp_path / "nowhere")


async def test_best_of_k_from_an_eval_run_uses_recorded_tokens(tmp_path: Path, tokenizer: Any) -> None:
    job = load_job(write_job(tmp_path))
    counter = itertools.count()

    def reply(_ids: Any) -> str:  # answers of growing length: LengthGrader gives each a different reward
        return "ok " * (next(counter) % 5 + 1) + "<|im_end|>"

    engine = ScriptedEngine(tokenizer, reply)
    await evaluate(job, load_split(job, "train"), 3, tmp_path / "teacher", engine=engine, grader=LengthGrader(),
                   split="train")
    demos = load_demonstrations(job, tmp_path / "teacher")
    assert len(demos.demos) == 18
    best = select(demos, best_of=1)
    assert len(best.demos) == 6 and best.dropped["not among the best 1 of its task"] == 12
    by_task: dict[str, list[float]] = {}
    for d in demos.demos:
        by_task.setdefault(d.task_id, []).append(d.reward or 0.0)
    assert all(d.reward == max(by_task[d.task_id]) for d in best.demos)
    high = select(demos, min_reward=0.3)
    assert high.demos and all((d.reward or 0) >= 0.3 for d in high.demos)
    r = await sft(job, tmp_path / "teacher", tmp_path / "s", options=SftOptions(epochs=1, best_of=1, evaluate=False),
                  model=tiny(tokenizer), tokenizer=tokenizer, **KW)
    assert r.demos == 6 and r.recorded == 6  # token in, token out: the engine's own ids


async def test_nothing_left_says_why(tmp_path: Path, tokenizer: Any) -> None:
    job = load_job(write_job(tmp_path))
    (tmp_path / "bad.jsonl").write_text(json.dumps(_demo(1, tool="nope")) + "\n")
    with pytest.raises(ValueError, match=r"no demonstration is left(.|\n)*1 x calls a tool the job does not have"):
        await sft(job, tmp_path / "bad.jsonl", tmp_path / "x", options=OPTS, model=tiny(tokenizer),
                  tokenizer=tokenizer, **KW)
    with pytest.raises(ValueError, match="no such file or run directory"):
        await sft(job, tmp_path / "missing.jsonl", tmp_path / "y", options=OPTS, model=tiny(tokenizer),
                  tokenizer=tokenizer, **KW)


async def test_expert_iteration_samples_keeps_the_best_and_starts_rl_from_it(tmp_path: Path, tokenizer: Any) -> None:
    from arft.app.expert_iteration import WarmStart, expert_iteration

    job = load_job(write_job(tmp_path))
    plan = WarmStart(samples=3, tasks=4, sft=SftOptions(epochs=1, batch_size=2, best_of=1, evaluate=False))
    rl_job, warm = await expert_iteration(job, tmp_path / "rl", plan, model=tiny(tokenizer), tokenizer=tokenizer, **KW)
    assert rl_job.training.init_from == str(tmp_path / "rl" / "warm-start" / "sft")
    with RunDir(tmp_path / "rl" / "warm-start" / "samples").open_store() as store:
        rewards: dict[str, list[float]] = {}
        for r in store.rollouts("samples"):
            rewards.setdefault(r.task_id, []).append(r.reward or 0.0)
    assert sum(len(v) for v in rewards.values()) == 12
    floor = min(min(v) for v in rewards.values())
    # One demonstration per task that has a sample above the worst one: its best.
    assert warm.demos == sum(1 for v in rewards.values() if max(v) > floor) and warm.recorded == warm.demos
    rl = await train(rl_job, tmp_path / "rl", model=tiny(tokenizer), tokenizer=tokenizer, **KW)
    assert rl.steps == 1 and 0 in rl.evals


async def test_expert_iteration_samples_with_the_rescue_hint_and_imitates_without_it(
        tmp_path: Path, tokenizer: Any) -> None:
    from arft.app.expert_iteration import WarmStart, expert_iteration

    job = load_job(write_job(tmp_path, rescue={"hint": "Hint: call lookup with the key."}))
    plan = WarmStart(samples=2, tasks=2, sft=SftOptions(epochs=1, batch_size=2, best_of=1, evaluate=False))
    _, warm = await expert_iteration(job, tmp_path / "rl", plan, model=tiny(tokenizer), tokenizer=tokenizer, **KW)
    with RunDir(tmp_path / "rl" / "warm-start" / "samples").open_store() as store:
        samples = store.rollouts("samples")
    assert len(samples) == 4
    for r in samples:  # the policy saw the hint; the record (and so the grader and the sft) did not
        assert "Hint: call lookup with the key." in tokenizer.decode(list(r.token_ids[:r.prompt_len]))
        assert all("Hint:" not in (m.content or "") for m in r.messages)
    # Imitated from the job's own prompts: the recorded (hinted) ids cannot be used as they are.
    assert warm.demos >= 1 and warm.recorded == 0


async def test_teacher_behind_an_openai_endpoint_warm_starts_the_student(tmp_path: Path, tokenizer: Any) -> None:
    """A teacher's `arft eval` run through `engine: openai` (no token ids): its graded successes
    are rendered in the student's own format, the call and the answer as the assistant's tokens."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(req: Request) -> dict[str, Any]:
        body = await req.json()
        last = body["messages"][-1]
        if last["role"] == "tool":
            return chat_completion(body, {"role": "assistant", "content": f"It is {last['content'][-1]}."})
        key = last["content"].split()[-1].rstrip("?")
        return chat_completion(body, _call(key), "tool_calls")

    job = load_job(write_job(tmp_path))
    with serve(app) as url:
        teacher = job.model_copy(update={"engine": OpenAIEngineSpec(
            type="openai", base_url=f"{url}/v1", served_model="teacher")})
        await evaluate(teacher, load_split(job, "train"), 1, tmp_path / "teacher", grader=LengthGrader(), split="train")
    demos = load_demonstrations(job, tmp_path / "teacher").demos
    assert len(demos) == 6 and all(not d.token_ids for d in demos)
    assert [m.role for m in demos[0].turns] == ["assistant", "tool", "assistant"]
    r = await sft(job, tmp_path / "teacher", tmp_path / "student", options=SftOptions(epochs=1, evaluate=False),
                  model=tiny(tokenizer), tokenizer=tokenizer, **KW)
    assert r.demos == 6 and r.recorded == 0
    # What the student learns: exactly the teacher's call and answer, in its own call syntax.
    tools = {"lookup": PythonTool.from_function(load_file(tmp_path / "tools.py", "t").lookup)}
    d = demos[0]
    assert split_at_first_assistant(d.prompt) == (d.prompt, ())  # the task's prompt, no teacher turn in it
    task = next(t for t in load_split(job, "train") if t.id == d.task_id)
    tokens = await replay(ChatFormat(tokenizer), d, task_tool_schemas(task, tools), "auto", 1024)
    learned = tokenizer.decode([i for i, m in zip(tokens.token_ids, tokens.loss_mask) if m])
    key = "k" + d.task_id[1:]
    assert learned == ('<tool_call>\n{"name": "lookup", "arguments": {"key": "%s"}}\n</tool_call>'
                       "It is %d.<|im_end|>" % (key, len(key)))


async def test_merge_exports_a_warm_start(tmp_path: Path, tokenizer: Any) -> None:
    from transformers import AutoModelForCausalLM

    from arft.trainer.merge import merge_run

    job = load_job(write_job(tmp_path))
    await sft(job, tmp_path / "demos.jsonl", tmp_path / "warm", options=SftOptions(epochs=1, evaluate=False),
              model=tiny(tokenizer), tokenizer=tokenizer, **KW)
    merge_run(tmp_path / "warm", tmp_path / "merged", model=tiny(tokenizer), tokenizer=tokenizer)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert merged.config.vocab_size == len(tokenizer)
