"""multi: children combined by the formula, concurrency, visible child errors, build errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from arft.config.graders import MultiSpec
from arft.graders.base import GraderError, build_sample, validate_spec
from arft.graders.formula import parse_formula
from arft.graders.multi import MultiGrader
from arft.graders.registry import build_grader
from arft.records import Score

from .helpers import make_rollout


def check(operation: str, reference: str, name: str | None = None) -> dict[str, Any]:
    spec = {"type": "string_check", "input": "{{ sample.output_text }}",
            "reference": reference, "operation": operation}
    return {**spec, "name": name} if name else spec


def multi(formula: str, **extra: Any) -> dict[str, Any]:
    return {"type": "multi", "name": "combo", "calculate_output": formula,
            "graders": {"exact": check("eq", "{{ item.answer }}"),
                        "lyon": check("ilike", "lyon")}, **extra}


async def grade_spec(spec: dict[str, Any], answer: str = "Paris") -> Score:
    rollout = make_rollout(answer=answer)
    return await build_grader(spec, Path(".")).grade(build_sample(rollout), rollout.item)


@pytest.mark.parametrize("answer, formula, expected", [
    ("Paris", "0.7 * exact + 0.3 * lyon", 0.7),
    ("Paris or Lyon", "0.7 * exact + 0.3 * lyon", 0.3),
    ("Paris", "max(exact, lyon) - 0.25 * lyon ^ 2", 1.0),
    ("Lyon", "2 ^ (exact + lyon) / 4", 0.5),
])
async def test_formula_combines_children(answer: str, formula: str, expected: float) -> None:
    score = await grade_spec(multi(formula), answer)
    exact = 1.0 if answer == "Paris" else 0.0
    lyon = 1.0 if "Lyon" in answer else 0.0
    assert score.score == pytest.approx(expected)
    assert score.sub_scores == {"exact": exact, "lyon": lyon}
    assert score.error is None and score.passed is None and score.grader == "combo"


@pytest.mark.parametrize("threshold, passed", [(0.7, True), (0.71, False)])
async def test_pass_threshold(threshold: float, passed: bool) -> None:
    score = await grade_spec(multi("0.7 * exact + 0.3 * lyon", pass_threshold=threshold))
    assert score.passed is passed


async def test_child_error_is_visible_and_score_still_computed() -> None:
    spec = multi("0.5 * exact + 0.5 * facts", pass_threshold=0.1)
    spec["graders"]["facts"] = check("like", "{{ item.nope }}")
    score = await grade_spec(spec)
    assert score.score == 0.5  # exact = 1, the failed child counts 0
    assert score.sub_scores == {"exact": 1.0, "lyon": 0.0, "facts": 0.0}
    assert score.passed is None  # no verdict from a grade with a failed child
    assert score.error is not None
    assert score.error.startswith("combo: child 'facts' failed: facts: template '{{ item.nope }}'")
    assert "item has no key 'nope'" in score.error


async def test_formula_error_at_grade_time_is_an_error_score() -> None:
    score = await grade_spec(multi("exact / lyon"))  # lyon scores 0 for "Paris"
    assert score.score == 0.0 and score.sub_scores == {"exact": 1.0, "lyon": 0.0}
    assert score.error is not None
    assert "formula 'exact / lyon': division by zero with exact=1, lyon=0" in score.error


async def test_nested_multi_sub_scores_are_prefixed() -> None:
    inner = multi("0.5 * exact + 0.5 * lyon")
    del inner["name"]
    outer = {"type": "multi", "name": "outer", "calculate_output": "inner * city",
             "graders": {"inner": inner, "city": check("like", "Paris")}}
    score = await grade_spec(outer, "Paris")
    assert score.score == 0.5
    assert score.sub_scores == {"inner": 0.5, "inner.exact": 1.0, "inner.lyon": 0.0, "city": 1.0}


class Fixed:
    """A child with a fixed Score, or one that raises, or waits for a sibling."""

    def __init__(self, name: str, score: Score | Exception, wait: tuple[asyncio.Event,
                 asyncio.Event] | None = None) -> None:
        self.name, self.score, self.wait = name, score, wait

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        if self.wait is not None:
            mine, theirs = self.wait
            mine.set()
            await theirs.wait()  # graded one after the other, this would never return
        if isinstance(self.score, Exception):
            raise self.score
        return self.score


def direct(children: dict[str, Any], formula: str) -> MultiGrader:
    spec = validate_spec(MultiSpec, {"type": "multi", "name": "m", "calculate_output": formula,
                                     "graders": {k: check("eq", "x") for k in children}})
    return MultiGrader(spec, children, parse_formula(formula, allowed_names=children))


async def test_children_run_concurrently_and_flags_are_united() -> None:
    a_ready, b_ready = asyncio.Event(), asyncio.Event()
    grader = direct({
        "a": Fixed("a", Score(score=0.5, flags=("hack:calls_reference", "verbose")),
                   (a_ready, b_ready)),
        "b": Fixed("b", Score(score=1.0, flags=("verbose", "emoji")), (b_ready, a_ready)),
    }, "a + b")
    score = await asyncio.wait_for(grader.grade({}, {}), timeout=10)
    assert score.score == 1.5 and score.error is None
    assert score.flags == ("hack:calls_reference", "verbose", "emoji")


async def test_raising_or_nonfinite_child_is_an_error_not_a_crash() -> None:
    grader = direct({"ok": Fixed("ok", Score(score=1.0)),
                     "boom": Fixed("boom", KeyError("answer")),
                     "nan": Fixed("nan", Score(score=float("nan")))}, "ok + boom + nan")
    score = await grader.grade({}, {})
    assert score.score == 1.0
    assert score.sub_scores == {"ok": 1.0, "boom": 0.0, "nan": 0.0}
    assert score.error == ("m: child 'boom' failed: KeyError: 'answer'; "
                           "child 'nan' failed: returned a non-finite score nan")


@pytest.mark.parametrize("change, parts", [
    ({"calculate_output": "exact + facts"},
     ["field 'calculate_output'", "unknown name(s) facts", "the names are: exact, lyon"]),
    ({"calculate_output": "__import__('os')"},
     ["field 'calculate_output'", "unexpected character"]),
    ({"calculate_output": "exact.real"}, ["field 'calculate_output'"]),
    ({"calculate_output": "system(exact)"}, ["unknown function 'system'"]),
    ({"graders": {}}, ["field 'graders'"]),
    ({"graders": {"exact": check("contains", "x")}},
     ["grader 'combo' (multi): child 'graders.exact'", "field 'operation'"]),
    ({"graders": {"exact": "string_check"}}, ["field 'graders.exact'"]),
    ({"graders": {"exact": {"type": "nope"}}}, ["child 'graders.exact'", "is not supported"]),
    ({"calculate": "exact"}, ["unknown field"]),
])
def test_bad_specs_fail_the_build(change: dict[str, Any], parts: list[str]) -> None:
    with pytest.raises(GraderError) as err:
        build_grader({**multi("exact + lyon"), **change}, Path("."))
    assert "grader 'combo'" in str(err.value)
    for part in parts:
        assert part in str(err.value)


def test_children_are_named_by_key_unless_named() -> None:
    spec = multi("exact + lyon")
    spec["graders"]["lyon"] = check("ilike", "lyon", name="mentions_lyon")
    grader = build_grader(spec, Path("."))
    assert isinstance(grader, MultiGrader)
    assert {k: g.name for k, g in grader.children.items()} == {"exact": "exact",
                                                              "lyon": "mentions_lyon"}


async def test_multi_closes_its_children(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from arft.graders.base import close_grader
    from arft.graders.registry import build_grader

    closed: list[str] = []

    class Child:
        name = "c"

        async def aclose(self) -> None:
            closed.append(self.name)

    grader = build_grader({"type": "multi", "name": "m", "calculate_output": "a",
                           "graders": {"a": {"type": "string_check", "input": "x", "reference": "x",
                                             "operation": "eq"}}}, tmp_path)
    grader.children["b"] = Child()  # type: ignore[attr-defined]
    await close_grader(grader)
    assert closed == ["c"]
