"""A constrained call always finishes: the grammar's shortest completion of an open call
(``arft.engines.call_closing``) and the transformers engine writing it before ``max_new_tokens``
would cut the call, with the forced tokens recorded as constrained, logprob 0."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from arft.engines.call_closing import CallCloser
from arft.engines.grammar import ToolCallMasker, turn_tag
from arft.engines.transformers.engine import TransformersEngine
from tests.unit.engines.test_constrained_engine import TOOLS, generate, setup

SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
LONG = [{"type": "function", "function": {"name": "note", "parameters": {
    "type": "object", "required": ["text", "tag"],
    "properties": {"text": {"type": "string", "minLength": 3}, "tag": {"enum": ["red", "blue"]}}}}}]


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    from tests.unit.engines.transformers.test_engine import varied_model

    return varied_model(tokenizer, seed=3)


def completion(tokenizer: Any, tools: list[dict[str, Any]], written: str) -> str | None:
    """The shortest completion after the call's ``written`` text (the name onwards)."""
    from arft.chat.formats import ChatFormat

    grammar = ChatFormat(tokenizer, worked_example=False).tool_grammar(tools, constrain_all=True)
    masker = ToolCallMasker(tokenizer, len(tokenizer), [tokenizer.eos_token_id])
    matcher = masker.matcher(masker.compile(grammar), grammar.call_begin)
    assert matcher.accept_string(written)
    return CallCloser(tokenizer, len(tokenizer), [tokenizer.eos_token_id]).shortest_completion(matcher)


@pytest.mark.parametrize("written, rest", [
    # An open string closes, then the required key still missing gets the shortest value.
    ('lookup_sku", "arguments": {"sku": "A-7', '", "count": 0}}\n</tool_call>'),
    ('lookup_sku", "arguments": {"sku": "A-7", "count": 1', '}}\n</tool_call>'),
    ('lookup_sku", "arguments": {"sku": "A", "count": -', '1}}\n</tool_call>'),
    ('lookup_sku", "arguments": {"sku": "A", "count": 2, "where": {', '"shelf": 0}}}\n</tool_call>'),
    ('list_bins", "arguments": {"tags": ["x', '"]}}\n</tool_call>'),
    ('l', 'ist_bins", "arguments": {}}\n</tool_call>'),
])
def test_the_shortest_completion_closes_the_call(tokenizer: Any, written: str, rest: str) -> None:
    assert completion(tokenizer, TOOLS, written) == rest


def test_a_completion_meets_min_length_and_picks_an_enum_value(tokenizer: Any) -> None:
    rest = completion(tokenizer, LONG, 'note", "arguments": {"text": "a')
    assert rest is not None and rest.endswith('"}}\n</tool_call>')
    args = json.loads('{"text": "a' + rest.split("}}\n")[0] + "}")
    jsonschema.validate(args, LONG[0]["function"]["parameters"])
    assert len(args["text"]) == 3  # filled to minLength, no longer


def run(model: Any, tokenizer: Any, max_new: int, close: bool) -> tuple[TransformersEngine, list[Any]]:
    """8 constrained samples of one prompt with ``max_new`` tokens: the engine and (gen, parsed)."""
    s = setup(model, tokenizer, "Find SKU A-7 on shelf 2.", "required", 1.0, max_new, batch=8)
    s.engine.closer.enabled = close
    gens = generate(s.engine, s.rendered.ids, s.params, 8)
    return s.engine, [(g, s.fmt.parse(s.rendered.prefill, g.text, "required")) for g in gens]


def test_no_turn_ends_inside_a_call_and_forced_tokens_are_honest(model: Any, tokenizer: Any) -> None:
    engine, results = run(model, tokenizer, 28, close=True)
    gens = [g for g, _ in results]
    assert engine.stats.cut_calls == 0 and engine.stats.closed_calls == sum(g.closed_calls for g in gens) > 0
    for gen, parsed in results:
        assert not parsed.errors and parsed.tool_calls, gen.text
        for call in parsed.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        if gen.closed_calls:  # ends at the closed call, its last tokens written with probability 1
            assert gen.finish_reason == "stop" and gen.text.endswith("</tool_call>")
            assert gen.logprobs[-3:] == (0.0, 0.0, 0.0) and all(gen.constrained[-3:])
        assert len(gen.token_ids) <= 28


@pytest.fixture(scope="module")
def without_closing(model: Any, tokenizer: Any) -> tuple[TransformersEngine, list[Any]]:
    return run(model, tokenizer, 28, close=False)


def test_without_closing_the_budget_cuts_calls(without_closing: tuple[TransformersEngine, list[Any]]) -> None:
    engine, results = without_closing
    cut = [g for g, parsed in results if parsed.errors or not parsed.tool_calls]
    assert cut and engine.stats.cut_calls == len(cut) and engine.stats.closed_calls == 0
    assert all(g.closed_calls == 0 and g.finish_reason == "length" for g in cut)


