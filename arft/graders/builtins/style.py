"""``style_penalty``: a tone score (Cosine's verbosity, emoji and unprofessional-tone penalties).

Job spec (every field optional)::

    {"type": "builtin", "name": "style_penalty", "input": "{{ sample.output_text }}",
     "max_words": 150, "per_word_over": 0.002, "emoji_penalty": 0.2,
     "patterns": [{"regex": "(?i)\\blol\\b", "penalty": 0.1, "label": "slang"}], "base": 1.0}

Score = ``base`` minus the penalties, clipped to [0, 1]:

* ``style:verbose`` — ``per_word_over`` for every word (whitespace-separated token) past
  ``max_words`` (``null`` turns the rule off);
* ``style:emoji`` — ``emoji_penalty`` once when the text holds any emoji (pictographs, symbols
  and dingbats, flags, keycaps);
* ``style:<label>`` — each pattern's ``penalty`` once when its regex matches (``re.search``;
  use inline flags such as ``(?i)`` for case-insensitive rules). Without ``patterns`` the
  defaults of ``default_patterns()`` apply (slang, profanity, repeated exclamation marks, all-caps
  shouting, filler); ``"patterns": []`` turns them off.

Each triggered rule adds its flag; ``sub_scores`` are ``penalty`` (the total, before clipping)
and ``n_words``; ``passed`` is true when no rule fired. The score rewards tone only, so combine it
after correctness, e.g. a ``multi`` with ``"calculate_output": "correct * style"``.

Inside python graders: ``from arft.graders.builtins.style import style_score``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from arft.config.builtin_graders import StylePattern, StyleSpec
from arft.graders.base import validate_spec
from arft.graders.templates import TemplateError, render_template
from arft.records import Score

# Emoji: the pictograph blocks (U+1F000-1FAFF, which include flags and enclosed symbols),
# Miscellaneous Symbols and Dingbats (U+2600-27BF), a few stars/squares/circles used as emoji,
# and keycap sequences such as 1️⃣.
_EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B05-\u2B07\u2B1B\u2B1C\u2B50\u2B55"
                    "\u231A\u231B\u23E9-\u23FA\u3030\u303D]|[0-9#*]\uFE0F?\u20E3")


def default_patterns() -> list[StylePattern]:
    """The unprofessional patterns used when a spec gives no ``patterns``."""
    return [
        StylePattern(label="slang", penalty=0.1, regex=(
            r"(?i)\b(?:lol|lmao|rofl|omg|dude|bro|gonna|wanna|gotta|kinda|sorta|yep|yup|nah"
            r"|ya know|y'all)\b")),
        StylePattern(label="profanity", penalty=0.3,
                     regex=r"(?i)\b(?:damn|crap|shit\w*|fuck\w*|hell yeah|wtf)\b"),
        StylePattern(label="exclamation", penalty=0.1, regex=r"!{2,}"),
        # Three or more all-caps words in a row: shouting (a lone acronym is not).
        StylePattern(label="shouting", penalty=0.1,
                     regex=r"\b[A-Z]{2,}(?:[ \t]+[A-Z]{2,}){2,}\b"),
        StylePattern(label="filler", penalty=0.05, regex=(
            r"(?i)\b(?:i hope this helps|happy coding|great question|as an ai(?: language "
            r"model)?|feel free to ask)\b")),
    ]


@dataclass(frozen=True)
class StyleResult:
    """What the style rules found in one text."""

    score: float
    penalty: float
    n_words: int
    flags: tuple[str, ...]


def count_emoji(text: str) -> int:
    """How many emoji ``text`` holds."""
    return len(_EMOJI.findall(text))


def style_report(text: str, *, max_words: int | None = 150, per_word_over: float = 0.002,
                 emoji_penalty: float = 0.2, patterns: Sequence[StylePattern] | None = None,
                 base: float = 1.0) -> StyleResult:
    """Apply every rule to ``text`` (see the module docstring); the score is clipped to [0, 1]."""
    rules = default_patterns() if patterns is None else patterns
    n_words = len(text.split())
    penalty, flags = 0.0, []
    if max_words is not None and n_words > max_words:
        penalty += (n_words - max_words) * per_word_over
        flags.append("style:verbose")
    if _EMOJI.search(text):
        penalty += emoji_penalty
        flags.append("style:emoji")
    for rule in rules:
        if re.search(rule.regex, text):
            penalty += rule.penalty
            flags.append(f"style:{rule.label}")
    score = min(1.0, max(0.0, base - penalty))
    return StyleResult(score=score, penalty=penalty, n_words=n_words, flags=tuple(flags))


def style_score(text: str, **options: Any) -> float:
    """The style score of ``text``; ``options`` are ``style_report``'s keywords."""
    return style_report(text, **options).score


class StyleGrader:
    """Scores the tone of the rendered ``input``."""

    def __init__(self, spec: StyleSpec) -> None:
        self.spec = spec
        self.name = spec.name

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        try:
            text = render_template(self.spec.input, sample, item)
        except TemplateError as e:
            return Score(score=0.0, error=f"{self.name}: {e}", grader=self.name)
        s = self.spec
        result = style_report(text, max_words=s.max_words, per_word_over=s.per_word_over,
                              emoji_penalty=s.emoji_penalty, patterns=s.patterns, base=s.base)
        return Score(score=result.score, passed=not result.flags, flags=result.flags,
                     sub_scores={"penalty": result.penalty, "n_words": float(result.n_words)},
                     grader=self.name)


def build(spec: dict[str, object], base_dir: Path) -> StyleGrader:
    """Registry entry point (``base_dir`` is unused)."""
    return StyleGrader(validate_spec(StyleSpec, spec))
