"""`arft serve` for real: the FastAPI app on 127.0.0.1, called with the official `openai` client
(models, auth, errors, a multi-turn tool conversation streamed and not), a trained run's tuned
agent beside its base, and the server as the judge of a score_model grader and as the teacher
behind `engine: openai`. Scripted engines where the words must be known; the tiny model for the
trained run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import openai
import pytest
import torch

from arft.app.evaluate import evaluate
from arft.app.serve.chat import ServedModel
from arft.app.serve.models import served_models
from arft.app.serve.server import build_app
from arft.app.train import train
from arft.config import load_job
from arft.data.dataset import load_tasks
from arft.engines.scripted import ScriptedEngine
from arft.graders.base import build_sample
from arft.graders.registry import build_grader
from arft.chat.formats import ChatFormat
from arft.chat.constraints import JsonGrammar
from tests.integration.test_train import tiny, write_job
from tests.servers import serve
from tests.training import LengthGrader
from tests.unit.graders.helpers import make_rollout

EOS = "<|im_end|>"
LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}


def call(name: str, **args: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


class Script:
    """Replies in turn, whatever the prompt; keeps every prompt it was given (as text)."""

    def __init__(self, tokenizer: Any, *replies: str) -> None:
        self.tokenizer, self.replies, self.prompts = tokenizer, list(replies), []

    def __call__(self, ids: Any) -> str:
        self.prompts.append(self.tokenizer.decode(list(ids)))
        return self.replies.pop(0)


class JsonScripted(ScriptedEngine):
    """A scripted engine that accepts whole-reply JSON grammars (records them; writes its script)."""

    supports_constraints = True

    def __init__(self, tokenizer: Any, replies: Any) -> None:
        super().__init__(tokenizer, replies)
        self.grammars: list[Any] = []

    def check_grammar(self, grammar: Any) -> None:
        self.grammars.append(grammar)


@pytest.fixture
def server(tokenizer: Any) -> Iterator[tuple[str, Script]]:
    script = Script(tokenizer)
    model = ServedModel("agent", ScriptedEngine(tokenizer, script), ChatFormat(tokenizer))
    with serve(build_app([model], api_key="sk-local")) as url:
        yield url + "/v1", script


def client(url: str, key: str = "sk-local") -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0)


def test_models_auth_and_errors_in_the_openai_shape(server: tuple[str, Script]) -> None:
    url, _ = server
    assert [m.id for m in client(url).models.list()] == ["agent"]
    assert client(url).models.retrieve("agent").owned_by == "arft"
    with pytest.raises(openai.AuthenticationError, match="Bearer"):
        client(url, "sk-wrong").models.list()
    with pytest.raises(openai.NotFoundError, match="served: \\['agent'\\]"):
        client(url).chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as err:
        client(url).chat.completions.create(model="agent", messages=[{"role": "robot", "content": "hi"}])
    assert err.value.body["param"] == "messages" and "role 'robot'" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError, match="frequency_penalty"):
        client(url).chat.completions.create(model="agent", messages=[{"role": "user", "content": "hi"}],
                                            frequency_penalty=1.0)


@pytest.mark.parametrize("stream", [False, True])
def test_a_multi_turn_tool_conversation_through_the_official_client(server: tuple[str, Script],
                                                                   stream: bool) -> None:
    url, script = server
    script.replies += [call("lookup", key="a"), "The code for a is 7." + EOS]
    c = client(url)
    messages: list[Any] = [{"role": "user", "content": "What is the code for a?"}]

    def ask() -> tuple[Any, str]:
        if not stream:
            r = c.chat.completions.create(model="agent", messages=messages, tools=[LOOKUP])
            return r.choices[0].message, r.choices[0].finish_reason
        content, calls, finish = "", {}, None
        for chunk in c.chat.completions.create(model="agent", messages=messages, tools=[LOOKUP], stream=True):
            choice = chunk.choices[0]
            content += choice.delta.content or ""
            for tc in choice.delta.tool_calls or ():
                slot = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
            finish = choice.finish_reason or finish
        message = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = [{"id": s["id"], "type": "function",
                                      "function": {"name": s["name"], "arguments": s["arguments"]}} for s in calls.values()]
        return message, finish

    first, finish = ask()
    tool_calls = first["tool_calls"] if stream else first.tool_calls
    name = tool_calls[0]["function"]["name"] if stream else tool_calls[0].function.name
    args = tool_calls[0]["function"]["arguments"] if stream else tool_calls[0].function.arguments
    call_id = tool_calls[0]["id"] if stream else tool_calls[0].id
    assert finish == "tool_calls" and name == "lookup" and json.loads(args) == {"key": "a"}
    messages += [first, {"role": "tool", "tool_call_id": call_id, "content": "a=7 (stamp-5e1f)"}]
    second, finish = ask()
    assert finish == "stop"
    assert (second["content"] if stream else second.content) == "The code for a is 7."
    assert "stamp-5e1f" in script.prompts[1] and "stamp-5e1f" not in script.prompts[0]  # the tool result reached the model
    assert "What is the code for a?" in script.prompts[1]


async def test_a_trained_run_is_served_beside_its_base(tmp_path: Path, tokenizer: Any) -> None:
    job = load_job(write_job(tmp_path))
    job = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": 1})})
    await train(job, tmp_path / "calc", model=tiny(tokenizer), tokenizer=tokenizer, grader=LengthGrader(),
                max_batch_size=1)
    base = tiny(tokenizer)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    models = served_models(str(tmp_path / "calc"), model=base, tokenizer=tokenizer)
    try:
        assert [m.name for m in models] == ["calc", "smollm2-135m-instruct"]
        tuned, plain = (m.engine.model for m in models)  # type: ignore[attr-defined]
        assert all(torch.equal(before[k], v) for k, v in plain.state_dict().items())  # the base is untouched
        assert any(not torch.equal(before[k], v) for k, v in tuned.state_dict().items())  # the adapter is merged in
        assert models[0].constrain and models[0].fmt.worked_example == job.rollout.worked_example
        with serve(build_app(models)) as url:
            c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
            assert [m.id for m in c.models.list()] == ["calc", "smollm2-135m-instruct"]
            for name in ("calc", "smollm2-135m-instruct"):
                r = await _acreate(url, name)
                assert r.model == name and r.usage.completion_tokens == 4
        with pytest.raises(ValueError, match="pick another with --name"):
            served_models(str(tmp_path / "calc"), name="smollm2-135m-instruct", model=tiny(tokenizer),
                          tokenizer=tokenizer)
    finally:
        for m in models:
            await m.engine.aclose()


async def _acreate(url: str, model: str) -> Any:
    c = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    try:
        return await c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=4, temperature=0)
    finally:
        await c.close()


async def test_the_server_is_a_score_model_judge(tmp_path: Path, tokenizer: Any) -> None:
    verdict = json.dumps({"steps": [{"description": "compared", "conclusion": "right"}], "result": 0.75})
    engine = JsonScripted(tokenizer, lambda _ids: verdict + EOS)
    with serve(build_app([ServedModel("judge", engine, ChatFormat(tokenizer))])) as url:
        spec = {"type": "score_model", "name": "quality", "model": "judge", "base_url": url + "/v1",
                "input": [{"role": "user", "content": "Expected {{ item.answer }}; got {{ sample.output_text }}"}]}
        grader = build_grader(spec, tmp_path)
        rollout = make_rollout(answer="It is Paris.")
        try:
            score = await grader.grade(build_sample(rollout), rollout.item)
        finally:
            await grader.aclose()  # type: ignore[attr-defined]
    assert score.score == 0.75 and score.error is None
    (grammar,) = engine.grammars  # the judge's response_format reached the engine as a JSON grammar
    assert isinstance(grammar, JsonGrammar) and set(grammar.json_schema["required"]) == {"steps", "result"}


async def test_the_server_is_a_teacher_behind_engine_openai(tmp_path: Path, tokenizer: Any) -> None:
    """`arft eval` of a job whose engine is this server: the call it writes runs the job's tool."""
    script = Script(tokenizer, call("lookup", key="a"), "Done: a=7." + EOS)
    (tmp_path / "tools.py").write_text("def lookup(key: str) -> str:\n    \"\"\"Look a key up.\n\n"
                                       "    Args:\n        key: The key.\n    \"\"\"\n    return f'{key}=7'\n")
    (tmp_path / "val.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "Code of a?"}],
                                                    "answer": "7"}) + "\n")
    (tmp_path / "train.jsonl").write_text((tmp_path / "val.jsonl").read_text())
    with serve(build_app([ServedModel("teacher", ScriptedEngine(tokenizer, script), ChatFormat(tokenizer))])) as url:
        job = {"model": "teacher", "training_file": "train.jsonl", "validation_file": "val.jsonl",
               "engine": {"type": "openai", "base_url": url + "/v1"},
               "method": {"type": "reinforcement", "reinforcement": {
                   "grader": {"type": "string_check", "name": "a", "input": "{{ sample.output_text }}",
                              "reference": "{{ item.answer }}", "operation": "like"},
                   "tools": [{"type": "python", "function": "tools.py:lookup"}]}}}
        (tmp_path / "job.json").write_text(json.dumps(job))
        spec = load_job(tmp_path / "job.json")
        result = await evaluate(spec, load_tasks(tmp_path / "val.jsonl"), 1, tmp_path / "run")
    (rollout,) = result.rollouts
    assert rollout.status == "ok" and rollout.reward == 1.0
    assert [(t.name, t.status, t.output) for t in rollout.tool_calls] == [("lookup", "ok", "a=7")]
    assert "a=7" in script.prompts[1]
