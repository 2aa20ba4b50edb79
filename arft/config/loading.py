"""Read a job file (YAML or JSON); every error names the file, the line and the field.

A misspelt key gets a "did you mean" from the fields the model at that place really has, found
by walking the spec's types along the error's location (through tool and grader unions, ``multi``
children and lists), so the same holds inside a nested grader as at the top level.
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from arft.config.base import JobError
from arft.config.engines import EngineType
from arft.config.job import JobSpec
from arft.config.overrides import Override, apply_overrides, blamed, parse_override


def _line_of(text: str, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML/JSON node at ``loc`` (or its nearest ancestor)."""
    try:
        node = yaml.compose(text)
    except (yaml.YAMLError, RecursionError):  # JSON too deep for PyYAML's recursive parser
        return None
    line = node.start_mark.line + 1 if node is not None else None
    for depth, key in enumerate(loc):
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if k.value == key), None)
            if pair is None:
                return line
            if depth == len(loc) - 1:  # the field itself: report the line of its key
                return pair[0].start_mark.line + 1
            node = pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            continue
        line = node.start_mark.line + 1
    return line


def _members(ann: Any) -> list[Any]:
    """The alternatives of a type: ``Annotated`` unwrapped, unions (nested ones too) flattened."""
    origin = get_origin(ann)
    if origin is Annotated:
        return _members(get_args(ann)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(ann) for m in _members(arg)]
    return [ann]


def _tags(model: type[BaseModel], field: str | None = None) -> set[Any]:
    """Every value the ``Literal`` field ``field`` of ``model`` accepts (any Literal field's when
    ``field`` is None): the tags that pick ``model`` out of a discriminated union."""
    return {v for name, f in model.model_fields.items() if field in (None, name)
            and get_origin(f.annotation) is Literal for v in get_args(f.annotation)}


def _step(ann: Any, key: Any) -> tuple[Any, bool]:
    """The type found at ``key`` inside ``ann``, and whether ``key`` is a union tag (a name
    pydantic puts in an error's location that is no key of the document)."""
    members = _members(ann)
    models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
    if len(models) > 1:  # a discriminated union: pydantic names the chosen member by its tag
        chosen = [m for m in models if key in _tags(m)]
        return (Union[tuple(chosen)] if len(chosen) > 1 else chosen[0]) if chosen else Any, True
    if models and isinstance(key, str) and key in models[0].model_fields:
        return models[0].model_fields[key].annotation, False
    for m in members:
        if get_origin(m) is dict:
            return get_args(m)[1], False
        if get_origin(m) in (list, tuple) and isinstance(key, int):
            return get_args(m)[0], False
    return Any, False


def _walk(loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
    """``loc`` without its union tags (the path in the document), and the type at its end."""
    ann: Any = JobSpec
    path = []
    for key in loc:
        ann, is_tag = _step(ann, key)
        if not is_tag:
            path.append(key)
    return tuple(path), ann


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _applies_to(loc: tuple[Any, ...]) -> str:
    """Where the misplaced field ``loc[-1]`` sits in the member of a discriminated union chosen by
    the tag ``loc[-2]`` (an engine's ``type``): the other members that have it, e.g.
    ``; it is an option of type transformers, not vllm``."""
    if len(loc) < 2:
        return ""
    union, field, tag = _walk(loc[:-2])[1], loc[-1], loc[-2]
    if not _step(union, tag)[1]:
        return ""
    members = [m for m in _members(union) if isinstance(m, type) and issubclass(m, BaseModel)]
    key = next((name for m in members for name, f in m.model_fields.items()
                if get_origin(f.annotation) is Literal and tag in get_args(f.annotation)), None)
    others = sorted({str(t) for m in members if field in m.model_fields and tag not in _tags(m, key)
                     for t in _tags(m, key)})
    return f"; it is an option of {key} {', '.join(others)}, not {tag}" if key and others else ""


def _message(error: Any, loc: tuple[Any, ...]) -> str:
    """Pydantic's message, with the fields or tags arft knows at that place where it helps."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        holder = _members(_walk(loc[:-1])[1])
        fields = [f for m in holder if isinstance(m, type) and issubclass(m, BaseModel)
                  for f in m.model_fields]
        elsewhere = _applies_to(loc)  # a field of another engine type is no typo: no "did you mean"
        return f"unknown field '{loc[-1]}'" + (elsewhere or _suggest(str(loc[-1]), fields))
    if kind == "union_tag_invalid":
        tags = re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
        return (f"unknown {ctx.get('discriminator')} '{ctx.get('tag')}'"
                + _suggest(str(ctx.get("tag")), tags) + f"; one of: {', '.join(tags)}")
    if kind == "union_tag_not_found":
        key = str(ctx.get("discriminator", "")).strip("'")
        tags = sorted({str(t) for m in _members(_walk(loc)[1]) if isinstance(m, type)
                       and issubclass(m, BaseModel) for t in _tags(m, key)})
        return f"needs a '{key}'" + (f" (one of: {', '.join(tags)})" if tags else "")
    return str(error["msg"])


def _shown(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """``loc`` as an error shows it. A grader's or tool's type stays in the path (it says which of
    many specs the field was read as); the engine's does not: one section, written without
    ``type`` for the default engine, so ``engine.lora`` is the path as the document has it (the
    message names the type where it matters, ``_applies_to``)."""
    if len(loc) > 1 and loc[0] == "engine" and loc[1] in get_args(EngineType):
        return loc[:1] + loc[2:]
    return loc


def _format_errors(path: Path, text: str, err: ValidationError, overrides: Sequence[Override] = ()) -> str:
    """One line per error, each led by where to fix it: the file's line, or the ``--set`` that
    put the wrong value there."""
    lines = [f"{path}: invalid job spec"]
    for e in err.errors():
        loc = tuple(e["loc"])
        where = ".".join(str(p) for p in _shown(loc)) or "(top level)"
        doc_path = _walk(loc)[0]
        source = blamed(doc_path, overrides)
        origin = source.flag if source else f"{path}:{_line_of(text, doc_path) or '?'}"
        lines.append(f"  {origin}: {where}: {_message(e, loc)}")
    return "\n".join(lines)


def load_job(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Read a YAML or JSON job file; errors name the file, line and field. ``overrides`` are
    ``SECTION.FIELD=VALUE`` texts (``--set``) applied to the file's data before it is validated
    (``arft.config.overrides``); an error in one names that ``--set``."""
    path = Path(path)
    changes = [parse_override(o) for o in overrides]
    if not path.exists():
        raise JobError(f"{path}: job file not found (pass the path of a YAML or JSON job spec)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise JobError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02X} at offset "
                       f"{e.start}); save the job file as UTF-8") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise JobError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}") from e
    except RecursionError:
        raise JobError(f"{path}: nested too deeply to read (lists or mappings about a thousand "
                       "levels inside each other); flatten the job spec") from None
    if not isinstance(data, dict):
        raise JobError(f"{path}: a job spec must be a mapping at the top level")
    try:
        job = JobSpec.model_validate(apply_overrides(data, changes))
    except ValidationError as e:
        raise JobError(_format_errors(path, text, e, changes)) from None
    return job.model_copy(update={"base_dir": path.resolve().parent})
