"""Generic Hypothesis strategies for fuzzing: junk JSON, nasty strings, near-valid mutation of a
valid example, and corruption of its serialised text.

Random junk is rejected at the first check of a parser; a valid example with one to three small
mutations (a key dropped, a value of the wrong type, a huge or odd string, extra nesting) gets
past the early checks and reaches the deep code, which is where unhandled exceptions hide.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import strategies as st

NASTY_STRINGS = (
    "", " ", "\n", "\r\n", "\t", "\x00", "\x7f", "\ufeff", "\u2028", "\ud800", "\udfff",
    "🙂", "é", "\u0301", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "null", "true", "0", "-1", "1e309", "NaN", "[]", "{}",
    "{", "}", "[", "\"", "\\", "'", "{{", "}}", "{{ item.answer }}", "{{ sample.output_text }}",
    "{{ sample.output_tools[0].function.arguments }}", "{{ item[\"a b\"] }}", "{{ nope }}",
    "<tool_call>", "</tool_call>", "<|im_end|>", "auto", "none", "required", "function",
    "builtin", "reinforcement", "..", "../x", "/", "/etc/passwd", "~", "a:b", "x.py:f",
    "http://", "http://127.0.0.1:9/x", "file:///etc/passwd", "(", ")", "*", "?", "(?i)",
    "(a+)+$", "a" * 300, "${HOME}", "%s%n", "&a", "*a", "!!python/object:os.system", "---",
)
"""Strings that break naive code: empty, control characters, a lone surrogate, unicode, JSON
and template syntax, tool-call markers, paths, URLs, regex and YAML syntax."""

JSON_KEYS = st.sampled_from(("", "id", "name", "type", "role", "content", "messages", "tools",
                             "function", "arguments", "x", "__proto__", "\ud800"))


# Strategies are built once: Hypothesis validates every new strategy object, which costs more
# than drawing from it, so composites draw from these constants instead of building their own.
NASTY = st.one_of(
    st.sampled_from(NASTY_STRINGS),
    st.text(max_size=40),
    st.integers(1_000, 50_000).map(lambda n: "x" * n),
    st.integers(1, 2_000).map(lambda n: "🙂" * n),
)
"""A nasty string from the list, random text, or a huge string."""
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-2**70, 2**70),
                    st.floats(), NASTY)
KEYS = st.one_of(JSON_KEYS, st.text(max_size=8))


def _json_values(max_leaves: int) -> st.SearchStrategy[Any]:
    return st.recursive(
        SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                         st.dictionaries(KEYS, inner, max_size=4)),
        max_leaves=max_leaves)


JSON_VALUES = _json_values(12)
"""Arbitrary JSON-like values (NaN and infinities included: Python's json writes them)."""
SMALL_JSON_VALUES = _json_values(6)


def nest(value: Any, depth: int, kind: str = "list") -> Any:
    """``value`` wrapped ``depth`` times in a list (or a dict)."""
    for _ in range(depth):
        value = [value] if kind == "list" else {"x": value}
    return value


# -- near-valid mutation -----------------------------------------------------------------------


def _paths(value: Any, limit: int = 400, max_depth: int = 40) -> list[tuple[Any, ...]]:
    """Paths of ``value``'s nodes, breadth first (the root is ``()``): at most ``limit`` of them,
    none deeper than ``max_depth`` (an earlier mutation may have nested a node deeply)."""
    out: list[tuple[Any, ...]] = []
    queue: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while queue and len(out) < limit:
        path, node = queue.pop(0)
        out.append(path)
        if len(path) >= max_depth:
            continue
        if isinstance(node, dict):
            queue += [((*path, k), v) for k, v in node.items()]
        elif isinstance(node, list):
            queue += [((*path, i), v) for i, v in enumerate(node)]
    return out


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def _set(value: Any, path: tuple[Any, ...], new: Any, delete: bool = False) -> Any:
    """A copy of ``value`` with the node at ``path`` replaced (or deleted); copies the path only."""
    if not path:
        return new
    key, rest = path[0], path[1:]
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    if rest:
        copy[key] = _set(value[key], rest, new, delete)
    elif delete:
        del copy[key]
    else:
        copy[key] = new
    return copy


def _retyped(node: Any) -> list[Any]:
    """The same value in other types: what a sloppy writer puts where a type is expected."""
    out: list[Any] = [None, str(node), [node], {"value": node}]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        other = float(node) if isinstance(node, int) else int(node) if math.isfinite(node) else 0
        out += [other, -node, bool(node)]
    if isinstance(node, str):
        try:
            out.append(json.loads(node))
        except ValueError:
            pass
        out += [len(node), node.upper(), node * 50]
    if isinstance(node, (dict, list)):
        out += [json.dumps(node), type(node)(), list(node)]
    return out


NEST_DEPTHS = st.sampled_from((1, 2, 5, 30, 300))
KINDS = st.sampled_from(("list", "dict"))
EDITS = st.sampled_from(("cut", "insert", "delete", "replace", "append"))
INSERTS = st.one_of(st.sampled_from(NASTY_STRINGS), st.text(max_size=4))
TAILS = st.sampled_from(("}", "]", ",", "\"", "\n", "x", "}}}", "\\"))
BYTE_EDITS = st.sampled_from(("none",) * 8 + ("bad_byte", "bom", "crlf", "nul"))
BAD_BYTES = st.sampled_from((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"))


def mutate(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with one small change at a random node (a copy; ``value`` is not modified)."""
    paths = _paths(value)
    path = paths[draw(st.integers(0, len(paths) - 1))]
    node = _get(value, path)
    ops = ["replace", "string", "retype", "nest", "wrap"]
    if path:
        ops += ["drop", "drop", "drop"]
    if isinstance(node, dict):
        ops += ["add_key", "add_key"]
    if isinstance(node, list) and node:
        ops += ["dup", "swap"]
    op = ops[draw(st.integers(0, len(ops) - 1))]
    if op == "drop":
        return _set(value, path, None, delete=True)
    if op == "replace":
        new = draw(JSON_VALUES)
    elif op == "string":
        new = draw(NASTY)
    elif op == "retype":
        choices = _retyped(node)
        new = choices[draw(st.integers(0, len(choices) - 1))]
    elif op == "nest":
        new = nest(node, draw(NEST_DEPTHS), draw(KINDS))
    elif op == "wrap":
        new = ([node], {"x": node}, [node, node])[draw(st.integers(0, 2))]
    elif op == "add_key":
        new = {**node, draw(KEYS): draw(JSON_VALUES)}
    elif op == "dup":
        new = node + node[:1] * draw(st.integers(1, 3))
    else:  # swap the first and the last element
        new = [node[-1], *node[1:-1], node[0]] if len(node) > 1 else []
    return _set(value, path, new)


MUTATIONS = st.sampled_from((0, 0, 1, 1, 1, 2, 3))


@st.composite
def near_valid(draw: st.DrawFn, valid: st.SearchStrategy[Any]) -> Any:
    """A valid example with 0..3 mutations (0 or 1 mostly: the valid example itself, or it
    with one thing wrong, which gets furthest)."""
    value = draw(valid)
    for _ in range(draw(MUTATIONS)):
        value = mutate(draw, value)
    return value


# -- text corruption ---------------------------------------------------------------------------


def corrupt_text(draw: st.DrawFn, text: str) -> str:
    """``text`` with 1..2 character-level edits: cut, insert, delete, replace, append."""
    for _ in range(draw(st.integers(1, 2))):
        pos = draw(st.integers(0, len(text)))
        op = draw(EDITS)
        if op == "cut":
            text = text[:pos]
        elif op == "insert":
            text = text[:pos] + draw(INSERTS) + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 5)):]
        elif op == "replace" and pos < len(text):
            text = text[:pos] + draw(st.characters()) + text[pos + 1:]
        else:
            text += draw(TAILS)
    return text


def encoded(text: str) -> bytes:
    """``text`` as UTF-8 bytes; a lone surrogate is written as its (invalid) UTF-8 bytes."""
    return text.encode("utf-8", "surrogatepass")


def corrupt_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """``data``, sometimes with an invalid UTF-8 byte, a BOM or CRLF line ends."""
    op = draw(BYTE_EDITS)
    if op == "bad_byte":
        pos = draw(st.integers(0, len(data)))
        return data[:pos] + draw(BAD_BYTES) + data[pos:]
    if op == "bom":
        return b"\xef\xbb\xbf" + data
    if op == "crlf":
        return data.replace(b"\n", b"\r\n")
    if op == "nul":
        return data.replace(b" ", b"\x00", 1)
    return data


def json_text(value: Any, ensure_ascii: bool = False) -> str:
    """``value`` as one line of JSON (NaN allowed, as Python writes it)."""
    return json.dumps(value, ensure_ascii=ensure_ascii)


def deep_json(depth: int, inner: str = "null", kind: str = "list") -> str:
    """JSON text nested ``depth`` deep (deeper than any recursive parser's stack)."""
    if kind == "list":
        return "[" * depth + inner + "]" * depth
    return '{"x": ' * depth + inner + "}" * depth


DEEP = st.one_of(st.sampled_from((3_000, 100_000)), st.integers(600, 1_000))
"""Nesting depths of deep JSON text: around and far past Python's recursion limit."""
