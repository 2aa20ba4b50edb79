"""TokenConversation keeps the exact token ids across turns (the prefix property), masks tool
output and carries the engine's logprobs; ChatConversation has no tokens; a forced tool_choice
holds for the first turn only. Real tokenizer, ChatFormat and python tools; a scripted engine, the
tiny model, and a real OpenAI-compatible fake on 127.0.0.1."""

from __future__ import annotations

import json
import secrets
from typing import Any, Literal, Sequence

import pytest
import torch
from fastapi import FastAPI

from arft.engines.base import Generation, SamplingParams
from arft.engines.openai_engine import OpenAIEngine
from arft.engines.scripted import ScriptedEngine
from arft.engines.transformers.engine import TransformersEngine
from arft.chat.formats import ChatFormat
from arft.records import Message, Task
from arft.rollout.conversation import ChatConversation, TokenConversation, _first_turn_choice
from arft.rollout.loop import run_rollout
from arft.tools.base import ToolContext
from arft.tools.python_fn import PythonTool
from tests.servers import chat_completion, recording_app, serve
from tests.specs import limits, sampling
from tests.unit.engines.transformers.test_engine import varied_model

EOS = "<|im_end|>"


def call(name: str, **args: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


class Recorder:
    """Wraps a TokenEngine: records every prompt and generation; replaces the scripted engine's
    0.0 logprobs with distinct negative ones so the test can tell where they land."""

    def __init__(self, inner: Any, fake_logprobs: bool = False) -> None:
        self.inner, self.tokenizer, self.fake_logprobs = inner, inner.tokenizer, fake_logprobs
        self.supports_constraints = getattr(inner, "supports_constraints", False)
        self.prompts: list[list[int]] = []
        self.gens: list[Generation] = []
        self.params: list[SamplingParams] = []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        self.prompts.append(list(prompt_ids))
        self.params.append(params)
        gen = await self.inner.generate(prompt_ids, params)
        if self.fake_logprobs:
            gen = gen.model_copy(update={"logprobs": tuple(-(j + 1) / 8 for j in range(len(gen.token_ids)))})
        self.gens.append(gen)
        return gen

    async def aclose(self) -> None:
        await self.inner.aclose()


def stamp_tool() -> tuple[PythonTool, str]:
    token = secrets.token_hex(8)  # never in a prompt: seeing it proves the tool output is there

    def lookup(key: Literal["a", "b", "c"], ctx: ToolContext) -> str:
        """Look a key up.

        Args:
            key: The key.
        """
        return f"{key}={token}"

    return PythonTool.from_function(lookup), token


def task() -> Task:
    return Task(id="t", messages=(Message(role="user", content="Find the codes for a and b."),))


def check_prefix_and_masks(rec: Recorder, fields: dict[str, Any]) -> None:
    """Turn n+1's prompt = turn n's prompt + its sampled ids + appended (masked) ids; the record's
    tokens are the last prompt + the last sampled ids; mask 1 / engine logprob exactly where sampled."""
    ids, mask, lps = list(fields["token_ids"]), list(fields["loss_mask"]), list(fields["logprobs"])
    assert len(ids) == len(mask) == len(lps)
    assert fields["prompt_len"] == len(rec.prompts[0])
    sampled_at: dict[int, float] = {}
    for n, (prompt, gen) in enumerate(zip(rec.prompts, rec.gens)):
        mine = prompt + list(gen.token_ids)
        later = rec.prompts[n + 1] if n + 1 < len(rec.prompts) else ids
        assert later[:len(mine)] == mine, f"turn {n + 1} does not start with turn {n}'s exact ids"
        sampled_at.update({len(prompt) + j: lp for j, lp in enumerate(gen.logprobs)})
    for pos in range(len(ids)):
        if pos in sampled_at:
            assert mask[pos] == 1 and lps[pos] == sampled_at[pos]
        else:
            assert mask[pos] == 0 and lps[pos] == 0.0


@pytest.mark.parametrize("end", ["stop", "eos"])
async def test_turns_are_prefixes_and_tool_output_is_masked(tokenizer: Any, end: str) -> None:
    tool, token = stamp_tool()
    suffix = EOS if end == "eos" else ""  # a call closed by eos, or stopped at </tool_call>
    replies = iter([call("lookup", key="a") + suffix,
                    call("lookup", key="b") + "\n" + call("lookup", key="c") + suffix,
                    "Both found." + EOS])
    rec = Recorder(ScriptedEngine(tokenizer, lambda _ids: next(replies)), fake_logprobs=True)
    conv = TokenConversation(rec, ChatFormat(tokenizer), sampling(max_new_tokens=200), max_tokens=4096)
    r = await run_rollout(conv, task(), {tool.name: tool}, limits())
    assert r.status == "ok" and r.n_turns == 3 and len(r.tool_calls) == 3
    assert [g.finish_reason for g in rec.gens[:2]] == [end, end]
    fields = conv.token_fields()
    check_prefix_and_masks(rec, fields)
    assert fields["token_ids"] == r.token_ids and fields["loss_mask"] == r.loss_mask
    assert list(r.token_ids) == rec.prompts[-1] + list(rec.gens[-1].token_ids)  # answer: nothing appended
    # every tool output is in the sequence, in tokens the loss never sees
    unmasked = tokenizer.decode([i for i, m in zip(r.token_ids, r.loss_mask) if not m])
    assert unmasked.count(token) == 3
    assert token not in tokenizer.decode([i for i, m in zip(r.token_ids, r.loss_mask) if m])


def test_token_fields_after_start_are_the_prompt_alone(tokenizer: Any) -> None:
    tool, _ = stamp_tool()
    conv = TokenConversation(ScriptedEngine(tokenizer, lambda _ids: ""), ChatFormat(tokenizer),
                             sampling(), max_tokens=4096)
    conv.start(task().messages, [tool.schema])
    f = conv.token_fields()
    n = len(f["token_ids"])
    assert n > 0 and f["prompt_len"] == n
    assert f["loss_mask"] == (0,) * n and f["logprobs"] == (0.0,) * n and len(f["logprobs"]) == n
    assert f["constrained_mask"] == () and f["constrained_calls"] == 0


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    torch.set_num_threads(1)
    return varied_model(tokenizer, seed=5)


async def test_prefix_property_holds_for_real_sampled_tokens(tokenizer: Any, model: Any) -> None:
    """The tiny model's random tokens rarely survive decode -> encode: only token in, token out
    keeps turn 2's prompt an exact extension of turn 1."""
    tool, token = stamp_tool()
    engine = TransformersEngine(model, tokenizer, max_batch_size=1)
    rec = Recorder(engine)
    conv = TokenConversation(rec, ChatFormat(tokenizer, worked_example=False),
                             sampling(temperature=1.0, max_new_tokens=48), max_tokens=2048,
                             tool_choice="required", seed=4, constrain=True)
    try:
        r = await run_rollout(conv, task(), {tool.name: tool}, limits(max_turns=2))
    finally:
        await engine.aclose()
    assert len(rec.prompts) == 2 and r.tool_calls[0].status == "ok" and token in r.tool_calls[0].output
    assert any(lp < 0 for g in rec.gens for lp in g.logprobs)  # real sampling logprobs
    check_prefix_and_masks(rec, conv.token_fields())


def test_first_turn_choice() -> None:
    named = {"type": "function", "function": {"name": "lookup"}}
    assert _first_turn_choice("required") == ("required", "auto")
    assert _first_turn_choice(named) == (named, "auto")
    assert _first_turn_choice("lookup") == ("lookup", "auto")
    assert _first_turn_choice("none") == ("none", "none")
    assert _first_turn_choice("auto") == ("auto", "auto")
    assert _first_turn_choice(None) == (None, None)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "lookup"}}])
