"""Rollouts with constrained tool calls: the record marks constrained positions, counts the
constrained calls, and the tool really runs on the arguments the grammar let through."""

from __future__ import annotations

import secrets
from typing import Any, Literal

import pytest
import torch

from arft.engines.scripted import ScriptedEngine
from arft.engines.transformers.engine import TransformersEngine
from arft.chat.formats import ChatFormat
from arft.records import Message, Task
from arft.rollout.conversation import TokenConversation
from arft.rollout.loop import run_rollout
from arft.rollout.runner import constrained_tool_calls
from arft.tools.python_fn import PythonTool
from tests.specs import limits, sampling
from tests.unit.engines.transformers.test_engine import varied_model


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    torch.set_num_threads(1)
    return varied_model(tokenizer, seed=5)


def shelf_tool(stamp: str) -> PythonTool:
    def open_shelf(shelf: Literal["north", "south"], level: int) -> str:
        """Open one shelf of the warehouse.

        Args:
            shelf: Which shelf.
            level: Which level.
        """
        return f"{shelf}/{level}: {stamp}"

    return PythonTool.from_function(open_shelf)


def rollout_of(engine: Any, tokenizer: Any, tool: PythonTool, constrain: bool, seed: int = 0,
               strict: bool = False) -> Any:
    schema = dict(tool.schema)
    if strict:
        schema = {"type": "function", "function": {**schema["function"], "strict": True}}
    conv = TokenConversation(engine, ChatFormat(tokenizer, worked_example=False),
                             sampling(temperature=1.0, max_new_tokens=48), max_tokens=2048,
                             tool_choice="required", seed=seed, constrain=constrain)
    task = Task(id="t", messages=(Message(role="user", content="Open the north shelf, level 2."),),
                tools=(schema,))
    import asyncio

    return asyncio.run(run_rollout(conv, task, {tool.name: tool}, limits(max_turns=2)))


@pytest.mark.parametrize("constrain, strict", [(True, False), (False, True)])
def test_constrained_rollout_marks_positions_and_calls(model: Any, tokenizer: Any, constrain: bool,
                                                       strict: bool) -> None:
    stamp = secrets.token_hex(6)  # never in a prompt: seeing it proves the tool ran
    engine = TransformersEngine(model, tokenizer, max_batch_size=4)
    r = rollout_of(engine, tokenizer, shelf_tool(stamp), constrain, strict=strict)
    assert r.status != "error", r.error
    assert len(r.constrained_mask) == len(r.token_ids)
    assert all(m == 1 for c, m in zip(r.constrained_mask, r.loss_mask) if c)  # only sampled tokens
    assert sum(r.constrained_mask[:r.prompt_len]) == 0
    first = r.tool_calls[0]
    assert first.status == "ok" and stamp in first.output  # a valid call, and the tool ran
    assert r.constrained_calls == len(r.model_calls) >= 1


def test_without_constraints_the_record_has_no_constrained_positions(model: Any, tokenizer: Any) -> None:
    engine = TransformersEngine(model, tokenizer, max_batch_size=4)
    r = rollout_of(engine, tokenizer, shelf_tool("x"), constrain=False)
    assert r.constrained_mask == () and r.constrained_calls == 0
    assert r.parse_errors + sum(c.status != "ok" for c in r.tool_calls) >= 1  # the random model fails


def test_option_resolution(tokenizer: Any, model: Any) -> None:
    scripted = ScriptedEngine(tokenizer, lambda _ids: "hi")
    engine = TransformersEngine(model, tokenizer)
    assert constrained_tool_calls("auto", engine) is True
    assert constrained_tool_calls("auto", scripted) is False
    assert constrained_tool_calls(False, engine) is False
    with pytest.raises(ValueError, match="cannot constrain sampling.*engine.type: transformers"):
        constrained_tool_calls(True, scripted)


def test_chat_format_derives_the_call_syntax(tokenizer: Any) -> None:
    fmt = ChatFormat(tokenizer)
    g = fmt.tool_grammar([shelf_tool("x").schema], constrain_all=True)
    assert g is not None
    assert (g.trigger, g.call_begin, g.args_infix, g.call_end) == (
        "<tool_call>", '<tool_call>\n{"name": "', '", "arguments": ', "}\n</tool_call>")
    assert fmt.tool_grammar([shelf_tool("x").schema], constrain_all=False) is None
