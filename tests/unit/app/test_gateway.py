"""The gateway: an agent program's own OpenAI client drives the rollout, the gateway keeps the
exact tokens. Real tokenizer, a tiny random model with constrained calls (so reusing sampled ids
and re-tokenizing them would differ), a real uvicorn server on 127.0.0.1, the real ``openai``
client in the programs."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal

import openai
import pytest
import torch

from arft.app.gateway.capture import Capture, same_message
from arft.app.gateway.driver import ProgramDriver, program_driver, tool_call_records
from arft.app.gateway.programs import ClientSettings, CommandProgram, PythonProgram
from arft.app.gateway.server import Gateway
from arft.app.serve.chat import ServedModel
from arft.chat.formats import ChatFormat
from arft.config import JobSpec
from arft.engines.transformers.engine import TransformersEngine
from arft.records import FunctionCall, Message, PolicyStamp, Rollout, Task, ToolCall
from arft.rollout.conversation import TokenConversation
from arft.rollout.loop import run_rollout
from arft.tools.python_fn import PythonTool
from arft.trainer.batching import to_train_batch
from tests.specs import limits, sampling
from tests.unit.engines.transformers.test_engine import varied_model

SEED = 7
QUESTION = "Open the north shelf, level 2."


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    torch.set_num_threads(1)
    return varied_model(tokenizer, seed=5)


def open_shelf(shelf: Literal["north", "south"], level: int) -> str:
    """Open one shelf of the warehouse.

    Args:
        shelf: Which shelf.
        level: Which level.
    """
    return f"{shelf}/{level}: 3 boxes"


TOOL = PythonTool.from_function(open_shelf)
TASK = Task(id="t", messages=(Message(role="user", content=QUESTION),), tools=(TOOL.schema,),
            tool_choice="required")


def gateway_of(engine: Any, tokenizer: Any, max_tokens: int = 2048) -> Gateway:
    fmt = ChatFormat(tokenizer, worked_example=False)
    served = ServedModel("policy", engine, fmt, constrain=True, max_tokens=max_tokens)
    return Gateway(served, sampling(temperature=1.0, max_new_tokens=48), max_tokens)


async def append_only_agent(row: dict[str, Any], client: ClientSettings) -> str:
    """The usual agent: send the history, run the calls, append the results, until an answer."""
    api = openai.AsyncOpenAI(base_url=client.base_url, api_key=client.api_key, max_retries=0)
    messages = list(row["messages"])
    choice = row["tool_choice"]
    for _ in range(2):  # as arft's loop with max_turns=2
        reply = await api.chat.completions.create(model=client.model, messages=messages, tools=row["tools"],
                                                  tool_choice=choice)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            output = open_shelf(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "name": call.function.name, "content": output})
        choice = "auto"
    return "gave up"


async def test_append_only_agent_captures_the_ids_of_arfts_own_loop(model: Any, tokenizer: Any) -> None:
    engine = TransformersEngine(model, tokenizer, max_batch_size=2)
    engine.policy = PolicyStamp(version=3, hash="0123456789abcdef")  # as a sync stamps it
    conv = TokenConversation(engine, ChatFormat(tokenizer, worked_example=False),
                             sampling(temperature=1.0, max_new_tokens=48), max_tokens=2048,
                             tool_choice="required", seed=SEED, constrain=True)
    own = await run_rollout(conv, TASK, {TOOL.name: TOOL}, limits(max_turns=2))
    gateway = gateway_of(engine, tokenizer)
    async with gateway.running():
        driver = ProgramDriver(gateway, PythonProgram(append_only_agent, 60, 2), "policy")
        got = await driver.rollout(TASK, trace_id="tr-1", run_id="", sample_index=0, step=None, seed=SEED)
    await engine.aclose()
    assert own.n_turns == 2 and own.tool_calls[0].status == "ok"  # a real call, run, then a second turn
    assert got.status == "ok", got.error
    assert got.token_ids == own.token_ids and got.loss_mask == own.loss_mask
    assert got.logprobs == pytest.approx(own.logprobs, abs=1e-4)
    assert got.constrained_mask == own.constrained_mask and got.constrained_calls == own.constrained_calls >= 1
    assert got.segments == () and +driver.kinds == {"first": 1, "append": 1}
    assert [c.output for c in got.tool_calls] == [c.output for c in own.tool_calls]
    assert got.output is not None and got.n_turns == 2
    assert got.policy == own.policy == engine.policy  # the weights that sampled it, on the record


def msg(role: Any, content: str | None = None, **calls: str) -> Message:
    tool_calls = tuple(ToolCall(id=f"c{i}", function=FunctionCall(name=n, arguments=a))
                       for i, (n, a) in enumerate(calls.items())) or None
    return Message(role=role, content=content, tool_calls=tool_calls)


def test_same_message_compares_meaning_not_spelling() -> None:
    assert same_message(msg("assistant", None, f='{"a":1}'), msg("assistant", "", f='{"a": 1}'))
    assert not same_message(msg("assistant", None, f='{"a":1}'), msg("assistant", None, f='{"a":2}'))
    assert not same_message(msg("user", "x"), msg("system", "x"))


class FakeGen:
    def __init__(self, ids: list[int]) -> None:
        self.token_ids, self.logprobs, self.finish_reason = tuple(ids), tuple([-0.5] * len(ids)), "eos"
        self.constrained = ()


def test_capture_reuses_retries_and_splits(tokenizer: Any) -> None:
    fmt = ChatFormat(tokenizer, worked_example=False)
    cap = Capture(fmt, "tr")
    user = [msg("user", "hi")]

    def ask(messages: list[Message]) -> Any:
        return cap.prompt(messages, [], "auto", fmt.render_prompt(messages, [], "auto"))

    first = ask(user)
    cap.record(FakeGen([11, 12]), msg("assistant", "odd"))  # ids that "odd" would never tokenize to
    follow = [*user, msg("assistant", "odd"), msg("user", "more")]
    second = ask(follow)
    assert second.kind == "append" and second.rendered.ids[:len(first.rendered.ids) + 2] == \
        first.rendered.ids + [11, 12]  # the sampled ids, not "odd" tokenized again
    cap.record(FakeGen([13]), msg("assistant", "x"))
    assert ask(follow).kind == "retry"  # the same request again: its reply is sampled anew
    cap.record(FakeGen([14]), msg("assistant", "y"))
    seg = cap.segments[-1]
    assert 13 not in seg.token_ids and seg.token_ids[-1] == 14 and seg.messages[-1].content == "y"
    summarised = [msg("system", "summary: odd"), msg("user", "more")]
    assert ask(summarised).kind == "split"
    cap.record(FakeGen([15]), msg("assistant", "z"))
    fields = cap.token_fields()
    assert len(fields["segments"]) == 1 and fields["token_ids"][-1] == 15 and cap.splits == 1
    rollout = Rollout(trace_id="tr", task_id="t", messages=(), **fields)
    batch = to_train_batch([rollout], [0.5])
    assert len(batch.input_ids) == 2 and batch.advantages == (0.5, 0.5)  # each segment trains
    assert rollout.n_sampled_tokens == 4  # 11, 12, 14 | 15


FAILING = {
    "raises": "raise RuntimeError('my agent broke')",
    "exits": "import sys; print('bad thing', file=sys.stderr); sys.exit(3)",
    "silent": "print('an answer without asking the model')",
    "sleeps": "import time; time.sleep(30)",
}


@pytest.mark.parametrize("kind", sorted(FAILING))
async def test_agent_failures_are_infra_failures_never_zero(kind: str, tokenizer: Any, model: Any,
                                                            tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(FAILING[kind] + "\n")
    program: Any = CommandProgram([sys.executable, "agent.py"], tmp_path, {}, timeout_s=1, stderr_max_chars=200)
    if kind == "raises":
        def broken(row: dict[str, Any], client: ClientSettings) -> str:
            raise RuntimeError("my agent broke")
        program = PythonProgram(broken, 3, 1)
    engine = TransformersEngine(model, tokenizer, max_batch_size=1)
    gateway = gateway_of(engine, tokenizer)
    async with gateway.running():
        got = await ProgramDriver(gateway, program, "policy").rollout(
            TASK, trace_id=f"tr-{kind}", run_id="", sample_index=0, step=None, seed=1)
    await engine.aclose()
    assert got.status == "infra_failed" and got.reward is None and got.output is None
    why = {"raises": "my agent broke", "exits": "status 3; its stderr ends:\nbad thing",
           "silent": "never called the gateway", "sleeps": "within 1s"}[kind]
    assert why in (got.error or "")
    assert to_train_batch([got], [None]).input_ids == ()


@pytest.mark.parametrize("sandbox", [False, True])
async def test_a_command_agent_through_the_job(tmp_path: Path, tokenizer: Any, model: Any, sandbox: bool) -> None:
    """``agent: {type: command}`` from a job, plain or in the sandbox: the program reads
    OPENAI_BASE_URL and the row from stdin; an over-budget conversation ends the rollout as
    truncated, not as a failure; a sandboxed program's writes stay in its tmpfs."""
    (tmp_path / "agent.py").write_text(textwrap.dedent("""
        import json, os, sys
        import openai
        row = json.load(sys.stdin)
        client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL / OPENAI_API_KEY from the environment
        long = row["messages"] + [{"role": "user", "content": "word " * int(row.get("pad", 0))}]
        reply = client.chat.completions.create(model=os.environ["OPENAI_MODEL"], messages=long)
        print(json.dumps({"answer": reply.choices[0].message.content, "trace": os.environ["ARFT_TRACE_ID"]}))
        open("scribble.txt", "w").write("x")
    """))
    job = JobSpec.model_validate({
        "agent": {"command": [sys.executable, "agent.py"], "timeout_s": 60, "sandbox": sandbox, "concurrency": 1},
        "rollout": {"max_tokens": 400},
        "method": {"type": "reinforcement", "reinforcement": {"grader": {
            "type": "string_check", "name": "s", "input": "{{ sample.output_text }}", "reference": "x",
            "operation": "eq"}}}})
    job = job.model_copy(update={"base_dir": tmp_path})
    assert job.agent.type == "command"
    engine = TransformersEngine(model, tokenizer, max_batch_size=2)
    async with program_driver(job, engine) as driver:
        ok = await driver.rollout(Task(id="a", messages=(Message(role="user", content="hi"),)),
                                  trace_id="tr-ok", run_id="", sample_index=0, step=None, seed=1)
        long = await driver.rollout(Task(id="b", messages=(Message(role="user", content="hi"),), item={"pad": 600}),
                                    trace_id="tr-long", run_id="", sample_index=0, step=None, seed=1)
    await engine.aclose()
    assert ok.status == "ok", ok.error
    assert json.loads(ok.output or "")["trace"] == "tr-ok" and sum(ok.loss_mask) > 0
    assert long.status == "truncated" and long.finish_reason == "max_tokens"
    assert "rollout.max_tokens" in (long.error or "")
    assert (tmp_path / "scribble.txt").exists() is not sandbox


