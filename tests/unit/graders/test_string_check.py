"""string_check: every operation, spec validation, and template errors as error Scores."""

from __future__ import annotations

from pathlib import Path

import pytest

from arft.graders.base import GraderError, build_sample
from arft.graders.registry import build_grader

from .helpers import make_rollout


def spec(operation: str, reference: str = "{{ item.answer }}", **extra: str) -> dict[str, str]:
    return {"type": "string_check", "name": "check", "input": "{{ sample.output_text }}",
            "reference": reference, "operation": operation, **extra}


@pytest.mark.parametrize("operation, answer, expected", [
    ("eq", "Paris", 1.0),
    ("eq", "paris", 0.0),
    ("eq", "Paris ", 0.0),  # exact: nothing is stripped
    ("ne", "Lyon", 1.0),
    ("ne", "Paris", 0.0),
    ("neq", "Lyon", 1.0),
    ("neq", "Paris", 0.0),
    ("like", "The capital is Paris.", 1.0),
    ("like", "The capital is paris.", 0.0),
    ("ilike", "THE CAPITAL IS PARIS.", 1.0),
    ("ilike", "The capital is Lyon.", 0.0),
])
async def test_operations(tmp_path: Path, operation: str, answer: str, expected: float) -> None:
    grader = build_grader(spec(operation), tmp_path)
    rollout = make_rollout(answer=answer)
    score = await grader.grade(build_sample(rollout), rollout.item)
    assert score.score == expected
    assert score.passed is (expected == 1.0)
    assert score.error is None and score.grader == "check"


async def test_reference_can_be_literal_and_input_any_path(tmp_path: Path) -> None:
    grader = build_grader({**spec("eq", reference="lookup"),
                           "input": "{{ sample.output_tools[0].function.name }}"}, tmp_path)
    rollout = make_rollout()
    assert (await grader.grade(build_sample(rollout), rollout.item)).score == 1.0


async def test_template_error_is_an_error_score(tmp_path: Path) -> None:
    grader = build_grader(spec("eq", reference="{{ item.expected }}"), tmp_path)
    rollout = make_rollout()
    score = await grader.grade(build_sample(rollout), rollout.item)
    assert score.score == 0.0 and score.passed is None
    assert score.error is not None
    assert score.error.startswith("check: template '{{ item.expected }}'")
    assert "item has no key 'expected'" in score.error


@pytest.mark.parametrize("bad, field", [
    ({"operation": "contains"}, "field 'operation'"),
    ({"operaton": "eq"}, "did you mean 'operation'"),
    ({"weight": "1"}, "field 'weight': unknown field"),
    ({"input": None}, "field 'input'"),
])
def test_bad_spec_names_grader_and_field(tmp_path: Path, bad: dict[str, str], field: str) -> None:
    with pytest.raises(GraderError) as err:
        build_grader({**spec("eq"), **bad}, tmp_path)
    assert "grader 'check' (string_check)" in str(err.value)
    assert field in str(err.value)


def test_name_defaults_to_type(tmp_path: Path) -> None:
    raw = spec("eq")
    del raw["name"]
    assert build_grader(raw, tmp_path).name == "string_check"
