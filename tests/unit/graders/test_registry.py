"""The registry builds graders by type; grade_rollout never raises, whatever the grader does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from arft.graders.base import GraderError
from arft.graders.registry import build_grader, grade_rollout, grader_types
from arft.graders.string_check import StringCheckGrader
from arft.records import Score

from .helpers import make_rollout

EXACT = {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
         "reference": "{{ item.answer }}", "operation": "like"}


def test_builds_string_check(tmp_path: Path) -> None:
    assert "string_check" in grader_types()
    grader = build_grader(EXACT, tmp_path)
    assert isinstance(grader, StringCheckGrader) and grader.name == "exact"


@pytest.mark.parametrize("spec, part", [
    ({"type": "pyhton", "name": "py"}, "grader 'py': type 'pyhton' is not supported"),
    ({"type": "strng_check"}, "type 'strng_check' is not supported"),
    ({"type": ["string_check"]}, "is not supported"),
    ({"name": "nameless"}, "grader 'nameless' has no 'type'"),
    ("string_check", "must be a mapping"),
])
def test_bad_specs_list_supported_types(tmp_path: Path, spec: Any, part: str) -> None:
    with pytest.raises(GraderError) as err:
        build_grader(spec, tmp_path)
    assert part in str(err.value)
    assert "string_check" in str(err.value).split(part)[-1]  # the supported list follows


async def test_grade_rollout_scores_and_times(tmp_path: Path) -> None:
    score = await grade_rollout(build_grader(EXACT, tmp_path), make_rollout())
    assert score.score == 1.0 and score.passed is True and score.error is None
    assert score.grader == "exact" and score.latency_s >= 0.0


class Raising:
    name = "boom"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        raise KeyError("answer")


class Sleepy:
    name = "sleepy"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        await asyncio.sleep(0.01)
        return Score(score=0.5, sub_scores={"a": 0.5})


class ReturnsFloat:
    name = "float"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Any:
        return 1.0


class ReturnsNan:
    name = "nan"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        return Score(score=float("nan"))


class NotAsync:
    name = "sync"

    def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        return Score(score=1.0)


class Nameless:
    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        raise RuntimeError("no name")


@pytest.mark.parametrize("grader, error", [
    (Raising(), "boom: KeyError: 'answer'"),
    (ReturnsFloat(), "float: returned float, expected a Score"),
    (ReturnsNan(), "nan: returned a non-finite score nan"),
    (NotAsync(), "sync: TypeError: "),
    (Nameless(), "Nameless: RuntimeError: no name"),
])
async def test_grade_rollout_never_raises(grader: Any, error: str) -> None:
    score = await grade_rollout(grader, make_rollout())
    assert score.score == 0.0
    assert score.error is not None and score.error.startswith(error)
    assert score.grader == error.split(":")[0]


async def test_grade_rollout_keeps_the_graders_result() -> None:
    score = await grade_rollout(Sleepy(), make_rollout())
    assert score.score == 0.5 and score.sub_scores == {"a": 0.5}
    assert score.grader == "sleepy" and score.latency_s > 0.0
