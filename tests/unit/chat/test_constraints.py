"""Constrained tool calls: the grammar of a toolset, the keyword check, and the masker (xgrammar).

Grammar tests feed whole texts to a matcher of the compiled grammar (no model): a text the
grammar accepts is one the masked sampler can produce, a rejected one it never can.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from arft.chat.constraints import (ENFORCED_KEYWORDS, ConstraintError, GrammarTool, ToolGrammar,
                                      check_schema, grammar_tools)
from arft.engines.grammar import ToolCallMasker

BEGIN, INFIX, END = '<tool_call>\n{"name": "', '", "arguments": ', "}\n</tool_call>"


def grammar(*tools: tuple[str, dict[str, Any]]) -> ToolGrammar:
    return ToolGrammar(tools=tuple(GrammarTool(name=n, parameters=p) for n, p in tools),
                       trigger="<tool_call>", call_begin=BEGIN, args_infix=INFIX, call_end=END)


def call(name: str, args: str) -> str:
    return f"{BEGIN}{name}{INFIX}{args}{END}"


@pytest.fixture(scope="module")
def masker(tokenizer: Any) -> ToolCallMasker:
    return ToolCallMasker(tokenizer, len(tokenizer), [tokenizer.eos_token_id])


def accepts(masker: ToolCallMasker, g: ToolGrammar, text: str) -> bool:
    return bool(masker.matcher(masker.compile(g)).accept_string(text))


def obj(required: tuple[str, ...] = (), **props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required)}


WEATHER = ("get_weather", obj(("city",), city={"type": "string"},
                             unit={"enum": ["c", "f"]}, days={"type": "integer"}))
SEARCH = ("search_docs", obj(("query",), query={"type": "string"},
                             filters=obj(("lang",), lang={"type": "string"}),
                             tags={"type": "array", "items": {"type": "string"}}))


@pytest.mark.parametrize("text, ok", [
    (call("get_weather", '{"city": "Paris"}'), True),
    (call("get_weather", '{"city": "Paris", "unit": "c", "days": 3}'), True),
    (call("get_weather", '{}'), False),                                   # required key missing
    (call("get_weather", '{"city": 7}'), False),                          # wrong type
    (call("get_weather", '{"city": "Paris", "days": "3"}'), False),       # integer as a string
    (call("get_weather", '{"city": "Paris", "unit": "kelvin"}'), False),  # not in the enum
    (call("get_weather", '{"city": "Paris", "country": "FR"}'), False),   # no extra keys
    (call("get_wether", '{"city": "Paris"}'), False),                     # unknown tool name
    (call("search_docs", '{"query": "q", "filters": {"lang": "en"}, "tags": ["a", "b"]}'), True),
    (call("search_docs", '{"query": "q", "filters": {}}'), False),        # nested required key
    (call("search_docs", '{"query": "q", "filters": {"lang": "en", "x": 1}}'), False),  # nested extra
    (call("search_docs", '{"query": "q", "tags": ["a", 2]}'), False),     # array item type
    (call("get_weather", '{"city": "Paris"}').replace("</tool_call>", "</tool>"), False),  # close
    ('<tool_call>\n{"name": "get_weather", "args": {"city": "Paris"}}\n</tool_call>', False),
])
def test_call_must_match_a_tool_and_its_schema(masker: ToolCallMasker, text: str, ok: bool) -> None:
    assert accepts(masker, grammar(WEATHER, SEARCH), text) is ok


def test_text_outside_calls_is_free_and_parallel_calls_fit_in_one_turn(masker: ToolCallMasker) -> None:
    g = grammar(WEATHER, SEARCH)
    assert accepts(masker, g, "No tool needed: it is 4. <tool> is not a call.")
    first, second = call("get_weather", '{"city": "Paris"}'), call("search_docs", '{"query": "Paris"}')
    two = f"Let me check both.\n{first}\n{second}\nDone."
    assert accepts(masker, g, two)


def test_end_of_turn_is_allowed_only_outside_a_call(masker: ToolCallMasker, tokenizer: Any) -> None:
    import torch

    g = grammar(WEATHER)
    eos = tokenizer.eos_token_id

    def eos_allowed(prefix: str) -> bool:
        m = masker.matcher(masker.compile(g), prefix)
        logits = torch.zeros(1, len(tokenizer))
        masker.mask(logits, [m])
        return bool(logits[0, eos] == 0)

    assert eos_allowed("Sure.")
    assert not eos_allowed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par')
    assert eos_allowed(call("get_weather", '{"city": "Paris"}'))


def test_additional_properties_true_allows_extra_keys(masker: ToolCallMasker) -> None:
    open_schema = {**obj(("a",), a={"type": "string"}), "additionalProperties": True}
    assert accepts(masker, grammar(("f", open_schema)), call("f", '{"a": "x", "b": 1}'))


# keyword -> (schema of property "v", a valid value, an invalid value): each enforced keyword is
# really enforced by the grammar engine, which is what check_schema's allow-list promises.
KEYWORDS: dict[str, tuple[dict[str, Any], str, str]] = {
    "type": ({"type": "integer"}, "3", '"3"'),
    "enum": ({"enum": ["a", "b"]}, '"a"', '"c"'),
    "const": ({"const": 5}, "5", "4"),
    "items": ({"type": "array", "items": {"type": "integer"}}, "[1, 2]", '["x"]'),
    "prefixItems": ({"type": "array", "prefixItems": [{"type": "integer"}]}, "[1]", '["x"]'),
    "minItems": ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, "[1, 2]", "[1]"),
    "maxItems": ({"type": "array", "items": {"type": "integer"}, "maxItems": 1}, "[1]", "[1, 2]"),
    "anyOf": ({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, "true", '"x"'),
    "oneOf": ({"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, "1", '"x"'),
    "allOf": ({"allOf": [{"type": "integer"}]}, "1", '"x"'),
    "$ref": ({"$ref": "#/$defs/n"}, "1", '"x"'),
    "pattern": ({"type": "string", "pattern": "[0-9]"}, '"a1b"', '"ab"'),  # a search, not a full match
    "format": ({"type": "string", "format": "date"}, '"2026-12-03"', '"soon"'),
    "minLength": ({"type": "string", "minLength": 3}, '"abc"', '"x"'),
    "maxLength": ({"type": "string", "maxLength": 2}, '"ab"', '"abc"'),
    "minimum": ({"type": "integer", "minimum": 3}, "3", "2"),
    "maximum": ({"type": "integer", "maximum": 3}, "3", "4"),
    "exclusiveMinimum": ({"type": "number", "exclusiveMinimum": 3}, "4", "3"),
    "exclusiveMaximum": ({"type": "number", "exclusiveMaximum": 3}, "2", "3"),
    "multipleOf": ({"type": "integer", "multipleOf": 3}, "6", "4"),
    "minProperties": ({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1},
                      '{"a": 1}', "{}"),
    "maxProperties": ({"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 1},
                      '{"a": 1}', '{"a": 1, "b": 2}'),
    "patternProperties": ({"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
                          '{"x1": 1}', '{"y": 1}'),
    "propertyNames": ({"type": "object", "propertyNames": {"pattern": "^a"},
                       "additionalProperties": {"type": "integer"}}, '{"ab": 1}', '{"b": 1}'),
}


@pytest.mark.parametrize("keyword", sorted(KEYWORDS))
def test_every_enforced_keyword_is_enforced(masker: ToolCallMasker, keyword: str) -> None:
    prop, good, bad = KEYWORDS[keyword]
    schema = {**obj(("v",), v=prop), "$defs": {"n": {"type": "integer"}}}
    check_schema("f", schema)  # on the allow-list
    g = grammar(("f", schema))
    assert accepts(masker, g, call("f", f'{{"v": {good}}}'))
    assert not accepts(masker, g, call("f", f'{{"v": {bad}}}'))


def test_the_allow_list_is_covered() -> None:
    structural = {"properties", "required", "additionalProperties", "$defs", "definitions"}
    assert ENFORCED_KEYWORDS - structural == set(KEYWORDS)


@pytest.mark.parametrize("schema, keyword, where", [
    (obj(v={"not": {"type": "string"}}), "not", "#/properties/v"),
    ({**obj(a={"type": "string"}), "if": {"required": ["a"]}, "then": {"required": ["b"]}}, "if", "#"),
    ({**obj(a={"type": "string"}), "dependentRequired": {"a": ["b"]}}, "dependentRequired", "#"),
    (obj(v={"type": "array", "items": {"type": "string", "contentEncoding": "base64"}}),
     "contentEncoding", "#/properties/v/items"),
])
def test_a_keyword_the_grammar_would_ignore_is_a_clear_error(schema: dict[str, Any], keyword: str,
                                                              where: str) -> None:
    with pytest.raises(ConstraintError) as e:
        grammar_tools([{"type": "function", "function": {"name": "lookup", "parameters": schema}}], True)
    msg = str(e.value)
    assert "tool 'lookup'" in msg and f"'{keyword}'" in msg and f"(at {where})" in msg
    assert "constrained_tool_calls: false" in msg


def test_a_schema_that_does_not_compile_names_the_tool(masker: ToolCallMasker) -> None:
    bad = obj(("v",), v={"type": "string", "pattern": "(?<=x)y"})  # lookbehind: not supported
    with pytest.raises(ConstraintError, match=r"tool 'broken'.*cannot be compiled.*Lookbehind"):
        masker.compile(grammar(WEATHER, ("broken", bad)))


def test_strict_tools_are_constrained_even_with_the_option_off() -> None:
    loose = {"type": "function", "function": {"name": "loose", "parameters": obj(a={"type": "string"})}}
    strict = {"type": "function", "function": {"name": "exact", "strict": True,
                                               "parameters": obj(("b",), b={"type": "integer"})}}
    assert grammar_tools([loose], constrain_all=False) == ()
    tools = {t.name: t for t in grammar_tools([loose, strict], constrain_all=False)}
    assert tools["exact"].strict and tools["exact"].parameters["required"] == ["b"]
    assert not tools["loose"].strict and tools["loose"].parameters == {"type": "object", "additionalProperties": True}
    every = {t.name: t for t in grammar_tools([loose, strict], constrain_all=True)}
    assert every["loose"].strict and every["loose"].parameters == loose["function"]["parameters"]


def test_strict_grammar_holds_only_the_strict_tool_to_its_schema(masker: ToolCallMasker) -> None:
    loose = {"type": "function", "function": {"name": "loose", "parameters": obj(a={"type": "string"})}}
    strict = {"name": "exact", "strict": True, "parameters": obj(("b",), b={"type": "integer"})}
    g = ToolGrammar(tools=grammar_tools([loose, strict], False), trigger="<tool_call>",
                    call_begin=BEGIN, args_infix=INFIX, call_end=END)
    assert accepts(masker, g, call("loose", '{"anything": [1, 2]}'))
    assert not accepts(masker, g, call("exact", '{"b": "2"}'))
    assert accepts(masker, g, call("exact", '{"b": 2}'))


def test_grammars_are_compiled_once_per_toolset(masker: ToolCallMasker) -> None:
    g = grammar(WEATHER)
    assert masker.compile(g) is masker.compile(g.with_prefill("<tool_call>"))
    assert masker.compile(g) is not masker.compile(grammar(WEATHER, SEARCH))


def test_a_prefill_outside_the_grammar_is_an_error(masker: ToolCallMasker) -> None:
    with pytest.raises(ConstraintError, match="does not fit"):
        masker.matcher(masker.compile(grammar(WEATHER)), '<tool_call>\n{"name": "nope", "arguments":')


def test_grammar_key_ignores_the_prefill() -> None:
    g = grammar(WEATHER)
    assert g.key() == g.with_prefill("<tool_call>").key()
    assert json.loads(g.key())["tools"][0]["name"] == "get_weather"


@pytest.mark.parametrize("pattern, good, bad", [
    ("^[0-9]+$", "42", "4a"), ("^ab", "abc", "cab"), ("c$", "abc", "abd"), ("a|b", "xbx", "xcx"),
    (r"\$$", "5$", "5"),
])
def test_patterns_keep_json_schema_search_semantics(masker: ToolCallMasker, pattern: str, good: str,
                                                    bad: str) -> None:
    g = grammar(("f", obj(("v",), v={"type": "string", "pattern": pattern})))
    assert accepts(masker, g, call("f", json.dumps({"v": good})))
    assert not accepts(masker, g, call("f", json.dumps({"v": bad})))
