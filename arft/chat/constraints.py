"""Schema-constrained tool calls: what a call must look like, as an engine-neutral record.

A ``ToolGrammar`` says which calls a turn may make and how they are written in the model's chat
format. An engine that supports constraints (``supports_constraints = True``) compiles it with a
grammar engine (xgrammar, see ``arft.engines.grammar``) and masks sampling so that:

* text outside calls is free;
* once a call opens (``trigger``, e.g. ``<tool_call>``) the text must continue as
  ``call_begin + name + args_infix + <arguments> + call_end`` where ``name`` is one of ``tools``
  and the arguments are JSON valid against that tool's schema (``strict`` tools) or any JSON
  object (the other tools, when only some are strict), written in the canonical spacing of the
  chat formats (``{"key": "value", "n": 1}``), so that text the grammar alone determines (a key
  path, the close of the call) is one string the engine can write without sampling;
* after ``call_end`` the text is free again, so several calls fit in one turn (parallel calls).

``prefill`` is text that already ends the prompt (a forced ``tool_choice`` writes the start of
the call): the grammar is advanced through it before the first sampled token.

The grammar engine itself compiles many JSON-schema keywords but silently ignores a few (``not``,
``if``/``then``/``else``, ``dependentRequired``...). ``check_schema`` therefore accepts only the
keywords the constraint really enforces, plus annotations, and names the tool and the keyword of
anything else: a constraint that quietly does less than the schema says is never used. Real data
brings such keywords (a benchmark's ``optional``): under ``rollout.schema_keywords: lenient``
(``SchemaKeywords``) they are dropped from the grammar instead, and the caller is told which, to
warn once per tool (``grammar_tools``'s ``on_drop``). A ``format`` the grammar engine has no
grammar for (``int32``, ``regex``...; ``ENFORCED_FORMATS`` are the ones it has) is dropped and
reported in either mode: it never constrained anything, and is never silently ignored.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence

from arft.errors import ArftError
from arft.records import Frozen

ENFORCED_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "enum", "const", "items",
    "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs",
    "definitions", "pattern", "format", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minProperties", "maxProperties",
    "patternProperties", "propertyNames",
})
"""JSON-schema keywords the grammar enforces (checked against xgrammar 0.2 in the tests)."""

ANNOTATION_KEYWORDS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "strict",
})
"""Keywords that describe but do not constrain: ignoring them changes nothing."""

ENFORCED_FORMATS = frozenset({
    "date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uri",
    "uri-reference", "uri-template", "uuid", "json-pointer", "relative-json-pointer",
})
"""String ``format`` values the grammar engine enforces (checked against xgrammar 0.2 in the
tests); any other value (``int32``, ``regex``, ``iri``...) compiles to a plain string/number."""

SchemaKeywords = Literal["strict", "lenient"]
"""What to do with a keyword the grammar cannot enforce: ``strict`` raises ``ConstraintError``,
``lenient`` drops it from the grammar (see the module docstring)."""

OnDrop = Callable[[str, Sequence[str]], None]
"""Told ``(tool, dropped)`` when a tool's grammar leaves keywords out (``keyword (at path)``)."""

ANY_OBJECT = {"type": "object", "additionalProperties": True}
"""The arguments of a tool that is not held to its schema: any JSON object."""