async def test_a_route_that_is_not_running_is_an_openai_shaped_404(tokenizer: Any, model: Any) -> None:
    engine = TransformersEngine(model, tokenizer, max_batch_size=1)
    async with gateway_of(engine, tokenizer).running() as gateway:
        api = openai.AsyncOpenAI(base_url=gateway.base_url("nope"), api_key="k", max_retries=0)
        with pytest.raises(openai.NotFoundError, match="no rollout 'nope' is running"):
            await api.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
    await engine.aclose()


async def sdk_agent(row: dict[str, Any], client: ClientSettings) -> str:
    """An OpenAI Agents SDK agent on its default model class (the Responses API), unchanged but
    for its client's base URL."""
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    set_default_openai_client(openai.AsyncOpenAI(base_url=client.base_url, api_key=client.api_key), use_for_tracing=False)
    agent = Agent(name="shelves", instructions="Use the tool.", model=client.model,
                  tools=[function_tool(open_shelf)])
    result = await Runner.run(agent, row["messages"][-1]["content"], max_turns=3)
    return str(result.final_output)


async def test_the_agents_sdk_default_model_class_through_the_gateway(model: Any, tokenizer: Any) -> None:
    engine = TransformersEngine(model, tokenizer, max_batch_size=1)
    task = Task(id="t", messages=(Message(role="user", content=QUESTION),))
    async with gateway_of(engine, tokenizer).running() as gateway:
        driver = ProgramDriver(gateway, PythonProgram(sdk_agent, 60, 1), "policy")
        got = await driver.rollout(task, trace_id="tr-sdk", run_id="", sample_index=0, step=None, seed=3)
    await engine.aclose()
    # the random tiny model may or may not call the tool; either way every turn was captured
    assert got.n_turns >= 1 and sum(got.loss_mask) > 0 and driver.kinds["split"] == 0
    assert got.status in ("ok", "truncated"), got.error  # truncated: a reply cut by max_new_tokens