async def test_forced_tool_choice_holds_for_the_first_turn_only(tokenizer: Any, choice: Any) -> None:
    tool, token = stamp_tool()
    fmt = ChatFormat(tokenizer)
    first = fmt.render_prompt(task().messages, [tool.schema], choice)
    assert first.prefill.startswith("<tool_call>")
    # the model writes only the rest of the call: the prefill (not sampled) already opened it
    rest = call("lookup", key="a")[len(first.prefill):]
    replies = iter([rest, "Done." + EOS])
    rec = Recorder(ScriptedEngine(tokenizer, lambda _ids: next(replies)))
    conv = TokenConversation(rec, fmt, sampling(max_new_tokens=200), max_tokens=4096, tool_choice=choice)
    r = await run_rollout(conv, task(), {tool.name: tool}, limits())
    assert r.status == "ok" and r.finish_reason == "answer" and r.n_turns == 2
    assert r.tool_calls[0].name == "lookup" and token in r.tool_calls[0].output
    prefill_ids = fmt.encode(first.prefill)
    assert rec.prompts[0][-len(prefill_ids):] == prefill_ids  # turn 1 forced
    assert rec.prompts[0] == first.ids
    assert rec.prompts[1][-len(prefill_ids):] != prefill_ids  # turn 2 free to answer
    assert r.messages[-1].content == "Done." and r.messages[-1].tool_calls is None
    assert r.loss_mask[r.prompt_len - len(prefill_ids):r.prompt_len] == (0,) * len(prefill_ids)


