"""Parsing Hermes/Qwen tool calls out of assistant text (pure: no tokenizer)."""

from __future__ import annotations

import json
import re

from arft.chat.toolcalls import (
    format_tool_call,
    format_tool_responses,
    parse_tool_calls,
    strip_end_of_turn,
)

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_one_call() -> None:
    turn = parse_tool_calls(CALL)
    assert turn.errors == []
    assert turn.content is None
    [call] = turn.tool_calls
    assert call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.function.arguments == '{"city": "Paris"}'  # canonical spacing
    assert re.fullmatch(r"call_[0-9a-f]{24}", call.id)


def test_parallel_calls_keep_order_and_get_distinct_ids() -> None:
    text = CALL + "\n" + CALL.replace("Paris", "Tokyo").replace("get_weather", "get_time")
    turn = parse_tool_calls(text)
    assert turn.errors == []
    assert [c.function.name for c in turn.tool_calls] == ["get_weather", "get_time"]
    assert json.loads(turn.tool_calls[1].function.arguments) == {"city": "Tokyo"}
    assert turn.tool_calls[0].id != turn.tool_calls[1].id
    assert turn.content is None


def test_text_around_calls_is_the_content() -> None:
    turn = parse_tool_calls("Let me check.\n" + CALL + "\nOne moment.  ")
    assert turn.content == "Let me check.\nOne moment."
    assert len(turn.tool_calls) == 1


def test_plain_answer_and_empty_text() -> None:
    assert parse_tool_calls("  The answer is 42. ").content == "The answer is 42."
    empty = parse_tool_calls("")
    assert (empty.content, empty.tool_calls, empty.errors) == (None, [], [])


def test_malformed_json_is_an_error_and_other_blocks_still_parse() -> None:
    bad = '<tool_call>\n{"name": "get_weather" "arguments": {}}\n</tool_call>'
    turn = parse_tool_calls(bad + "\n" + CALL)
    assert len(turn.errors) == 1
    assert turn.errors[0].startswith("tool call 1: invalid JSON: Expecting ',' delimiter")
    assert [c.function.name for c in turn.tool_calls] == ["get_weather"]
    # The broken block is not content either: it is reported, not shown twice.
    assert turn.content is None


def test_error_numbers_name_the_block() -> None:
    turn = parse_tool_calls(CALL + '\n<tool_call>{"arguments": {}}</tool_call>')
    assert len(turn.tool_calls) == 1
    assert turn.errors == ['tool call 2: no "name" (a non-empty string naming the tool) in the call']


def test_missing_or_empty_name() -> None:
    for body in ('{"arguments": {"a": 1}}', '{"name": "", "arguments": {}}', '{"name": 3}'):
        turn = parse_tool_calls(f"<tool_call>{body}</tool_call>")
        assert turn.tool_calls == []
        assert len(turn.errors) == 1 and '"name"' in turn.errors[0]


def test_string_arguments_are_decoded() -> None:
    body = json.dumps({"name": "f", "arguments": json.dumps({"a": 1, "b": "x"})})
    [call] = parse_tool_calls(f"<tool_call>{body}</tool_call>").tool_calls
    assert call.function.arguments == '{"a": 1, "b": "x"}'


def test_bad_arguments_are_errors_never_guessed() -> None:
    cases = {
        '{"name": "f", "arguments": "{not json"}': "is a string that is not valid JSON",
        '{"name": "f", "arguments": [1, 2]}': '"arguments" must be a JSON object, got list',
        '{"name": "f", "arguments": "[1]"}': '"arguments" must be a JSON object, got list',
        '"just a string"': "expected a JSON object",
        "": "empty block",
    }
    for body, reason in cases.items():
        turn = parse_tool_calls(f"<tool_call>\n{body}\n</tool_call>")
        assert turn.tool_calls == [], body
        assert len(turn.errors) == 1 and reason in turn.errors[0], (body, turn.errors)
        assert turn.errors[0].startswith("tool call 1: ")


def test_parameters_alias_and_missing_arguments() -> None:
    turn = parse_tool_calls('<tool_call>{"name": "f", "parameters": {"q": "x"}}</tool_call>'
                            '<tool_call>{"name": "g"}</tool_call>')
    assert [(c.function.name, c.function.arguments) for c in turn.tool_calls] == [
        ("f", '{"q": "x"}'), ("g", "{}")]


def test_unclosed_tag_at_the_end() -> None:
    turn = parse_tool_calls('Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"ci')
    assert turn.tool_calls == []
    assert turn.errors == ["tool call 1: unclosed <tool_call>: the turn ended before </tool_call>"]
    assert turn.content == "Sure."
    # A good call, then one cut off by the token limit: the good one still counts.
    turn = parse_tool_calls(CALL + '\n<tool_call>\n{"name": "f"')
    assert len(turn.tool_calls) == 1
    assert turn.errors[0].startswith("tool call 2: unclosed <tool_call>")