_SCHEMA_VALUED = ("additionalProperties", "items", "propertyNames", "not", "if", "then", "else",
                  "contains", "unevaluatedProperties", "unevaluatedItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("prefixItems", "anyOf", "oneOf", "allOf", "items")


# ValueError too: the doctor's baseline (arft.app.doctor.run) reports a ValueError from the run it
# starts, a tool schema the constrained decoder cannot compile among them.
class ConstraintError(ArftError, ValueError):
    """A tool schema the constrained decoder cannot enforce; names the tool and the keyword."""


class GrammarTool(Frozen):
    """One tool a constrained call may name."""

    name: str
    parameters: dict[str, Any]
    """The JSON schema of the arguments object (``{"type": "object"}`` for any object)."""
    strict: bool = True
    """Whether the arguments are held to ``parameters``; False allows any JSON object."""


class ToolGrammar(Frozen):
    """The calls one assistant turn may make, in one chat format's call syntax."""

    tools: tuple[GrammarTool, ...]
    trigger: str
    """Text that opens a call (``<tool_call>``); free text until it appears."""
    call_begin: str
    """A call's text before the tool name (``<tool_call>\\n{"name": "``); starts with ``trigger``."""
    args_infix: str
    """Between the name and the arguments object (``", "arguments": ``)."""
    call_end: str
    """After the arguments object (``}\\n</tool_call>``)."""
    prefill: str = ""
    """Text already at the end of the prompt that the grammar starts from (a forced call)."""

    def key(self) -> str:
        """Identifies the compiled grammar (everything but ``prefill``)."""
        return json.dumps(self.model_dump(exclude={"prefill"}), sort_keys=True)

    def with_prefill(self, prefill: str) -> "ToolGrammar":
        return self if prefill == self.prefill else self.model_copy(update={"prefill": prefill})


class JsonGrammar(Frozen):
    """A whole reply that is one JSON value (chat-completions ``response_format``): valid against
    ``json_schema`` (``type: json_schema``), or any JSON object (None: ``type: json_object``)."""

    json_schema: dict[str, Any] | None = None
    name: str = "response_format"
    """Names the schema in errors (``response_format.json_schema.name``)."""
    prefill: str = ""

    def key(self) -> str:
        """Identifies the compiled grammar."""
        return json.dumps({"json": self.json_schema}, sort_keys=True)

    def with_prefill(self, prefill: str) -> "JsonGrammar":
        return self if prefill == self.prefill else self.model_copy(update={"prefill": prefill})


Grammar = ToolGrammar | JsonGrammar
"""What a request may be constrained by: its tool calls, or its whole reply as JSON."""


def _walk(schema: object, path: str) -> Iterator[tuple[str, str]]:
    """``(path, keyword)`` for every keyword of every (sub)schema of ``schema``."""
    if not isinstance(schema, Mapping):
        return  # booleans are valid schemas; anything else is caught by the grammar compiler
    for key, value in schema.items():
        yield path, key
        where = f"{path}/{key}"
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            for name, sub in value.items():
                yield from _walk(sub, f"{where}/{name}")
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                yield from _walk(sub, f"{where}/{i}")
        elif key in _SCHEMA_VALUED:
            yield from _walk(value, where)


def check_schema(tool: str, schema: object, subject: str | None = None) -> None:
    """Raise ``ConstraintError`` when ``schema`` uses a keyword the constraint cannot enforce.
    ``subject`` names a schema that is not a tool's (``response_format 'x'``) in the message."""
    who = subject or f"tool '{tool}'"
    undo = ("" if subject else ", or turn constraints off for this job (rollout.constrained_tool_calls: "
            "false) and remove \"strict\": true from the tool")
    if not isinstance(schema, Mapping):
        raise ConstraintError(f"{who}: its parameters schema must be a JSON object, got "
                              f"{type(schema).__name__}: fix the schema")
    for path, keyword in _walk(schema, "#"):
        if keyword not in ENFORCED_KEYWORDS and keyword not in ANNOTATION_KEYWORDS:
            raise ConstraintError(
                f"{who}: the schema keyword '{keyword}' (at {path}) cannot be enforced by "
                "constrained decoding; rewrite the schema without it (enforced keywords: "
                f"{', '.join(sorted(ENFORCED_KEYWORDS))}){undo}")


def _unenforced(key: str, value: object) -> bool:
    """Whether ``key: value`` of a subschema is a keyword the grammar does not enforce."""
    if key == "format":
        return not (isinstance(value, str) and value in ENFORCED_FORMATS)
    return key not in ENFORCED_KEYWORDS and key not in ANNOTATION_KEYWORDS


def relaxed_schema(schema: object, path: str = "#") -> tuple[Any, list[str]]:
    """``schema`` without the keywords the grammar does not enforce, and what was dropped
    (``"'keyword' (at path)"``), walking subschemas as ``check_schema`` does (a property *named*
    ``optional`` is kept)."""
    if not isinstance(schema, Mapping):
        return schema, []
    out: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in schema.items():
        if _unenforced(key, value):
            shown = f"'format: {value}'" if key == "format" else f"'{key}'"
            dropped.append(f"{shown} (at {path})")
            continue
        where = f"{path}/{key}"
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {}
            for name, sub in value.items():
                out[key][name], more = relaxed_schema(sub, f"{where}/{name}")
                dropped += more
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = []
            for i, sub in enumerate(value):
                relaxed, more = relaxed_schema(sub, f"{where}/{i}")
                out[key].append(relaxed)
                dropped += more
        elif key in _SCHEMA_VALUED:
            out[key], more = relaxed_schema(value, where)
            dropped += more
        else:
            out[key] = value
    return out, dropped


def enforced_schema(tool: str, schema: object, keywords: SchemaKeywords = "strict",
                    on_drop: OnDrop | None = None) -> Any:
    """The schema the grammar holds ``tool``'s arguments to: ``strict`` raises ``ConstraintError``
    for an unenforceable keyword (``check_schema``), ``lenient`` drops it; a ``format`` with no
    grammar is dropped in both. ``on_drop(tool, dropped)`` hears of anything dropped."""
    if keywords == "strict" or not isinstance(schema, Mapping):
        check_schema(tool, schema)  # a schema that is no object: the same error in either mode
    relaxed, dropped = relaxed_schema(schema)
    if dropped and on_drop is not None:
        on_drop(tool, dropped)
    return relaxed


def drop_message(tool: str, dropped: Sequence[str]) -> str:
    """The one warning for a tool whose grammar leaves ``dropped`` out."""
    return (f"tool '{tool}': constrained decoding cannot enforce {', '.join(dropped)}; left out "
            "of its call grammar (the model still sees the schema as written). Set "
            "rollout.schema_keywords: strict to make this an error")


def search_pattern(pattern: str) -> str:
    """A JSON-schema ``pattern`` (a search: it may match anywhere) as the full-match regex the
    grammar engine expects: unanchored ends are padded with ``.*``."""
    body = pattern
    head = "" if body.startswith("^") else ".*"
    body = body[1:] if body.startswith("^") else body
    anchored_end = body.endswith("$") and not body.endswith("\\$")
    tail = "" if anchored_end else ".*"
    body = body[:-1] if anchored_end else body
    return f"{head}(?:{body}){tail}"


def with_search_patterns(schema: object) -> Any:
    """``schema`` with every ``pattern`` and ``patternProperties`` key rewritten by
    ``search_pattern``, so the grammar accepts exactly the strings JSON Schema accepts."""
    if isinstance(schema, list):
        return [with_search_patterns(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "pattern" and isinstance(value, str):
            out[key] = search_pattern(value)
        elif key == "patternProperties" and isinstance(value, Mapping):
            out[key] = {search_pattern(k): with_search_patterns(v) for k, v in value.items()}
        elif key in ("properties", "$defs", "definitions") and isinstance(value, Mapping):
            out[key] = {k: with_search_patterns(v) for k, v in value.items()}
        else:
            out[key] = with_search_patterns(value)
    return out


def function_of(schema: Mapping[str, object]) -> Mapping[str, Any]:
    """The function part of a tool schema in either shape (``{"type": "function", ...}`` or flat)."""
    fn = schema.get("function")
    return fn if isinstance(fn, Mapping) else schema


def is_strict(schema: Mapping[str, object]) -> bool:
    """``"strict": true`` on the function (chat-completions shape) or on the flat schema."""
    return function_of(schema).get("strict") is True or schema.get("strict") is True


def grammar_tools(schemas: Sequence[Mapping[str, object]], constrain_all: bool,
                  keywords: SchemaKeywords = "strict", on_drop: OnDrop | None = None
                  ) -> tuple[GrammarTool, ...]:
    """The tools of a constrained turn, or ``()`` when nothing is to be constrained.

    ``constrain_all`` (the job's ``rollout.constrained_tool_calls``) holds every tool to its
    schema. Without it only ``strict`` tools are held to theirs, as in the hosted API; the others
    still get a valid name and a JSON object, since the call syntax is shared. Every enforced
    schema goes through ``enforced_schema`` first (``keywords``, ``on_drop``: see there).
    """
    if not schemas or not (constrain_all or any(is_strict(s) for s in schemas)):
        return ()
    tools = []
    for s in schemas:
        fn = function_of(s)
        name = str(fn.get("name", ""))
        strict = constrain_all or is_strict(s)
        params = fn.get("parameters")
        params = {"type": "object", "properties": {}} if params is None else params
        if strict:
            params = enforced_schema(name, params, keywords, on_drop)
        tools.append(GrammarTool(name=name, strict=strict, parameters=dict(params) if strict else ANY_OBJECT))
    return tuple(tools)