@pytest.mark.parametrize("parallel", [True, False])
async def test_parallel_tool_calls_off_ends_each_turn_at_its_first_call(tokenizer: Any, parallel: bool) -> None:
    """With parallel calls the engine is asked to go on after a call's close when another call
    follows; without, the close ends the turn (the engine's stop rules: test_decode_rows)."""
    tool, _ = stamp_tool()
    replies = iter([call("lookup", key="a"), "Done." + EOS])
    rec = Recorder(ScriptedEngine(tokenizer, lambda _ids: next(replies)))
    conv = TokenConversation(rec, ChatFormat(tokenizer), sampling(max_new_tokens=200, parallel_tool_calls=parallel),
                             max_tokens=4096)
    r = await run_rollout(conv, task(), {tool.name: tool}, limits())
    assert r.status == "ok" and len(rec.params) == 2
    assert all("</tool_call>" in p.stop for p in rec.params)
    expected = ("<tool_call>",) if parallel else ()
    assert [p.stop_unless_followed_by for p in rec.params] == [expected, expected]


def chat_app(bodies: list[dict[str, Any]]) -> FastAPI:
    """An OpenAI-compatible fake: a lookup call first, then an answer naming the tool's output."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return chat_completion(body, {"role": "assistant", "content": f"Got {last['content']}."},
                                   completion_tokens=5)
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"key": "a"})}}]}
        return chat_completion(body, message, "tool_calls", completion_tokens=5)

    return recording_app("/v1/chat/completions", bodies, answer)


async def test_chat_conversation_has_no_tokens_and_forces_the_first_turn_only() -> None:
    tool, token = stamp_tool()
    bodies: list[dict[str, Any]] = []
    with serve(chat_app(bodies)) as url:
        engine = OpenAIEngine(url + "/v1", "m", api_key="sk-test", backoff_s=0.01)
        conv = ChatConversation(engine, sampling(max_new_tokens=64), max_tokens=4096, tool_choice="required")
        try:
            r = await run_rollout(conv, task(), {tool.name: tool}, limits())
        finally:
            await engine.aclose()
    assert conv.token_fields() == {}
    assert r.token_ids == () and r.loss_mask == () and r.logprobs == () and r.prompt_len == 0
    assert r.status == "ok" and token in (r.messages[-1].content or "")
    assert [b["tool_choice"] for b in bodies] == ["required", "auto"]