def test_new_block_before_close_is_an_unclosed_error() -> None:
    turn = parse_tool_calls('<tool_call>{"name": "a", "arguments": {}}\n' + CALL)
    assert [c.function.name for c in turn.tool_calls] == ["get_weather"]
    assert turn.errors == ["tool call 1: unclosed <tool_call>: a new <tool_call> starts before "
                           "</tool_call>"]


def test_trailing_end_of_turn_marker_is_ignored() -> None:
    for tail in ("<|im_end|>", "<|im_end|>\n", "\n<|eot_id|>", "</s>"):
        turn = parse_tool_calls("Done." + tail)
        assert turn.content == "Done.", tail
        assert len(parse_tool_calls(CALL + tail).tool_calls) == 1
    assert strip_end_of_turn("x<|im_end|>\n", ("<|im_end|>",)) == "x"


def test_sloppy_whitespace_and_one_stray_character() -> None:
    loose = '<tool_call>   {"name":"f",\n "arguments":{"a":1}}  \n\n</tool_call>'
    assert parse_tool_calls(loose).tool_calls[0].function.arguments == '{"a": 1}'
    extra_brace = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}}\n</tool_call>'
    assert parse_tool_calls(extra_brace).errors == []
    missing_brace = '<tool_call>\n{"name": "f", "arguments": {"a": 1}\n</tool_call>'
    [call] = parse_tool_calls(missing_brace).tool_calls
    assert call.function.arguments == '{"a": 1}'
    # More than one stray character is not guessed at.
    garbage = '<tool_call>\n{"name": "f", "arguments": {}} and more\n</tool_call>'
    turn = parse_tool_calls(garbage)
    assert turn.tool_calls == []
    assert "unexpected text after the JSON object: 'and more'" in turn.errors[0]


def test_unknown_tool_names_are_calls_not_parse_errors() -> None:
    turn = parse_tool_calls('<tool_call>{"name": "nope", "arguments": {}}</tool_call>',
                            allowed={"get_weather"})
    assert turn.errors == []
    assert turn.tool_calls[0].function.name == "nope"


def test_bare_json_call_counts_only_for_allowed_names() -> None:
    bare = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    assert parse_tool_calls(bare).tool_calls == []
    assert parse_tool_calls(bare).content == bare
    turn = parse_tool_calls(bare + "<|im_end|>", allowed={"get_weather"})
    assert turn.content is None and turn.errors == []
    assert turn.tool_calls[0].function.arguments == '{"city": "Oslo"}'
    assert parse_tool_calls(bare, allowed={"other"}).tool_calls == []


def test_list_of_calls_in_one_block() -> None:
    body = json.dumps([{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}])
    turn = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert [c.function.name for c in turn.tool_calls] == ["a", "b"]


def test_format_round_trips_through_the_parser() -> None:
    args = {"query": "café ☕", "n": 2, "nested": {"k": [1, 2]}}
    text = format_tool_call("search", json.dumps(args))
    assert text.startswith('<tool_call>\n{"name": "search", "arguments": {"query": "café ☕"')
    [call] = parse_tool_calls(text).tool_calls
    assert call.function.name == "search"
    assert json.loads(call.function.arguments) == args
    assert format_tool_call(call.function.name, call.function.arguments) == text


def test_format_tool_responses_layout() -> None:
    assert format_tool_responses(["a", "b"]) == (
        "<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response>")


def test_raw_control_characters_in_a_string_are_read_and_escaped() -> None:
    turn = parse_tool_calls('<tool_call>\n{"name": "f", "arguments": {"s": "a\x0cb"}}\n</tool_call>')
    assert not turn.errors
    assert turn.tool_calls[0].function.arguments == '{"s": "a\\fb"}'
    assert json.loads(turn.tool_calls[0].function.arguments) == {"s": "a\x0cb"}


def test_markers_inside_an_argument_string_are_content() -> None:
    """A constrained call's string may hold ``</tool_call>`` (the grammar allows any text
    there): the block ends after its JSON, not at the first marker."""
    text = ('<tool_call>\n{"name": "calc", "arguments": {"e": "a</tool_call> b<tool_call>"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "c2", "arguments": {}}\n</tool_call>')
    parsed = parse_tool_calls(text)
    assert parsed.errors == [] and parsed.content is None
    assert [(c.function.name, c.function.arguments) for c in parsed.tool_calls] == [
        ("calc", '{"e": "a</tool_call> b<tool_call>"}'), ("c2", "{}")]
