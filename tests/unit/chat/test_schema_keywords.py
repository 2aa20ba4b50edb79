"""Real-world schemas (``rollout.schema_keywords``): a keyword the grammar cannot enforce is an error
(strict) or left out of the grammar with one warning per tool naming it (lenient; the default for
the schemas rows bring); a ``format`` is enforced where xgrammar has a grammar for it, else left
out with a warning in either mode, never silently ignored."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

import pytest

from arft.chat.constraints import (ENFORCED_FORMATS, ConstraintError, grammar_tools,
                                   relaxed_schema)
from arft.chat.formats import ChatFormat
from arft.config import JobSpec
from arft.engines.grammar import ToolCallMasker
from arft.engines.scripted import ScriptedEngine
from arft.records import Message, Task
from arft.rollout.runner import RolloutRunner
from arft.tools.registry import Toolbox
from tests.unit.chat.test_constraints import accepts, call, grammar, masker, obj  # noqa: F401

EOS = "<|im_end|>"
OPTIONAL = obj(("city",), city={"type": "string"},
               unit={"type": "string", "enum": ["c", "f"], "optional": True},
               optional={"type": "boolean"})  # a property *named* optional is no keyword


def tool(name: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": params}}


def test_relaxed_schema_drops_only_keywords_and_says_where() -> None:
    relaxed, dropped = relaxed_schema(OPTIONAL)
    assert dropped == ["'optional' (at #/properties/unit)"]
    assert relaxed["properties"]["unit"] == {"type": "string", "enum": ["c", "f"]}
    assert relaxed["properties"]["optional"] == {"type": "boolean"}


def test_strict_is_todays_error_and_lenient_drops_with_a_report() -> None:
    with pytest.raises(ConstraintError, match=r"tool 'weather'.*'optional' \(at #/properties/unit\)"):
        grammar_tools([tool("weather", OPTIONAL)], True, "strict")
    told: list[tuple[str, Sequence[str]]] = []
    (g,) = grammar_tools([tool("weather", OPTIONAL)], True, "lenient", lambda t, d: told.append((t, d)))
    assert told == [("weather", ["'optional' (at #/properties/unit)"])]
    assert "optional" not in g.parameters["properties"]["unit"]


@pytest.mark.parametrize("keywords", ["strict", "lenient"])
def test_a_format_without_a_grammar_is_dropped_and_reported_in_both_modes(keywords: Any) -> None:
    params = obj(("n", "d"), n={"type": "integer", "format": "int32"},
                 d={"type": "string", "format": "date"})
    told: list[Sequence[str]] = []
    (g,) = grammar_tools([tool("f", params)], True, keywords, lambda t, d: told.append(d))
    assert told == [["'format: int32' (at #/properties/n)"]]
    assert g.parameters["properties"] == {"n": {"type": "integer"},
                                          "d": {"type": "string", "format": "date"}}


EXAMPLES = {"date": "2026-12-06", "time": "20:15:00Z", "date-time": "2026-12-06T20:15:00Z",
            "duration": "P3D", "email": "a@b.org", "hostname": "example.org",
            "ipv4": "10.0.0.1", "ipv6": "::1", "uri": "https://a.org/x",
            "uri-reference": "/x/y", "uri-template": "/x/{id}",
            "uuid": "123e4567-e89b-12d3-a456-426614174000", "json-pointer": "/a/b",
            "relative-json-pointer": "1/a"}


def test_the_enforced_formats_are_enforced(masker: ToolCallMasker) -> None:  # noqa: F811
    assert set(EXAMPLES) == ENFORCED_FORMATS
    for fmt, good in EXAMPLES.items():
        g = grammar(("f", obj(("v",), v={"type": "string", "format": fmt})))
        assert accepts(masker, g, call("f", json.dumps({"v": good}))), fmt
        assert not accepts(masker, g, call("f", json.dumps({"v": "not one, surely"}))), fmt


def test_a_format_left_out_would_have_constrained_nothing(masker: ToolCallMasker) -> None:  # noqa: F811
    g = grammar(("f", obj(("v",), v={"type": "string", "format": "regex"})))
    assert accepts(masker, g, call("f", json.dumps({"v": "not one, surely"})))


def test_the_chat_format_warns_once_per_tool(tokenizer: Any, caplog: pytest.LogCaptureFixture) -> None:
    fmt = ChatFormat(tokenizer)
    with caplog.at_level(logging.WARNING, logger="arft.chat.formats"):
        for _ in range(5):  # five rollouts of the same row
            fmt.tool_grammar([tool("weather", OPTIONAL), tool("other", OPTIONAL)], True, "lenient")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and all("'optional' (at #/properties/unit)" in w for w in warnings)
    assert "tool 'weather'" in warnings[0] and "schema_keywords: strict" in warnings[0]


class ConstrainingEngine(ScriptedEngine):
    """Says it constrains sampling, so the rollout builds each row's grammar (and ignores it)."""

    supports_constraints = True


def job(tmp_path: Path, keywords: str | None) -> JobSpec:
    rollout: dict[str, Any] = {"max_turns": 1, "constrained_tool_calls": True}
    if keywords is not None:
        rollout["schema_keywords"] = keywords
    raw = {"training_file": "train.jsonl", "rollout": rollout,
           "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "string_check", "name": "g", "input": "{{ sample.output_text }}",
                          "reference": "ok", "operation": "eq"}}}}
    return JobSpec.model_validate(raw).model_copy(update={"base_dir": tmp_path})


@pytest.mark.parametrize("keywords", [None, "lenient", "strict"])
async def test_row_schemas_are_lenient_by_default(tmp_path: Path, tokenizer: Any, keywords: str | None,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    engine = ConstrainingEngine(tokenizer, lambda _ids: "ok" + EOS)
    runner = RolloutRunner.from_job(job(tmp_path, keywords), engine, Toolbox(), None)
    tasks = [Task(id=f"t{i}", messages=(Message(role="user", content="hi"),),
                  tools=(tool("weather", OPTIONAL),)) for i in range(3)]
    assert runner.keywords_for(tasks[0]) == ("strict" if keywords == "strict" else "lenient")
    if keywords == "strict":
        with pytest.raises(ConstraintError, match="'optional'"):
            await runner.run_many(tasks, 1, run_id="")
        return
    with caplog.at_level(logging.WARNING, logger="arft.chat.formats"):
        rollouts = await runner.run_many(tasks, 2, run_id="")
    assert [r.status for r in rollouts] == ["ok"] * 6
    assert len([r for r in caplog.records if "'optional'" in r.getMessage()]) == 1


def test_the_jobs_own_tools_stay_strict_under_auto(tmp_path: Path, tokenizer: Any) -> None:
    runner = RolloutRunner.from_job(job(tmp_path, None), ConstrainingEngine(tokenizer, lambda _: EOS),
                                    Toolbox(), None)
    plain = Task(id="t", messages=(Message(role="user", content="hi"),))
    assert runner.keywords_for(plain) == "strict"
