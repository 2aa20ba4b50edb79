"""Hermes/Qwen-style tool calls: writing them and parsing them out of an assistant turn.

The format (Hermes, used by Qwen2.5/Qwen3 and by arft's own ``hermes`` chat format)::

    optional text
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
    <tool_call>
    {"name": "get_time", "arguments": {"city": "Paris"}}
    </tool_call>

Any number of blocks may appear in one turn (parallel calls). Parsing is pure string work (no
tokenizer) and lenient where real models are sloppy — whitespace, a trailing end-of-turn marker,
one stray character after the JSON, a missing final ``}`` — but it never guesses arguments: a
block it cannot read is reported in ``ParsedTurn.errors`` with the reason, and is not a call.
Unknown tool names are *not* parse errors: the rollout answers them as tool errors, so the model
sees what went wrong.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from arft.records import FunctionCall, ToolCall

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"

# End-of-turn markers of common chat templates; engines may leave one at the end of the text.
END_OF_TURN_MARKERS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end|>", "</s>")


@dataclass(frozen=True)
class ParsedTurn:
    """What an assistant turn said: its text, the calls it made, and why other blocks failed."""

    content: str | None
    """Text outside the ``<tool_call>`` blocks, stripped; ``None`` when there is none."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Well-formed calls, in order, each with a fresh ``call_<hex>`` id and canonical JSON
    arguments (always an object)."""
    errors: list[str] = field(default_factory=list)
    """One line per malformed block, e.g. ``tool call 2: invalid JSON: Expecting ',' ...``."""


def new_call_id() -> str:
    """A fresh tool-call id in the chat-completions style: ``call_<24 hex digits>``."""
    return "call_" + uuid.uuid4().hex[:24]


def canonical_arguments(arguments: dict[str, object]) -> str:
    """Arguments as a JSON string, in the spacing ``tojson`` uses in chat templates.

    Key order is kept (it is the model's); re-rendering a parsed call gives the text a
    Qwen-style template would write.
    """
    return json.dumps(arguments, ensure_ascii=False)


def format_tool_call(name: str, arguments: str | dict[str, object]) -> str:
    """One call block in the canonical Hermes/Qwen layout (no newline around it)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass  # a dataset's malformed arguments are shown as they are, never repaired
    args = arguments if isinstance(arguments, str) else canonical_arguments(arguments)
    body = '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": ' + args + "}"
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def format_tool_responses(outputs: list[str]) -> str:
    """Consecutive tool results as one Qwen-style user message body, in call order."""
    return "\n".join(f"{TOOL_RESPONSE_OPEN}\n{out}\n{TOOL_RESPONSE_CLOSE}" for out in outputs)


def strip_end_of_turn(text: str, markers: tuple[str, ...] = END_OF_TURN_MARKERS) -> str:
    """``text`` without trailing whitespace and end-of-turn markers (``...<|im_end|>\n``)."""
    stripped = text.rstrip()
    changed = True
    while changed:
        changed = False
        for marker in markers:
            if marker and stripped.endswith(marker):
                stripped = stripped[: -len(marker)].rstrip()
                changed = True
    return stripped


def _split_blocks(text: str) -> tuple[list[str], list[str | None], list[str]]:
    """Text outside the blocks, each block's body (``None`` if unclosed), and unclosed reasons."""
    outside: list[str] = []
    bodies: list[str | None] = []
    reasons: list[str] = []
    pos = 0
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        if start < 0:
            outside.append(text[pos:])
            return outside, bodies, reasons
        outside.append(text[pos:start])
        body_start = start + len(TOOL_CALL_OPEN)
        scan = _json_end(text, body_start)  # a marker inside an argument string is content
        end = text.find(TOOL_CALL_CLOSE, scan)
        nxt = text.find(TOOL_CALL_OPEN, scan)
        if nxt >= 0 and (end < 0 or nxt < end):
            bodies.append(None)
            reasons.append(f"unclosed {TOOL_CALL_OPEN}: a new {TOOL_CALL_OPEN} starts before "
                           f"{TOOL_CALL_CLOSE}")
            pos = nxt
        elif end < 0:
            bodies.append(None)
            reasons.append(f"unclosed {TOOL_CALL_OPEN}: the turn ended before {TOOL_CALL_CLOSE}")
            return outside, bodies, reasons
        else:
            bodies.append(text[body_start:end])
            reasons.append("")
            pos = end + len(TOOL_CALL_CLOSE)


def _json_end(text: str, start: int) -> int:
    """Where the JSON value that starts at ``start`` (after whitespace) ends, or ``start`` when
    none decodes there: a block's close is looked for after its JSON, so that ``</tool_call>``
    written inside an argument's string does not end the block."""
    s = start + len(text[start:start + 64]) - len(text[start:start + 64].lstrip())
    try:
        return json.JSONDecoder(strict=False).raw_decode(text, s)[1]
    except (json.JSONDecodeError, RecursionError, ValueError):
        return start


def _loads_lenient(body: str) -> Any:
    """The JSON value in ``body``; raises ``ValueError`` with the reason when there is none.

    Accepted sloppiness: surrounding whitespace, one stray character after the value (``}}}``
    is a common small-model slip), a missing final ``}`` (the arguments are complete; only
    the outer object is left open) and raw control characters inside strings (unambiguous; the
    grammar engine's bounded strings let them through, and the canonical arguments escape them).
    Anything else is an error: arguments are never guessed.
    """
    s = body.strip()
    if not s:
        raise ValueError("empty block (write a JSON object with \"name\" and \"arguments\")")
    decoder = json.JSONDecoder(strict=False)
    try:
        value, end = decoder.raw_decode(s)
    except json.JSONDecodeError as first:
        try:
            value, end = decoder.raw_decode(s + "}")
            s += "}"
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"invalid JSON: {first}") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to read; write one flat object with \"name\" "
                         "and \"arguments\"") from None
    rest = s[end:].strip()
    if len(rest) > 1:
        raise ValueError(f"unexpected text after the JSON object: {rest[:40]!r}")
    return value


