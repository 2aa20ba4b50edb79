"""Demonstrations are laid out token for token as a rollout of the same turns would be."""

from __future__ import annotations

import json
from typing import Any

import pytest

from arft.chat.formats import ChatFormat
from arft.records import FunctionCall, Message, Task, ToolCall
from arft.rollout.demonstration import DemoError, Demonstration, replay, split_at_first_assistant
from arft.rollout.loop import run_rollout, task_tool_schemas
from arft.tools.python_fn import PythonTool
from tests.unit.rollout.test_loop import EOS, call, conv, scripted


def lookup(key: str) -> str:
    """Look a code up.

    Args:
        key: The key.
    """
    return f"code of {key} is 7"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = {t.name: t for t in (PythonTool.from_function(lookup), PythonTool.from_function(add))}
PROMPT = (Message(role="system", content="You help."), Message(role="user", content="Code for alpha?"))
REPLIES = [call("lookup", key="alpha"), call("add", a=2, b=3) + "\n" + call("lookup", key="beta"),
           "The code is 7." + EOS]


async def _rollout(tokenizer: Any, choice: Any = "auto") -> Any:
    """A rollout whose engine writes REPLIES (after the prefill a forced ``choice`` puts in the prompt)."""
    task = Task(id="t1", messages=PROMPT, tool_choice=choice)
    prefill = ChatFormat(tokenizer).render_prompt(PROMPT, task_tool_schemas(task, TOOLS), choice).prefill
    assert REPLIES[0].startswith(prefill)
    replies = [REPLIES[0][len(prefill):], *REPLIES[1:]]
    return await run_rollout(conv(scripted(tokenizer, replies), tokenizer, tool_choice=choice), task, TOOLS,
                             _limits())


def _limits() -> Any:
    from tests.specs import limits

    return limits()


def _demo(r: Any, **kw: Any) -> Demonstration:
    prompt, turns = split_at_first_assistant(r.messages)
    assert prompt == PROMPT
    return Demonstration("t1", prompt, turns, **kw)


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "lookup"}}])
async def test_replay_equals_the_rollout_token_for_token(tokenizer: Any, choice: Any) -> None:
    r = await _rollout(tokenizer, choice)
    assert r.status == "ok" and r.n_turns == 3
    schemas = task_tool_schemas(Task(id="t1", messages=PROMPT), TOOLS)
    d = await replay(ChatFormat(tokenizer), _demo(r, tool_choice=choice), schemas, choice, 4096)
    assert d.token_ids == r.token_ids
    assert d.loss_mask == r.loss_mask  # 1 on the assistant's tokens only; prompt and results masked
    assert not d.recorded


async def test_mask_covers_exactly_the_assistant_text(tokenizer: Any) -> None:
    r = await _rollout(tokenizer)
    schemas = task_tool_schemas(Task(id="t1", messages=PROMPT), TOOLS)
    d = await replay(ChatFormat(tokenizer), _demo(r), schemas, "auto", 4096)
    learned = tokenizer.decode([i for i, m in zip(d.token_ids, d.loss_mask) if m])  # "auto": no prefill
    assert learned == "".join(REPLIES)
    masked = tokenizer.decode([i for i, m in zip(d.token_ids, d.loss_mask) if not m])
    assert "code of alpha is 7" in masked and "Code for alpha?" in masked  # tool output, prompt: context


def _call_msg(name: str, args: str) -> Message:
    return Message(role="assistant", tool_calls=(ToolCall(id="c1", function=FunctionCall(name=name, arguments=args)),))


async def test_bad_demonstrations_are_refused_with_the_reason(tokenizer: Any) -> None:
    fmt = ChatFormat(tokenizer)
    schemas = task_tool_schemas(Task(id="t1", messages=PROMPT), TOOLS)
    result = Message(role="tool", content="5", tool_call_id="c1")
    with pytest.raises(DemoError, match="no assistant turn"):
        await replay(fmt, Demonstration("t", PROMPT, ()), schemas, "auto", 4096)
    with pytest.raises(DemoError, match="not JSON"):
        await replay(fmt, Demonstration("t", PROMPT, (_call_msg("add", "{oops"), result)), schemas, "auto", 4096)
    forced = {"type": "function", "function": {"name": "lookup"}}
    with pytest.raises(DemoError, match="forces a call"):
        await replay(fmt, Demonstration("t", PROMPT, (_call_msg("add", json.dumps({"a": 1, "b": 2})), result)),
                     schemas, forced, 4096)
    long = Message(role="assistant", content="word " * 400)
    with pytest.raises(DemoError, match="longer than rollout.max_tokens"):
        await replay(fmt, Demonstration("t", PROMPT, (long,)), schemas, "auto", 300)
