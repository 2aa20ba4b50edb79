"""style_penalty: each rule and option against hand-computed penalties, clipping, spec errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from arft.config.builtin_graders import StylePattern
from arft.graders.base import GraderError, build_sample
from arft.graders.builtins.style import count_emoji, default_patterns, style_report, style_score
from arft.graders.registry import build_grader
from arft.records import Score

from ..helpers import make_rollout


async def grade(text: str, tmp_path: Path, **extra: Any) -> Score:
    rollout = make_rollout(answer=text)
    grader = build_grader({"type": "builtin", "name": "style_penalty", **extra}, tmp_path)
    return await grader.grade(build_sample(rollout), rollout.item)


async def test_clean_professional_text_scores_full(tmp_path: Path) -> None:
    score = await grade("The fix updates the HTTP client and adds a regression test.", tmp_path)
    assert score.score == 1.0 and score.passed is True and score.flags == ()
    assert score.sub_scores == {"penalty": 0.0, "n_words": 11.0}
    assert score.grader == "style_penalty" and score.error is None


async def test_verbosity_per_word_over(tmp_path: Path) -> None:
    # 200 words, budget 150: 50 over x 0.002 = 0.1 -> 0.9.
    score = await grade(" ".join(["word"] * 200), tmp_path)
    assert score.score == pytest.approx(0.9)
    assert score.flags == ("style:verbose",)
    assert score.sub_scores["penalty"] == pytest.approx(0.1)
    # Custom budget and rate: 10 words, budget 4, 0.05 each: 6 x 0.05 = 0.3 -> 0.7.
    custom = await grade(" ".join(["w"] * 10), tmp_path, max_words=4, per_word_over=0.05)
    assert custom.score == pytest.approx(0.7)
    off = await grade(" ".join(["word"] * 500), tmp_path, max_words=None)
    assert off.score == 1.0


async def test_emoji_penalty_once(tmp_path: Path) -> None:
    score = await grade("Done \U0001F680\U0001F389 all good \u2705", tmp_path)
    assert score.score == pytest.approx(0.8) and score.flags == ("style:emoji",)
    assert (await grade("Done \U0001F680", tmp_path, emoji_penalty=0.5)).score == 0.5


@pytest.mark.parametrize("text, flag, expected", [
    ("lol that bug was silly", "style:slang", 0.9),
    ("Dude, it works now.", "style:slang", 0.9),
    ("This code is crap.", "style:profanity", 0.7),
    ("It works!!", "style:exclamation", 0.9),
    ("THIS IS BROKEN again.", "style:shouting", 0.9),
    ("I hope this helps.", "style:filler", 0.95),
])
async def test_default_patterns(tmp_path: Path, text: str, flag: str, expected: float) -> None:
    score = await grade(text, tmp_path)
    assert score.flags == (flag,)
    assert score.score == pytest.approx(expected)
    assert score.passed is False


async def test_acronyms_and_single_exclamation_are_fine(tmp_path: Path) -> None:
    assert (await grade("The HTTP API returns JSON. Great!", tmp_path)).score == 1.0


async def test_penalties_add_up_and_clip_at_zero(tmp_path: Path) -> None:
    # slang 0.1 + exclamation 0.1 + emoji 0.2 = 0.4 -> 0.6.
    score = await grade("lol it works!! \U0001F600", tmp_path)
    assert score.score == pytest.approx(0.6)
    assert set(score.flags) == {"style:slang", "style:exclamation", "style:emoji"}
    heavy = await grade("wtf this is shit lol!! \U0001F600", tmp_path, emoji_penalty=0.9)
    assert heavy.score == 0.0 and heavy.sub_scores["penalty"] > 1.0


async def test_custom_patterns_replace_defaults_and_base(tmp_path: Path) -> None:
    patterns = [{"regex": "(?i)\\bsorry\\b", "penalty": 0.25, "label": "apology"}]
    score = await grade("Sorry, lol.", tmp_path, patterns=patterns)
    assert score.flags == ("style:apology",) and score.score == pytest.approx(0.75)
    none = await grade("lol!!", tmp_path, patterns=[])
    assert none.score == 1.0
    # base 0.5 minus emoji 0.2 = 0.3; base above 1 is clipped to 1.
    assert (await grade("ok \U0001F600", tmp_path, base=0.5)).score == pytest.approx(0.3)
    assert (await grade("ok", tmp_path, base=1.5)).score == 1.0


async def test_input_template(tmp_path: Path) -> None:
    score = await grade("plain", tmp_path, input="{{ sample.output_tools[0].function.name }} lol")
    assert score.flags == ("style:slang",)
    err = await grade("plain", tmp_path, input="{{ item.missing }}")
    assert err.error is not None and err.error.startswith("style_penalty:") and err.score == 0.0


@pytest.mark.parametrize("bad, field", [
    ({"patterns": [{"regex": "(unclosed"}]}, "field 'patterns.0.regex'"),
    ({"patterns": [{"regex": "x", "penalty": -1}]}, "field 'patterns.0.penalty'"),
    ({"patterns": [{"regex": "x", "label": "has space"}]}, "field 'patterns.0.label'"),
    ({"max_words": -1}, "field 'max_words'"),
    ({"emoji": 0.1}, "unknown field"),
])
def test_bad_spec_names_the_field(tmp_path: Path, bad: dict[str, Any], field: str) -> None:
    with pytest.raises(GraderError, match=field):
        build_grader({"type": "builtin", "name": "style_penalty", **bad}, tmp_path)


def test_plain_functions() -> None:
    assert style_score("Fine.") == 1.0
    assert style_score("lol") == pytest.approx(0.9)
    assert style_score("a b c", max_words=1, per_word_over=0.1) == pytest.approx(0.8)
    assert count_emoji("a \U0001F600 b \u2764\uFE0F 1\uFE0F\u20E3") == 3
    report = style_report("dude", patterns=[StylePattern(regex="dude", penalty=0.4, label="x")])
    assert report.flags == ("style:x",) and report.score == pytest.approx(0.6)
    assert {p.label for p in default_patterns()} >= {"slang", "profanity", "exclamation",
                                                     "shouting"}