def _call_from_object(obj: object) -> ToolCall:
    """A ToolCall from one decoded JSON value; raises ``ValueError`` saying what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object with \"name\" and \"arguments\", got "
                         f"{type(obj).__name__}")
    function = obj.get("function")
    if isinstance(function, dict) and "name" not in obj:
        obj = function  # chat-completions shape written inside the tags
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("no \"name\" (a non-empty string naming the tool) in the call")
    args: Any = obj["arguments"] if "arguments" in obj else obj.get("parameters", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"\"arguments\" is a string that is not valid JSON: {e}") from None
    if not isinstance(args, dict):
        raise ValueError(f"\"arguments\" must be a JSON object, got {type(args).__name__}")
    return ToolCall(id=new_call_id(),
                    function=FunctionCall(name=name.strip(), arguments=canonical_arguments(args)))


def _calls_from_body(body: str) -> list[ToolCall]:
    """The call(s) in one block: an object, or a list of objects (some models batch them)."""
    value = _loads_lenient(body)
    if isinstance(value, list):
        if not value:
            raise ValueError("empty list of calls")
        return [_call_from_object(v) for v in value]
    return [_call_from_object(value)]


def _bare_call(text: str, allowed: set[str]) -> ToolCall | None:
    """A whole turn that is just ``{"name": <allowed tool>, "arguments": ...}`` without tags."""
    if not text.startswith("{"):
        return None
    try:
        call = _call_from_object(_loads_lenient(text))
    except ValueError:
        return None
    return call if call.function.name in allowed else None


def parse_tool_calls(text: str, allowed: set[str] | None = None) -> ParsedTurn:
    """Split an assistant turn into its content, its tool calls and its malformed blocks.

    ``allowed``: the names of the tools this turn may call. Calls to other names are still
    returned (the rollout reports them as tool errors). When given, it also lets a turn that
    is *only* a bare JSON call to one of these tools (no ``<tool_call>`` tags, a common
    small-model slip) count as that call; requiring a known name keeps ordinary JSON answers
    from being taken for calls.
    """
    text = strip_end_of_turn(text)
    outside, bodies, reasons = _split_blocks(text)
    calls: list[ToolCall] = []
    errors: list[str] = []
    for number, (body, reason) in enumerate(zip(bodies, reasons), start=1):
        if body is None:
            errors.append(f"tool call {number}: {reason}")
            continue
        try:
            calls.extend(_calls_from_body(body))
        except ValueError as e:
            errors.append(f"tool call {number}: {e}")
    content = "\n".join(p.strip() for p in outside if p.strip()) or None
    if not bodies and allowed and content is not None:
        bare = _bare_call(content, allowed)
        if bare is not None:
            return ParsedTurn(content=None, tool_calls=[bare], errors=[])
    return ParsedTurn(content=content, tool_calls=calls, errors=errors)
