"""Every field of every spec a job can hold is documented (the string literal under the field,
kept by pydantic as ``description``): the config is the single documented source."""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from arft.config import JobSpec


def nested_types(annotation: Any) -> list[Any]:
    """``annotation`` and every type inside it (unions, Annotated, list/dict/tuple arguments)."""
    found, todo = [], [annotation]
    while todo:
        ann = todo.pop()
        found.append(ann)
        if get_origin(ann) in (Annotated, Union, types.UnionType) or get_args(ann):
            todo.extend(a for a in get_args(ann) if not isinstance(a, (str, int, float)))
    return found


def reachable_models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """Every pydantic model reachable from ``root`` through its fields' types."""
    seen: list[type[BaseModel]] = []
    todo: list[Any] = [root]
    while todo:
        model = todo.pop()
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            todo.extend(nested_types(field.annotation))
    return seen


def test_every_field_of_every_reachable_spec_has_a_docstring() -> None:
    models = reachable_models(JobSpec)
    missing = [f"{m.__name__}.{name}" for m in models for name, field in m.model_fields.items()
               if not (field.description or "").strip()]
    assert not missing, f"fields without a docstring: {', '.join(missing)}"


def test_the_walk_reaches_tools_graders_and_nested_graders() -> None:
    names = {m.__name__ for m in reachable_models(JobSpec)}
    assert {"Reinforcement", "ShellToolSpec", "McpToolSpec", "StringCheckSpec", "MultiSpec",
            "JudgeHackCheckSpec", "InputMessage", "ContentPart", "JudgeSampling", "StylePattern",
            "Hack", "WandbSpec", "LoraSpec"} <= names
