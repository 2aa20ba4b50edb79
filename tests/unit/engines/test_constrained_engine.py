"""The transformers engine under a tool-call grammar: every sampled token is allowed by the mask,
its recorded logprob is the renormalised masked one (0 where the grammar allowed one text only and
the engine wrote it), and the calls it writes are valid."""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import Any

import jsonschema
import pytest
import torch

from arft.engines.base import SamplingParams
from arft.engines.transformers.engine import TransformersEngine
from arft.chat.formats import ChatFormat
from arft.records import Message
from tests.specs import sampling
from tests.unit.engines.transformers.test_engine import varied_model

TOOLS = [{"type": "function", "function": {"name": "lookup_sku", "parameters": {
    "type": "object", "required": ["sku", "count"],
    "properties": {"sku": {"type": "string", "maxLength": 12}, "count": {"type": "integer"},
                   "mode": {"enum": ["fast", "exact"]},
                   "where": {"type": "object", "required": ["shelf"],
                             "properties": {"shelf": {"type": "integer"}}}}}}},
         {"type": "function", "function": {"name": "list_bins", "parameters": {
             "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                       "maxItems": 2}}}}}]


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    torch.set_num_threads(1)
    return varied_model(tokenizer, seed=3)


def generate(engine: TransformersEngine, ids: list[int], params: SamplingParams, n: int) -> list[Any]:
    async def run() -> list[Any]:
        return list(await asyncio.gather(*(engine.generate(ids, params.model_copy(update={"seed": i}))
                                           for i in range(n))))
    return asyncio.run(run())


@dataclass
class Setup:
    engine: TransformersEngine
    fmt: ChatFormat
    rendered: Any
    grammar: Any
    params: SamplingParams


def setup(model: Any, tokenizer: Any, request: str, choice: str, temperature: float,
          max_new_tokens: int, batch: int = 4) -> Setup:
    """An engine and a constrained request: the prompt, its grammar and sampling params."""
    engine = TransformersEngine(model, tokenizer, max_batch_size=batch)
    fmt = ChatFormat(tokenizer, worked_example=False)
    rendered = fmt.render_prompt([Message(role="user", content=request)], TOOLS, choice)
    grammar = fmt.tool_grammar(TOOLS, constrain_all=True).with_prefill(rendered.prefill)
    params = sampling(temperature=temperature, max_new_tokens=max_new_tokens, stop=fmt.stop, grammar=grammar)
    return Setup(engine, fmt, rendered, grammar, params)


def test_sampled_tokens_are_allowed_and_logprobs_are_renormalised(model: Any, tokenizer: Any) -> None:
    s = setup(model, tokenizer, "Find SKU A-7 on shelf 2.", "required", 0.8, 60)
    engine, rendered, grammar, params = s.engine, s.rendered, s.grammar, s.params
    gens = generate(engine, rendered.ids, params, 4)
    compiled = engine.masker.compile(grammar)
    n_checked = n_limited = n_forced = 0
    for gen in gens:
        assert len(gen.constrained) == len(gen.token_ids) == len(gen.logprobs)
        matcher = engine.masker.matcher(compiled, rendered.prefill)
        # One causal forward over prompt + generation gives the next-token logits after every
        # prefix at once (what a forward per prefix gives, without its quadratic cost).
        with torch.no_grad():
            every = model(input_ids=torch.tensor([list(rendered.ids) + list(gen.token_ids)])).logits.float()
        after = every[:, len(rendered.ids) - 1:-1, :]
        for i, (token, logprob, limited) in enumerate(zip(gen.token_ids, gen.logprobs, gen.constrained)):
            logits = after[:, i, :]
            masked = logits.clone()
            assert engine.masker.mask(masked, [matcher]) == [limited]
            assert math.isfinite(float(masked[0, token])), "sampled a token the mask forbids"
            forced = engine.masker.forced_tokens([matcher], [limited])
            if forced:  # one allowed text: its first token written with probability 1
                assert (token, logprob) == (forced[0], 0.0)
                n_forced += 1
            else:
                expected = torch.log_softmax(masked / 0.8, dim=-1)[0, token].item()
                assert logprob == pytest.approx(expected, abs=2e-3)
            if limited and not forced:  # renormalised: at least the unmasked logprob
                assert logprob >= torch.log_softmax(logits / 0.8, dim=-1)[0, token].item() - 1e-4
                n_limited += 1
            engine.masker.accept([matcher], [token])
            n_checked += 1
    assert n_checked > 40 and n_limited > 10 and n_forced > 10
    assert engine.stats.constrained_tokens == sum(sum(g.constrained) for g in gens)


def test_every_closed_call_is_valid_against_its_schema(model: Any, tokenizer: Any) -> None:
    s = setup(model, tokenizer, "Where is A-7?", "required", 1.0, 120, batch=8)
    engine, fmt, rendered, params = s.engine, s.fmt, s.rendered, s.params
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    closed = 0
    for gen in generate(engine, rendered.ids, params, 8):
        parsed = fmt.parse(rendered.prefill, gen.text, "required")
        if gen.finish_reason == "length":
            continue  # a call cut by the token limit stays unclosed (a parse error, never repaired)
        assert not parsed.errors and parsed.tool_calls
        for tc in parsed.tool_calls:
            jsonschema.validate(json.loads(tc.function.arguments), schemas[tc.function.name])
            closed += 1
    assert closed >= 1

    # The same random model without the grammar writes no valid call at all.
    free = params.model_copy(update={"grammar": None})
    for gen in generate(engine, rendered.ids, free, 8):
        assert not fmt.parse(rendered.prefill, gen.text, "required").tool_calls


def test_a_named_tool_choice_starts_the_grammar_inside_that_call(model: Any, tokenizer: Any) -> None:
    s = setup(model, tokenizer, "Bins?", "list_bins", 1.0, 80)
    engine, fmt, rendered, params = s.engine, s.fmt, s.rendered, s.params
    for gen in generate(engine, rendered.ids, params, 4):
        if gen.finish_reason != "length":
            calls = fmt.parse(rendered.prefill, gen.text, "list_bins").tool_calls
            assert [c.function.name for c in calls][:1] == ["list_bins"]
            args = json.loads(calls[0].function.arguments)
            assert set(args) <= {"tags"} and len(args.get("tags", [])) <= 2


def test_requests_without_a_grammar_share_the_batch_unconstrained(model: Any, tokenizer: Any) -> None:
    s = setup(model, tokenizer, "Hi", "required", 0.0, 10)
    engine, rendered, grammar = s.engine, s.rendered, s.grammar
    plain = sampling(temperature=0.0, max_new_tokens=10)

    async def run() -> tuple[Any, Any, Any]:
        alone = await engine.generate(rendered.ids, plain)
        mixed = await asyncio.gather(engine.generate(rendered.ids, plain),
                                     engine.generate(rendered.ids, plain.model_copy(update={"grammar": grammar})))
        return alone, mixed[0], mixed[1]

    alone, beside, constrained = asyncio.run(run())
    assert beside.token_ids == alone.token_ids and beside.constrained == ()
    assert len(constrained.constrained) == len(constrained.token_ids) and any(constrained.constrained)
