"""set_f1: hand-computed F-beta, parsing of lists and text, normalisation, and error vs flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arft.graders.base import GraderError, build_sample
from arft.graders.builtins.sets import normalize_item, precision_recall_f, set_f1, to_items
from arft.graders.registry import build_grader
from arft.records import Score

from ..helpers import make_rollout


def spec(**extra: Any) -> dict[str, Any]:
    return {"type": "builtin", "name": "set_f1", "predicted": "{{ sample.output_json.files }}",
            "reference": "{{ item.files }}", **extra}


async def grade(answer: str, files: Any, tmp_path: Path, **extra: Any) -> Score:
    rollout = make_rollout(answer=answer, item={"files": files})
    grader = build_grader(spec(**extra), tmp_path)
    return await grader.grade(build_sample(rollout), rollout.item)


def answer(files: Any) -> str:
    return json.dumps({"files": files})


async def test_f1_partial_credit(tmp_path: Path) -> None:
    # predicted {a, b, c}, reference {a, b, d, e}: tp 2, P = 2/3, R = 2/4, F1 = 2PR/(P+R) = 4/7.
    score = await grade(answer(["a.py", "b.py", "c.py"]), ["a.py", "b.py", "d.py", "e.py"],
                        tmp_path)
    assert score.score == pytest.approx(4 / 7)
    assert score.sub_scores == pytest.approx({"precision": 2 / 3, "recall": 0.5})
    assert score.passed is False and score.error is None and score.flags == ()
    assert score.grader == "set_f1"


async def test_exact_match_passes_and_duplicates_collapse(tmp_path: Path) -> None:
    score = await grade(answer(["b.py", "a.py", "a.py"]), ["a.py", "b.py"], tmp_path)
    assert score.score == 1.0 and score.passed is True


async def test_beta_weighs_recall(tmp_path: Path) -> None:
    # P = 1/2, R = 1: F2 = 5PR/(4P+R) = 2.5/3 = 5/6; F0.5 = 1.25PR/(0.25P+R) = 0.625/1.125 = 5/9.
    pred, ref = answer(["a", "x"]), ["a"]
    assert (await grade(pred, ref, tmp_path, beta=2.0)).score == pytest.approx(5 / 6)
    assert (await grade(pred, ref, tmp_path, beta=0.5)).score == pytest.approx(5 / 9)


@pytest.mark.parametrize("pred, ref, expected", [
    ([], [], 1.0),
    ([], ["a"], 0.0),
    (["a"], [], 0.0),
    (["x"], ["a"], 0.0),
])
async def test_empty_and_disjoint_sets(tmp_path: Path, pred: list[str], ref: list[str],
                                       expected: float) -> None:
    assert (await grade(answer(pred), ref, tmp_path)).score == expected


async def test_normalize_path_default_lower_and_none(tmp_path: Path) -> None:
    pred = answer(["./src//a.py", "src\\b.py", "SRC/C.py"])
    ref = ["src/a.py", "src/b.py", "src/c.py"]
    # path: a and b match, C does not (case kept): P = R = 2/3.
    assert (await grade(pred, ref, tmp_path)).score == pytest.approx(2 / 3)
    # lower: only "src/c.py" matches: P = R = 1/3.
    assert (await grade(pred, ref, tmp_path, normalize="lower")).score == pytest.approx(1 / 3)
    assert (await grade(pred, ref, tmp_path, normalize="none")).score == 0.0


async def test_text_output_is_split(tmp_path: Path) -> None:
    rollout = make_rollout(answer="- `a.py`,\n- b.py\n1. c.py", item={"files": "a.py, b.py"})
    grader = build_grader(spec(predicted="{{ sample.output_text }}"), tmp_path)
    score = await grader.grade(build_sample(rollout), rollout.item)
    # predicted {a, b, c}, reference {a, b}: P = 2/3, R = 1, F1 = 0.8.
    assert score.score == pytest.approx(0.8)


async def test_literal_reference_and_mixed_template(tmp_path: Path) -> None:
    rollout = make_rollout(answer=answer(["a.py"]), item={"extra": "b.py"})
    grader = build_grader(spec(reference=["a.py"], predicted="{{ sample.output_json.files[0] }} "
                               "{{ item.extra }}"), tmp_path)
    score = await grader.grade(build_sample(rollout), rollout.item)
    # predicted {a, b} (rendered text, split), reference {a}: P = 1/2, R = 1 -> 2/3.
    assert score.score == pytest.approx(2 / 3)


@pytest.mark.parametrize("output", ["not json at all", json.dumps({"other": 1}),
                                    json.dumps({"files": {"a": 1}}), json.dumps({"files": 3})])
async def test_unparseable_output_is_a_flagged_zero_not_an_error(tmp_path: Path,
                                                                 output: str) -> None:
    score = await grade(output, ["a.py"], tmp_path)
    assert score.score == 0.0 and score.error is None
    assert score.flags == ("unparseable_output",) and score.passed is False


async def test_spec_problems_are_error_scores(tmp_path: Path) -> None:
    rollout = make_rollout(answer=answer(["a.py"]), item={"files": ["a.py"]})
    sample = build_sample(rollout)
    missing_ref = build_grader(spec(reference="{{ item.nope }}"), tmp_path)
    score = await missing_ref.grade(sample, rollout.item)
    assert score.error is not None and "reference" in score.error and "nope" in score.error
    typo = build_grader(spec(predicted="{{ sample.output_jsn.files }}"), tmp_path)
    score = await typo.grade(sample, rollout.item)
    assert score.error is not None and score.error.startswith("set_f1: predicted")
    bad_ref = build_grader(spec(reference="{{ item.meta }}"), tmp_path)
    score = await bad_ref.grade(sample, {"meta": {"a": 1}})
    assert score.error is not None and score.flags == ()


@pytest.mark.parametrize("bad, field", [
    ({"beta": 0}, "field 'beta'"),
    ({"normalize": "upper"}, "field 'normalize'"),
    ({"refrence": "x"}, "did you mean 'reference'"),
])
def test_bad_spec_names_the_field(tmp_path: Path, bad: dict[str, Any], field: str) -> None:
    with pytest.raises(GraderError, match=field):
        build_grader(spec(**bad), tmp_path)


def test_plain_functions() -> None:
    assert set_f1(["a", "b"], ["a", "b"]) == 1.0
    assert set_f1("a.py, b.py", ["a.py"]) == pytest.approx(2 / 3)
    assert set_f1(["a", "x"], ["a"], beta=2.0) == pytest.approx(5 / 6)
    assert precision_recall_f(["a"], ["a", "b"]) == pytest.approx((1.0, 0.5, 2 / 3))
    assert to_items('["a", "b"]') == ["a", "b"]
    assert to_items([1, "b"]) == ["1", "b"]
    assert normalize_item(" ./x/../y/ ") == "y"
    assert normalize_item("A.py", "lower") == "a.py"