async def test_every_model_call_is_logged_with_its_rollout(model: Any, tokenizer: Any,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    engine = TransformersEngine(model, tokenizer, max_batch_size=1)
    caplog.set_level("INFO", logger="arft.serve.access")
    async with gateway_of(engine, tokenizer).running() as gateway:
        gateway.open("tr-log", seed=1)
        api = openai.AsyncOpenAI(base_url=gateway.base_url("tr-log"), api_key="k", max_retries=0)
        await api.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.NotFoundError, match="no route POST"):
            await api.embeddings.create(model="x", input="hi")  # a route the gateway does not serve
    await engine.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "arft.serve.access"]
    assert any("POST /rollouts/{trace_id}/v1/chat/completions 200" in x and "trace=tr-log" in x
               and "completion=-" not in x for x in lines)


def test_a_rows_worked_example_calls_are_not_the_rollouts(tokenizer: Any) -> None:
    fmt = ChatFormat(tokenizer, worked_example=False)
    cap = Capture(fmt, "tr")
    example = [msg("user", "2+2?"), msg("assistant", None, calc='{"e": "2+2"}'),
               Message(role="tool", content="4", tool_call_id="c0"), msg("assistant", "4."), msg("user", "3+3?")]
    cap.prompt(example, [], "auto", fmt.render_prompt(example, [], "auto"))
    mine = Message(role="assistant", tool_calls=(ToolCall(id="call_mine", function=FunctionCall(
        name="calc", arguments='{"e": "3+3"}')),))
    cap.record(FakeGen([11]), mine)
    cap.prompt([*example, mine, Message(role="tool", content="6", tool_call_id="call_mine")], [], "auto",
               fmt.render_prompt(example, [], "auto"))
    assert [(r.call_id, r.output) for r in tool_call_records(cap)] == [("call_mine", "6")]


def test_a_command_that_is_not_there_stops_the_job_before_any_rollout(tmp_path: Path) -> None:
    from arft.app.gateway.programs import AgentSetupError
    from arft.config.agents import CommandAgentSpec

    with pytest.raises(AgentSetupError, match="'no-such-agent' is not found \\(on PATH\\)"):
        CommandProgram.from_spec(CommandAgentSpec(type="command", command=["no-such-agent"]), tmp_path)
    with pytest.raises(AgentSetupError, match="is not a directory"):
        CommandProgram.from_spec(CommandAgentSpec(type="command", command=["python"], cwd="gone"), tmp_path)
    with pytest.raises(AgentSetupError, match="'./agent.sh' is not found \\(in "):
        CommandProgram.from_spec(CommandAgentSpec(type="command", command=["./agent.sh"]), tmp_path)
    (tmp_path / "agent.sh").write_text("echo hi\n")  # a path runs from the agent's folder
    assert CommandProgram.from_spec(CommandAgentSpec(type="command", command=["./agent.sh"]), tmp_path).argv == ["./agent.sh"]
