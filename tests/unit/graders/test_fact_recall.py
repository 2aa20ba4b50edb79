"""fact_recall: string mode by hand, normalisation, facts sources, and judge mode on a fake judge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arft.graders.base import GraderError
from arft.graders.builtins.fact_recall import normalise_fact, string_matches
from arft.graders.registry import build_grader

from .test_model_graders import FakeJudge, grade, judge, judge_server, structured  # noqa: F401

ITEM = {"id": "t1", "facts": ["Paris", "the Seine", "2.1 million people", "Eiffel Tower"]}
ANSWER = "Paris lies on the Seine\nand has about 2.1   million people."


def spec(**extra: Any) -> dict[str, Any]:
    return {"type": "builtin", "name": "fact_recall", "facts": "{{ item.facts }}", **extra}


async def test_three_of_four_facts_is_three_quarters(tmp_path: Path) -> None:
    score = await grade(spec(), tmp_path, answer=ANSWER, item=ITEM)
    assert score.score == 0.75 and score.error is None and score.passed is None
    assert score.sub_scores == {"fact[0]": 1.0, "fact[1]": 1.0, "fact[2]": 1.0, "fact[3]": 0.0}
    assert score.flags == () and score.grader == "fact_recall"


async def test_pass_threshold_sets_passed(tmp_path: Path) -> None:
    assert (await grade(spec(pass_threshold=0.7), tmp_path, answer=ANSWER, item=ITEM)).passed
    assert not (await grade(spec(pass_threshold=0.8), tmp_path, answer=ANSWER, item=ITEM)).passed


@pytest.mark.parametrize("fact, present", [
    ("THE seine", True),  # case ignored
    ("lies  on\tthe\nSeine", True),  # whitespace collapsed in fact and answer
    ("Paris lies on the Seine and", True),  # across the answer's line break
    ("...2.1 million people!", True),  # punctuation stripped at the fact's ends
    ("2,1 million", False),  # but not inside it
    ("London", False),
])
def test_string_normalisation(fact: str, present: bool) -> None:
    assert string_matches(ANSWER, [fact], case_sensitive=False) == [present]


async def test_case_sensitive(tmp_path: Path) -> None:
    item = {"facts": ["Paris", "paris", "the Seine", "The Seine"]}
    score = await grade(spec(case_sensitive=True), tmp_path, answer=ANSWER, item=item)
    assert score.score == 0.5
    assert score.sub_scores == {"fact[0]": 1.0, "fact[1]": 0.0, "fact[2]": 1.0, "fact[3]": 0.0}


@pytest.mark.parametrize("facts, item, expected", [
    (["Paris", "Lyon"], {}, 0.5),  # a literal list
    ("{{ item.facts }}", {"facts": json.dumps(["Paris", "Seine", "Lyon", "Nice"])}, 0.5),
    ("{{ item.meta.facts }}", {"meta": {"facts": ["Seine"]}}, 1.0),
    ('["{{ item.city }}", "Seine"]', {"city": "Paris"}, 1.0),  # a rendered JSON list
])
async def test_facts_sources(tmp_path: Path, facts: Any, item: dict[str, Any],
                             expected: float) -> None:
    score = await grade(spec(facts=facts), tmp_path, answer=ANSWER, item=item)
    assert score.error is None and score.score == expected


async def test_input_template(tmp_path: Path) -> None:
    # Facts found in the tool outputs of the trajectory rather than the final answer.
    score = await grade(spec(input="{{ sample.trajectory.messages }}", facts=["capital Paris"]),
                        tmp_path, answer="no idea")
    assert score.score == 1.0


@pytest.mark.parametrize("item, reason", [
    ({"facts": []}, "no reference facts"),
    ({"facts": ["Paris", " .. "]}, "fact(s) [1] are empty"),
    ({"facts": "Paris"}, "not a list of strings"),
    ({"facts": ["Paris", 3]}, "must be a list of strings"),
    ({"other": 1}, "item has no key 'facts'"),
])
async def test_unusable_facts_are_error_scores(tmp_path: Path, item: dict[str, Any],
                                               reason: str) -> None:
    score = await grade(spec(), tmp_path, answer=ANSWER, item=item)
    assert score.score == 0.0 and score.error is not None
    assert score.error.startswith("fact_recall: ") and reason in score.error


def test_normalise_fact() -> None:
    assert normalise_fact("  (The  Seine.)  ") == "the seine"
    assert normalise_fact("A.B", case_sensitive=True) == "A.B"


# ---------------------------------------------------------------------------------- judge mode

def judge_spec(judge: FakeJudge, **extra: Any) -> dict[str, Any]:
    return spec(mode="judge", model="judge-1", base_url=judge.url, api_key_env="JUDGE_KEY",
                backoff_s=0.01, **extra)


async def test_judge_mode(judge: FakeJudge, tmp_path: Path) -> None:
    judge.reset(structured([1, 4, 4]))
    score = await grade(judge_spec(judge, sampling_params={"temperature": 0}), tmp_path,
                        answer=ANSWER, item=ITEM)
    assert score.score == 0.5 and score.error is None
    assert score.sub_scores == {"fact[0]": 1.0, "fact[1]": 0.0, "fact[2]": 0.0, "fact[3]": 1.0}
    [body] = judge.requests
    assert body["model"] == "judge-1" and body["temperature"] == 0
    assert judge.auth == ["Bearer sk-judge"]
    system, user = body["messages"]
    assert system["role"] == "system" and "numbers of the facts" in system["content"]
    assert user["content"] == (f"ANSWER:\n{ANSWER}\n\nREFERENCE FACTS:\n1. Paris\n2. the Seine\n"
                               "3. 2.1 million people\n4. Eiffel Tower")
    result = body["response_format"]["json_schema"]["schema"]["properties"]["result"]
    assert result == {"type": "array", "items": {"type": "integer"}}


@pytest.mark.parametrize("reply, expected", [("[2, 3]", 0.5), (structured(["1"]), 0.25),
                                             (structured([]), 0.0)])
async def test_judge_mode_reply_shapes(judge: FakeJudge, tmp_path: Path, reply: str,
                                       expected: float) -> None:
    judge.reset(reply)
    score = await grade(judge_spec(judge), tmp_path, answer=ANSWER, item=ITEM)
    assert score.error is None and score.score == expected


@pytest.mark.parametrize("reply, reason", [
    (structured([5]), "named fact 5; facts are numbered 1..4"),
    (structured([0]), "named fact 0"),
    (structured("all of them"), "should be a list of fact numbers"),
    ((500, "down"), "HTTP 500: down"),
])
async def test_judge_mode_failures_are_error_scores(judge: FakeJudge, tmp_path: Path,
                                                    reply: Any, reason: str) -> None:
    judge.reset(reply, reply)
    score = await grade(judge_spec(judge, max_retries=1), tmp_path, answer=ANSWER, item=ITEM)
    assert score.score == 0.0 and score.error is not None and reason in score.error


def test_judge_mode_needs_a_model(tmp_path: Path) -> None:
    with pytest.raises(GraderError, match="field 'model': required when mode is 'judge'"):
        build_grader(spec(mode="judge"), tmp_path)


@pytest.mark.parametrize("change, field", [({"mode": "fuzzy"}, "field 'mode'"),
                                           ({"facts": 3}, "field 'facts."),
                                           ({"fact": "x"}, "did you mean 'facts'")])
def test_bad_specs_name_the_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    with pytest.raises(GraderError, match="fact_recall") as err:
        build_grader({**spec(), **change}, tmp_path)
    assert field in str(err.value)