def test_a_turn_a_server_cut_inside_a_call_is_closed_by_the_same_rule(
        model: Any, tokenizer: Any, without_closing: tuple[TransformersEngine, list[Any]]) -> None:
    # What the vLLM engine gets back from a server that cannot close calls: turns cut inside a call.
    engine, results = without_closing
    s = setup(model, tokenizer, "Find SKU A-7 on shelf 2.", "required", 1.0, 28)
    closer = CallCloser(tokenizer, len(tokenizer), [tokenizer.eos_token_id])
    compiled = engine.masker.compile_tag(turn_tag(s.grammar, parallel=False))
    cut = [g for g, parsed in results if parsed.errors or not parsed.tool_calls]
    assert cut
    for gen in cut:
        tail = closer.close_replayed(engine.masker.matcher(compiled), gen.token_ids, 28)
        assert tail is not None and tail.at < len(gen.token_ids)
        ids = [*gen.token_ids[:tail.at], *tail.tokens]
        assert len(ids) <= 28
        parsed = s.fmt.parse(s.rendered.prefill, tokenizer.decode(ids), "required")
        assert not parsed.errors and len(parsed.tool_calls) == 1
        call = parsed.tool_calls[0].function
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_the_rollout_and_its_summary_count_the_closed_calls(model: Any, tokenizer: Any) -> None:
    import asyncio

    from arft.chat.formats import ChatFormat
    from arft.metrics.summary import flat_metrics, summarize
    from arft.records import Message, Task
    from arft.rollout.conversation import TokenConversation
    from arft.rollout.loop import run_rollout
    from arft.tools.python_fn import PythonTool
    from tests.specs import limits, sampling

    def note(text: str) -> str:
        """Write a note.

        Args:
            text: The note.
        """
        return "noted"

    tool = PythonTool.from_function(note)
    engine = TransformersEngine(model, tokenizer, max_batch_size=2)

    async def one(seed: int) -> Any:
        conv = TokenConversation(engine, ChatFormat(tokenizer, worked_example=False),
                                 sampling(temperature=1.0, max_new_tokens=20), max_tokens=2048,
                                 tool_choice="required", seed=seed, constrain=True)
        task = Task(id="t", messages=(Message(role="user", content="Note that A-7 is on shelf 2."),),
                    tools=(tool.schema,))
        return await run_rollout(conv, task, {tool.name: tool}, limits(max_turns=1))

    rollouts = [asyncio.run(one(seed)) for seed in range(2)]
    assert sum(r.closed_calls for r in rollouts) == engine.stats.closed_calls >= 1
    assert all(r.parse_errors == 0 and r.tool_calls and r.tool_calls[0].status == "ok" for r in rollouts)
    assert flat_metrics(summarize(rollouts), "eval")["eval/closed_calls"] == engine.stats.closed_calls


@pytest.mark.parametrize("room, verdicts_end", [(40, None), (4, "stop")])
def test_a_second_call_the_budget_cannot_fit_is_dropped_with_the_look_ahead(
        tokenizer: Any, room: int, verdicts_end: str | None) -> None:
    import asyncio

    from arft.chat.formats import ChatFormat
    from arft.engines.transformers.decode_rows import FinishRules, Request, Row
    from arft.engines.transformers.sampling import RowSampling
    from tests.specs import sampling

    fmt = ChatFormat(tokenizer, worked_example=False)
    grammar = fmt.tool_grammar(TOOLS, constrain_all=True).with_prefill(fmt.render_prompt(
        [], TOOLS, "required").prefill)
    eos = [tokenizer.eos_token_id]
    masker = ToolCallMasker(tokenizer, len(tokenizer), eos)
    closer = CallCloser(tokenizer, len(tokenizer), eos)
    first = tokenizer.encode('list_bins", "arguments": {}}\n</tool_call>', add_special_tokens=False)
    second = tokenizer.encode("\n<tool_call>", add_special_tokens=False)
    params = sampling(max_new_tokens=len(first) + len(second) + room, grammar=grammar,
                      **fmt.turn_stops((), True))
    loop = asyncio.new_event_loop()
    try:
        matcher = masker.matcher(masker.compile(grammar), grammar.prefill)
        row = Row(Request([1], params, loop.create_future(), loop, matcher), RowSampling(), None, 64)
        rules = FinishRules(tokenizer, frozenset(eos), masker, closer)
        verdicts = []
        for token in [*first, *second]:
            assert matcher.accept_token(token)
            row.tokens.append(token)
            row.logprobs.append(0.0)
            verdicts.append(rules.finish_reason(row))
    finally:
        loop.close()
    assert verdicts[:len(first)] == [None] * len(first)  # the first call closes: look ahead
    assert verdicts[-1] == verdicts_end
    assert row.closing.dropped == (verdicts_end == "stop")
    if verdicts_end == "stop":  # no room for a second call: the turn ends at the first one's close
        assert row.tokens == first
