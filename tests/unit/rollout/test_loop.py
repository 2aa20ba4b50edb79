"""The agent loop with a scripted engine, the real ChatFormat and real python tools."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any, Iterator, Sequence

import pytest

from arft.engines.base import EngineError, Generation, SamplingParams
from arft.engines.scripted import ScriptedEngine
from arft.chat.formats import ChatFormat
from arft.records import Message, Task
from arft.rollout.conversation import TokenConversation
from arft.rollout.loop import run_rollout
from arft.tools.base import ToolContext, ToolOutcome
from arft.tools.python_fn import PythonTool
from tests.specs import limits, sampling

EOS = "<|im_end|>"


def call(name: str, **args: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def scripted(tokenizer: Any, replies: Sequence[str]) -> ScriptedEngine:
    it: Iterator[str] = iter(replies)
    return ScriptedEngine(tokenizer, lambda _ids: next(it))


def task(**kw: Any) -> Task:
    return Task(id="t1", messages=(Message(role="user", content="What is the code for alpha?"),),
                item={"answer": "x"}, **kw)


def conv(engine: Any, tokenizer: Any, **kw: Any) -> TokenConversation:
    return TokenConversation(engine, ChatFormat(tokenizer), sampling(max_new_tokens=200),
                             max_tokens=kw.pop("max_tokens", 4096), **kw)


@pytest.fixture()
def secret_tools() -> tuple[dict[str, Any], str]:
    token = secrets.token_hex(8)  # never in any prompt: seeing it proves the tool ran

    def lookup(key: str, ctx: ToolContext) -> str:
        """Look a code up.

        Args:
            key: The key.
        """
        return f"{key}={token} trace={ctx.trace_id}"

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    tools = {t.name: t for t in (PythonTool.from_function(lookup), PythonTool.from_function(add))}
    return tools, token


async def test_three_turns_keep_tokens_and_mask(tokenizer: Any, secret_tools: Any) -> None:
    tools, token = secret_tools
    replies = [call("lookup", key="alpha"),
               call("add", a=2, b=3) + "\n" + call("lookup", key="beta"),
               "The code is ready." + EOS]
    engine = scripted(tokenizer, replies)
    r = await run_rollout(conv(engine, tokenizer), task(), tools, limits())
    assert r.status == "ok" and r.finish_reason == "answer" and r.n_turns == 3
    assert [c.name for c in r.tool_calls] == ["lookup", "add", "lookup"]
    assert token in r.tool_calls[0].output and f"trace={r.trace_id}" in r.tool_calls[0].output
    assert r.tool_calls[1].output == "5" and {c.turn for c in r.tool_calls[1:]} == {1}
    assert all(c.trace_id == r.trace_id for c in r.tool_calls)
    # Token in, token out: the sampled ids appear verbatim, in order, exactly where mask == 1.
    sampled = [i for i, m in zip(r.token_ids, r.loss_mask) if m]
    expected = [t for text in replies for t in tokenizer.encode(text, add_special_tokens=False)]
    assert sampled == expected
    assert len(r.token_ids) == len(r.loss_mask) == len(r.logprobs)
    assert r.loss_mask[: r.prompt_len] == (0,) * r.prompt_len
    # The tool output tokens are in the sequence but masked.
    text_unmasked = tokenizer.decode([i for i, m in zip(r.token_ids, r.loss_mask) if not m])
    assert token in text_unmasked
    assert r.messages[-1].content == "The code is ready."
    assert [m.role for m in r.messages] == ["user", "assistant", "tool", "assistant", "tool", "tool",
                                            "assistant"]


async def test_malformed_call_is_shown_and_counted(tokenizer: Any, secret_tools: Any) -> None:
    tools, _ = secret_tools
    replies = ['<tool_call>\n{"name": "lookup", "arguments": {"key": }\n</tool_call>',
               call("lookup", key="alpha"), "done" + EOS]
    r = await run_rollout(conv(scripted(tokenizer, replies), tokenizer), task(), tools, limits())
    assert r.parse_errors == 1 and r.status == "ok"
    assert r.tool_calls[0].status == "parse_error" and r.tool_calls[0].error
    assert "could not be parsed" in (r.messages[2].content or "")
    assert r.tool_calls[1].status == "ok"


async def test_unknown_tool_is_a_tool_error(tokenizer: Any, secret_tools: Any) -> None:
    tools, _ = secret_tools
    replies = [call("delete_everything"), "ok" + EOS]
    r = await run_rollout(conv(scripted(tokenizer, replies), tokenizer), task(), tools, limits())
    assert r.tool_calls[0].status == "tool_error" and "unknown tool" in r.tool_calls[0].output


async def test_task_tools_limit_the_job_tools(tokenizer: Any, secret_tools: Any) -> None:
    tools, _ = secret_tools
    only_add = (tools["add"].schema,)
    replies = [call("lookup", key="alpha"), "ok" + EOS]
    r = await run_rollout(conv(scripted(tokenizer, replies), tokenizer), task(tools=only_add), tools,
                          limits())
    assert r.tool_calls[0].status == "tool_error" and "Available tools: add" in r.tool_calls[0].output


@pytest.mark.parametrize("policy", ["refuse", "end"])
async def test_max_episode_steps(tokenizer: Any, secret_tools: Any, policy: str) -> None:
    tools, _ = secret_tools
    replies = [call("add", a=1, b=1) + call("add", a=1, b=2) + call("add", a=1, b=3),
               call("add", a=2, b=2), "four" + EOS]
    capped = limits(on_max_episode_steps=policy, max_episode_steps=2)
    r = await run_rollout(conv(scripted(tokenizer, replies), tokenizer), task(), tools, capped)
    ran = [c for c in r.tool_calls if c.status == "ok"]
    assert len(ran) == 2
    if policy == "refuse":
        assert r.status == "ok" and r.finish_reason == "answer"
        assert [c.status for c in r.tool_calls].count("refused") == 2
    else:
        assert r.status == "truncated" and r.finish_reason == "max_episode_steps"


async def test_max_turns_truncates(tokenizer: Any, secret_tools: Any) -> None:
    tools, _ = secret_tools
    engine = ScriptedEngine(tokenizer, lambda _ids: call("add", a=1, b=1))
    r = await run_rollout(conv(engine, tokenizer), task(), tools, limits(max_turns=3))
    assert (r.status, r.finish_reason, r.n_turns) == ("truncated", "max_turns", 3)


async def test_a_single_turn_job_ends_ok_after_its_calls_ran(tokenizer: Any, secret_tools: Any) -> None:
    tools, token = secret_tools
    engine = scripted(tokenizer, [call("lookup", key="alpha") + call("add", a=1, b=2)])
    r = await run_rollout(conv(engine, tokenizer), task(), tools, limits(max_turns=1))
    assert (r.status, r.finish_reason, r.n_turns) == ("ok", "max_turns", 1)
    assert token in r.tool_calls[0].output and r.tool_calls[1].output == "3"  # the calls ran: they are the answer


@pytest.mark.parametrize("reply", ['<tool_call>\n{"name": "add", "arguments": {"a": }\n</tool_call>',
                                   '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2' + "0" * 400])
async def test_a_single_turn_cut_short_is_still_truncated(tokenizer: Any, secret_tools: Any, reply: str) -> None:
    tools, _ = secret_tools  # an unparsable call, or a turn cut by max_new_tokens (200) inside its call
    r = await run_rollout(conv(scripted(tokenizer, [reply]), tokenizer), task(), tools, limits(max_turns=1))
    assert (r.status, r.finish_reason, r.n_turns) == ("truncated", "max_turns", 1)


async def test_token_budget_truncates(tokenizer: Any, secret_tools: Any) -> None:
    tools, _ = secret_tools
    engine = ScriptedEngine(tokenizer, lambda _ids: call("lookup", key="k" * 50))
    c = conv(engine, tokenizer, max_tokens=700)
    r = await run_rollout(c, task(), tools, limits(max_turns=50))
    assert (r.status, r.finish_reason) == ("truncated", "max_tokens")
    assert len(r.token_ids) <= 700


class _InfraDown:
    name = "lookup"
    schema = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome(output="", status="infra_error", error="HTTP 503 after 3 retries")

    async def aclose(self) -> None:
        return None


async def test_infra_failure_ends_rollout(tokenizer: Any) -> None:
    replies = [call("lookup", key="a"), "never" + EOS]
    r = await run_rollout(conv(scripted(tokenizer, replies), tokenizer), task(), {"lookup": _InfraDown()},
                          limits())
    assert r.status == "infra_failed" and "503" in (r.error or "")


async def test_wall_clock_timeout_keeps_partial_episode(tokenizer: Any) -> None:
    async def slow(seconds: float) -> str:
        """Sleep."""
        await asyncio.sleep(seconds)
        return "late"

    tools = {"slow": PythonTool.from_function(slow)}
    replies = [call("slow", seconds=30), "x" + EOS]
    r = await run_rollout(conv(scripted(tokenizer, replies), tokenizer), task(), tools,
                          limits(timeout_s=0.5))
    assert (r.status, r.finish_reason) == ("truncated", "timeout")
    assert r.n_turns == 1 and r.token_ids


class _BrokenEngine(ScriptedEngine):
    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        raise EngineError("CUDA out of memory")


async def test_engine_failure_is_infra_failed(tokenizer: Any, secret_tools: Any) -> None:
    tools, _ = secret_tools
    engine = _BrokenEngine(tokenizer, lambda _ids: "")
    r = await run_rollout(conv(engine, tokenizer), task(), tools, limits())
    assert r.status == "infra_failed" and "out of memory" in (r.error or "")


async def test_trace_ids_distinct_across_rollouts(tokenizer: Any, secret_tools: Any) -> None:
    tools, _ = secret_tools
    rs = [await run_rollout(conv(scripted(tokenizer, [call("lookup", key="a"), "x" + EOS]), tokenizer),
                            task(), tools, limits()) for _ in range(3)]
    ids = {r.trace_id for r in rs}
    assert len(ids) == 3 and all(i.startswith("trace_") and len(i) == 38 for i in ids)
    for r in rs:
        assert f"trace={r.trace_id}" in r.tool_calls[0].output
