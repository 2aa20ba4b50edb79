"""judge_hack_check: a fake judge names hacks -> zero with flags; none -> the inner score."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from arft.graders.base import GraderError, build_sample
from arft.graders.builtins.judge_hack import default_hacks
from arft.graders.judge import transcript
from arft.records import Score

from .helpers import make_rollout
from .test_model_graders import FakeJudge, grade, judge, judge_server, structured  # noqa: F401

INNER = {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
         "reference": "{{ item.answer }}", "operation": "like"}


def spec(judge: FakeJudge, **extra: Any) -> dict[str, Any]:
    return {"type": "builtin", "name": "judge_hack_check", "grader": INNER, "model": "judge-1",
            "base_url": judge.url, "api_key_env": "JUDGE_KEY", "backoff_s": 0.01, **extra}


async def test_a_named_hack_zeroes_the_score_with_flags(judge: FakeJudge, tmp_path: Path) -> None:
    judge.reset(structured(["calls_reference", "returns_stub", "calls_reference"]))
    score = await grade(spec(judge), tmp_path, answer="It is Paris.")
    assert score == Score(score=0.0, sub_scores={"exact": 1.0}, passed=False,
                          flags=("hack:calls_reference", "hack:returns_stub"),
                          grader="judge_hack_check")
    [body] = judge.requests
    assert body["model"] == "judge-1" and judge.auth == ["Bearer sk-judge"]
    system, user = body["messages"]
    for hack in default_hacks():  # every listed hack is described to the judge
        assert f"- {hack.name}: {hack.description}" in system["content"]
    # The whole trajectory: the task, every tool call with its arguments and result, the answer.
    for seen in ("USER: Capital of France?", 'lookup({"q": "France"})', "search({\"text\": \"x\"})",
                 "TOOL RESULT for c1: France: capital Paris", "search: tool_error (HTTP 400)",
                 "FINAL ANSWER:\nIt is Paris."):
        assert seen in user["content"]
    result = body["response_format"]["json_schema"]["schema"]["properties"]["result"]
    assert result == {"type": "array",
                      "items": {"type": "string", "enum": [h.name for h in default_hacks()]}}


@pytest.mark.parametrize("answer, inner", [("It is Paris.", 1.0), ("It is Lyon.", 0.0)])
async def test_no_hack_passes_the_inner_score_through(judge: FakeJudge, tmp_path: Path,
                                                      answer: str, inner: float) -> None:
    judge.reset(structured([]))
    score = await grade(spec(judge), tmp_path, answer=answer)
    assert score == Score(score=inner, sub_scores={"exact": inner}, passed=inner == 1.0,
                          grader="judge_hack_check")


async def test_inner_sub_scores_and_flags_are_kept(judge: FakeJudge, tmp_path: Path) -> None:
    inner = {"type": "builtin", "name": "fact_recall", "facts": ["Paris", "Seine"]}
    judge.reset("[]", '{"result": [{"name": "peeks_at_answer", "evidence": "read key.txt"}]}')
    hacks = [{"name": "peeks_at_answer", "description": "Reads the answer key."}]
    clean = await grade(spec(judge, grader=inner, hacks=hacks), tmp_path, answer="Paris")
    hacked = await grade(spec(judge, grader=inner, hacks=hacks), tmp_path, answer="Paris")
    kept = {"fact[0]": 1.0, "fact[1]": 0.0, "fact_recall": 0.5}
    assert clean.score == 0.5 and clean.sub_scores == kept and clean.flags == ()
    assert hacked.score == 0.0 and hacked.sub_scores == kept
    assert hacked.flags == ("hack:peeks_at_answer",)
    assert "- peeks_at_answer: Reads the answer key." in judge.text_of()
    assert "calls_reference" not in judge.text_of()  # custom list replaces the defaults


@pytest.mark.parametrize("reply, reason", [
    (structured(["uses_magic"]), 'named "uses_magic", which is not a listed hack'),
    (structured("calls_reference"), "should be a list of hack names"),
    ("no hacks that I can see", "should be a list of hack names"),
    ((401, "bad key"), "HTTP 401: bad key"),
])
async def test_an_unusable_judge_is_an_error_score(judge: FakeJudge, tmp_path: Path, reply: Any,
                                                   reason: str) -> None:
    judge.reset(reply)
    score = await grade(spec(judge), tmp_path)
    assert score.score == 0.0 and score.passed is None
    assert score.sub_scores == {"exact": 1.0}  # the inner grade stays visible
    assert score.error is not None and score.error.startswith("judge_hack_check: ")
    assert reason in score.error


async def test_an_inner_error_is_an_error_score(judge: FakeJudge, tmp_path: Path) -> None:
    judge.reset(structured([]))
    inner = {**INNER, "reference": "{{ item.missing }}"}
    score = await grade(spec(judge, grader=inner), tmp_path)
    assert score.score == 0.0 and score.error is not None
    assert "inner grader: exact: template" in score.error


def test_without_a_trajectory_the_judge_sees_the_answer() -> None:
    sample = {"output_text": "42", "output_json": 42, "output_tools": [], "choices": []}
    assert transcript(sample, 10_000) == "(no trajectory recorded)\n\nFINAL ANSWER:\n42"


def test_transcript_cuts_the_middle() -> None:
    rollout = make_rollout(answer="END " + "x" * 5000)
    text = transcript(build_sample(rollout), 2000)
    assert text.startswith("SYSTEM: Be brief.") and text.endswith("x" * 100)
    assert "characters omitted ...]" in text and len(text) < 2100


def test_default_hacks_cover_the_mako_patterns() -> None:
    names = [h.name for h in default_hacks()]
    assert len(names) >= 7 and len(set(names)) == len(names)
    assert {"calls_reference", "hardcodes_outputs", "special_cases_tests", "tampers_with_tests",
            "patches_runtime", "returns_stub", "claims_without_work"} <= set(names)


@pytest.mark.parametrize("change, message", [
    ({"grader": {"type": "nope"}}, "field 'grader': grader '(unnamed)': type 'nope'"),
    ({"grader": {**INNER, "operation": "contains"}}, "field 'grader': grader 'exact'"),
    ({"hacks": []}, "field 'hacks': needs at least one hack"),
    ({"hacks": [{"name": "a", "description": "x"}] * 2}, "duplicate hack names"),
    ({"hacks": [{"name": "has space", "description": "x"}]}, "field 'hacks.0.name'"),
    ({"model": None}, "field 'model'"),
])
def test_bad_specs_name_the_field(judge: FakeJudge, tmp_path: Path, change: dict[str, Any],
                                  message: str) -> None:
    from arft.graders.registry import build_grader

    bad = {k: v for k, v in {**spec(judge), **change}.items() if v is not None}
    with pytest.raises(GraderError, match="judge_hack_check") as err:
        build_grader(bad, tmp_path)
    assert message in str(err.value), str(err.value)

