"""Completions-format tool schemas from a Python function's signature and docstring.

``function_schema(fn)`` turns type hints into JSON Schema and reads parameter descriptions from
the docstring (Google ``Args:``, Sphinx ``:param x:`` or NumPy ``Parameters`` sections), so a
plain typed, documented function is a tool without hand-written JSON::

    def lookup(city: str, units: Literal["c", "f"] = "c") -> str:
        '''Current weather of a city.

        Args:
            city: The city's name.
            units: Celsius or Fahrenheit.
        '''
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

# Docstring section headers that end a parameter section (Google and NumPy spellings).
_PARAM_HEADERS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
_SECTION_RE = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_ENTRY_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_SPHINX_RE = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def function_schema(fn: Callable[..., object], name: str | None = None,
                    description: str | None = None,
                    skip: Sequence[str] = ("ctx",)) -> dict[str, Any]:
    """``{"type": "function", "function": {"name", "description", "parameters"}}`` for ``fn``.

    Args:
        fn: A function, method or callable object.
        name: The tool name (default: the function's ``__name__``).
        description: The tool description (default: the docstring's first paragraph).
        skip: Parameters the caller fills in itself (not shown to the model).
    """
    doc = inspect.getdoc(fn) or ""
    param_docs = parse_param_docs(doc)
    hints = _type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        prop = type_schema(hints.get(p.name, p.annotation))
        if p.name in param_docs and "description" not in prop:
            prop["description"] = param_docs[p.name]
        if p.default is p.empty:
            required.append(p.name)
        elif _json_safe(p.default):
            prop["default"] = p.default
        properties[p.name] = prop
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return {"type": "function", "function": {
        "name": name or getattr(fn, "__name__", type(fn).__name__),
        "description": summary(doc) if description is None else description,
        "parameters": parameters,
    }}


def type_schema(tp: object) -> dict[str, Any]:
    """JSON Schema of one type hint; ``{}`` (no constraint) for anything it cannot express."""
    if tp is inspect.Parameter.empty or tp is Any or isinstance(tp, (str, typing.ForwardRef)):
        return {}  # unannotated, or a forward reference that did not resolve
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        schema = {**type_schema(args[0]), **_constraints(tp, args)}
        notes = [a for a in args[1:] if isinstance(a, str)]
        return {**schema, "description": notes[0]} if notes else schema
    if origin is typing.Literal:
        return _enum_schema(list(args))
    if origin is typing.Union or origin is types.UnionType:
        return _union_schema(args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema([m.value for m in tp])
    if isinstance(tp, type) and issubclass(tp, PurePath):
        return {"type": "string"}
    if isinstance(tp, type) and hasattr(tp, "model_json_schema"):  # a pydantic model
        return dict(tp.model_json_schema())
    return _container_schema(origin or tp, args)


def _constraints(tp: object, args: tuple[object, ...]) -> dict[str, Any]:
    """The JSON-schema bounds of ``Annotated[str|int|float, Field(max_length=..., ge=...)]``
    (pydantic ``Field`` or ``annotated_types`` metadata), as pydantic writes them: ``maxLength``,
    ``minimum``, ``pattern``, ... A constrained tool call is then held to them too."""
    if args[0] not in (str, int, float) or all(isinstance(a, str) for a in args[1:]):
        return {}
    from pydantic import TypeAdapter

    # pydantic ignores the plain-string notes; `tp` is a type form (Annotated[...]), which mypy cannot name yet
    schema = TypeAdapter(tp).json_schema()  # type: ignore[arg-type]
    return {k: v for k, v in schema.items() if k not in ("type", "title", "description")}


def _container_schema(origin: object, args: tuple[object, ...]) -> dict[str, Any]:
    """Arrays and objects: ``list[X]``, ``tuple[X, ...]``, ``tuple[X, Y]``, ``dict[str, X]``."""
    if not isinstance(origin, type):
        return {}
    if issubclass(origin, tuple) and args and args[-1] is not Ellipsis:
        items = [type_schema(a) for a in args]
        return {"type": "array", "prefixItems": items, "minItems": len(items),
                "maxItems": len(items)}
    if issubclass(origin, (list, tuple, set, frozenset)) or (
            issubclass(origin, Sequence) and not issubclass(origin, (str, bytes))):
        schema: dict[str, Any] = {"type": "array"}
        if args and type_schema(args[0]):
            schema["items"] = type_schema(args[0])
        return schema
    if issubclass(origin, (dict, Mapping)):
        schema = {"type": "object"}
        if len(args) == 2 and type_schema(args[1]):
            schema["additionalProperties"] = type_schema(args[1])
        return schema
    return {}


def _enum_schema(values: list[object]) -> dict[str, Any]:
    schema: dict[str, Any] = {"enum": values}
    kinds = {_SIMPLE.get(type(v)) for v in values}
    if len(kinds) == 1 and None not in kinds:
        schema["type"] = kinds.pop()
    return schema


def _union_schema(args: tuple[object, ...]) -> dict[str, Any]:
    """``X | None`` becomes X's schema with ``null`` allowed; other unions become ``anyOf``."""
    non_null = [a for a in args if a is not type(None)]
    nullable = len(non_null) < len(args)
    if len(non_null) == 1:
        schema = type_schema(non_null[0])
        if not nullable or not schema:
            return schema
        if "enum" in schema:
            return {**schema, "enum": [*schema["enum"], None],
                    **({"type": [schema["type"], "null"]} if "type" in schema else {})}
        if isinstance(schema.get("type"), str):
            return {**schema, "type": [schema["type"], "null"]}
        return {"anyOf": [schema, {"type": "null"}]}
    options = [type_schema(a) for a in args]
    return {} if any(not o for o in options) else {"anyOf": options}


def _type_hints(fn: Callable[..., object]) -> dict[str, Any]:
    """Resolved hints (string annotations included); ``{}`` when they cannot be resolved."""
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else getattr(fn, "__call__", fn)  # noqa: B004
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception:  # one unresolvable forward reference: resolve the others one by one
        pass
    namespace = getattr(inspect.unwrap(target), "__globals__", {})
    hints: dict[str, Any] = {}
    for name, annotation in getattr(target, "__annotations__", {}).items():
        try:
            hints[name] = eval(annotation, namespace) if isinstance(annotation, str) else annotation
        except Exception:  # left out: that parameter gets no type constraint
            continue
    return hints


def _json_safe(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def summary(doc: str) -> str:
    """The docstring's first paragraph, on one line ('' when it starts with a section)."""
    lines: list[str] = []
    for line in doc.strip().splitlines():
        # A blank line, a section header ("Args:") or a ":param" field ends the summary.
        if not line.strip() or _SECTION_RE.match(line.strip()) or line.strip().startswith(":"):
            break
        lines.append(line.strip())
    return " ".join(lines)


def parse_param_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions from Google ``Args:``, Sphinx ``:param`` and NumPy sections."""
    found: dict[str, str] = {}
    lines = doc.expandtabs().splitlines()
    for i, line in enumerate(lines):
        header = _SECTION_RE.match(line.strip())
        if header and header.group(1).lower() in _PARAM_HEADERS:
            found.update(_google_section(lines[i + 1:]))
        elif line.strip().lower() in _PARAM_HEADERS and i + 1 < len(lines) \
                and set(lines[i + 1].strip()) == {"-"}:
            found.update(_numpy_section(lines[i + 2:]))
    found.update(_sphinx_params(lines))
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google_section(lines: list[str]) -> dict[str, str]:
    """Entries ``name (type): text`` with continuation lines indented deeper."""
    found: dict[str, str] = {}
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        if not line.strip():
            continue
        if entry_indent is None:
            entry_indent = _indent(line)
        if _indent(line) < entry_indent or (_indent(line) == 0 and _SECTION_RE.match(line)):
            break  # the section ended
        match = _GOOGLE_ENTRY_RE.match(line.strip())
        if _indent(line) == entry_indent and match:
            current = match.group(1)
            found[current] = match.group(3).strip()
        elif current is not None:
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found


def _numpy_section(lines: list[str]) -> dict[str, str]:
    """Entries ``name : type`` followed by an indented description."""
    found: dict[str, str] = {}
    current: str | None = None
    for j, line in enumerate(lines):
        if not line.strip():
            continue
        next_line = lines[j + 1] if j + 1 < len(lines) else ""
        if _indent(line) == 0 and next_line.strip() and set(next_line.strip()) == {"-"}:
            break  # the next NumPy section
        if _indent(line) == 0:
            current = line.split(":")[0].strip()
            found[current] = ""
        elif current is not None:
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found


def _sphinx_params(lines: list[str]) -> dict[str, str]:
    """``:param name: text`` or ``:param type name: text``, continuation lines indented."""
    found: dict[str, str] = {}
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        match = _SPHINX_RE.match(stripped)
        if match:
            current = match.group(1)
            found[current] = match.group(2).strip()
        elif stripped.startswith(":") or not stripped:
            current = None
        elif current is not None and _indent(line) > 0:
            found[current] = f"{found[current]} {stripped}"
    return found
