"""Templates: paths into sample/item, indexing, JSON rendering, and errors for missing parts."""

from __future__ import annotations

from typing import Any

import pytest

from arft.graders.base import build_sample
from arft.graders.templates import TemplateError, render_template, resolve

from .helpers import make_rollout


@pytest.fixture
def ns() -> tuple[dict[str, Any], dict[str, Any]]:
    rollout = make_rollout(answer='{"city": "Paris"}')
    return build_sample(rollout), rollout.item


@pytest.mark.parametrize("template, expected", [
    ("{{ item.answer }}", "Paris"),
    ("{{item.answer}}", "Paris"),
    ("{{   sample.output_text}}", '{"city": "Paris"}'),
    ("A={{item.answer}}, B={{ item.id }}!", "A=Paris, B=t1!"),
    ("{{ item.facts[2] }}", "capital"),
    ("{{ item.facts[-1] }}", "capital"),
    ("{{ item.meta.level }}", "2"),
    ('{{ item["key with space"] }}', "v"),
    ("{{ item['key with space'] }}", "v"),
    ("{{ sample.output_tools[0].function.arguments }}", '{"q": "France"}'),
    ("{{ sample.output_tools[2].function.name }}", "search"),
    ("{{ sample.output_json.city }}", "Paris"),
    ("{{ sample.trajectory.n_tool_calls }}", "3"),
    ("{{ sample.trajectory.tool_calls[2].status }}", "tool_error"),
    ("no placeholders", "no placeholders"),
])
def test_render(ns: tuple[dict[str, Any], dict[str, Any]], template: str, expected: str) -> None:
    assert render_template(template, *ns) == expected


def test_non_strings_render_as_json(ns: tuple[dict[str, Any], dict[str, Any]]) -> None:
    assert render_template("{{ item.facts }}", *ns) == '["Paris", "France", "capital"]'
    assert render_template("{{item.meta}}", *ns) == '{"level": 2}'
    assert render_template("{{ sample.output_json }}", *ns) == '{"city": "Paris"}'
    sample, item = ns
    assert render_template("{{ sample.output_json }}", {**sample, "output_json": None}, item) == "null"
    assert render_template("{{ item.x }}", sample, {"x": True}) == "true"
    assert render_template("{{ item.x }}", sample, {"x": "é"}) == "é"


def test_json_string_arguments_can_be_indexed(ns: tuple[dict[str, Any], dict[str, Any]]) -> None:
    assert render_template("{{ sample.output_tools[1].function.arguments.q }}", *ns) == "Paris"


def test_resolve_returns_raw_values(ns: tuple[dict[str, Any], dict[str, Any]]) -> None:
    assert resolve("item.facts", *ns) == ["Paris", "France", "capital"]
    assert resolve("{{ item.meta }}", *ns) == {"level": 2}
    assert resolve("sample.trajectory.n_turns", *ns) == 3
    assert resolve("item", *ns)["answer"] == "Paris"


@pytest.mark.parametrize("template, part", [
    ("{{ item.missing }}", "item has no key 'missing' (it has: id, answer, facts"),
    ("{{ item.meta.depth }}", "item.meta has no key 'depth' (it has: level)"),
    ("{{ item.facts[3] }}", "item.facts has 3 element(s); index 3 is out of range"),
    ("{{ item.facts.first }}", "item.facts is a list; index it with [0]"),
    ("{{ item.answer.x }}", "item.answer is a string, not an object or list"),
    ("{{ item.meta.level.x }}", "item.meta.level is 2, which has no 'x'"),
    ("{{ sample.output_tools[5] }}", "sample.output_tools has 3 element(s)"),
    ('{{ item["nope"] }}', "item has no key 'nope'"),
    ("{{ answer }}", "must start with 'sample' or 'item'"),
    ("{{ items.answer }}", "must start with 'sample' or 'item'"),
    ("{{ item.answer + 1 }}", "cannot read the path at ' + 1'"),
])
def test_missing_path_names_template_and_part(
    ns: tuple[dict[str, Any], dict[str, Any]], template: str, part: str
) -> None:
    with pytest.raises(TemplateError) as err:
        render_template("Answer: " + template, *ns)
    message = str(err.value)
    assert message.startswith(f"template {('Answer: ' + template)!r}: ")
    assert part in message
