"""Built-in ``fact_recall``: the share of reference facts the answer contains (Qodo's reward).

Spec::

    {"type": "builtin", "name": "fact_recall", "facts": "{{ item.facts }}",
     "input": "{{ sample.output_text }}", "mode": "string", "case_sensitive": false}

``facts`` is a template that resolves to a list of strings (or a string holding a JSON list), or a
literal list. ``mode``:

* ``string`` — a fact is present when its normalised text is a substring of the normalised answer
  (whitespace collapsed, lowercased unless ``case_sensitive``; punctuation at the fact's ends is
  stripped, so ``"Paris."`` matches ``"... Paris, the ..."``).
* ``judge`` — one judge call reads the answer and the numbered facts and returns the numbers of
  the facts the answer states or clearly implies. Takes the judge fields of
  ``arft.config.judge.JudgeFields`` (``model`` is required).

The score is ``present / len(facts)`` (partial credit); ``sub_scores`` has ``fact[i]`` = 1.0 or
0.0 per fact; ``passed`` is ``score >= pass_threshold`` when one is set. No facts, a template error
or an unusable judge answer scores 0 with the reason in ``error``.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any

from arft.config.builtin_graders import FactRecallSpec
from arft.graders.base import GraderError, validate_spec
from arft.graders.judge import (JudgeClient, JudgeError, clip, json_schema_format, reply_result,
                                result_schema)
from arft.graders.templates import TemplateError, render_template, template_value
from arft.records import Message, Score

JUDGE_SYSTEM = (
    "You check which reference facts an answer contains. A fact counts when the answer states it "
    "or clearly implies it, in any wording; it does not count when the answer omits it, "
    "contradicts it or only hints vaguely. Judge only the answer, not your own knowledge.\n"
    'Reply with JSON only: {"steps": [{"description": "...", "conclusion": "..."}], '
    '"result": [<the numbers of the facts the answer contains>]}.')


def normalise(text: str, case_sensitive: bool = False) -> str:
    """Whitespace collapsed to single spaces and trimmed; lowercased unless ``case_sensitive``."""
    text = " ".join(text.split())
    return text if case_sensitive else text.casefold()


def normalise_fact(fact: str, case_sensitive: bool = False) -> str:
    """A fact normalised like the answer, with punctuation stripped at both ends."""
    return normalise(fact, case_sensitive).strip(string.punctuation + " ")


def resolve_facts(facts: str | list[str], sample: dict[str, object],
                  item: dict[str, object]) -> list[str]:
    """The reference facts; raises ``TemplateError`` or ``ValueError`` with the reason."""
    value: Any = template_value(facts, sample, item)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"facts {facts!r} gave the text {clip(value)}, not a list of "
                             "strings") from None
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise ValueError(f"facts {facts!r} must be a list of strings, got {clip(json.dumps(value))}")
    return value


def string_matches(answer: str, facts: list[str], case_sensitive: bool) -> list[bool]:
    """Whether each fact's normalised text occurs in the normalised answer."""
    haystack = normalise(answer, case_sensitive)
    return [normalise_fact(f, case_sensitive) in haystack for f in facts]


def judge_messages(answer: str, facts: list[str]) -> list[Message]:
    """The judge prompt: the answer, then the numbered facts."""
    numbered = "\n".join(f"{i}. {fact}" for i, fact in enumerate(facts, start=1))
    user = f"ANSWER:\n{answer}\n\nREFERENCE FACTS:\n{numbered}"
    return [Message(role="system", content=JUDGE_SYSTEM), Message(role="user", content=user)]


def judged_matches(result: object, n_facts: int) -> list[bool]:
    """Which facts the judge's ``result`` (a list of 1-based fact numbers) marks as present."""
    if not isinstance(result, list):
        raise JudgeError(f"the judge's result should be a list of fact numbers, got "
                         f"{clip(json.dumps(result))}")
    chosen: set[int] = set()
    for number in result:
        if isinstance(number, str) and re.fullmatch(r"\s*\d+\s*", number):
            number = int(number)
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= n_facts:
            raise JudgeError(f"the judge named fact {number!r}; facts are numbered 1..{n_facts}")
        chosen.add(number)
    return [i in chosen for i in range(1, n_facts + 1)]


class FactRecallGrader:
    """Share of the reference facts present in the answer (string match or a judge)."""

    def __init__(self, spec: FactRecallSpec, client: JudgeClient | None) -> None:
        self.spec = spec
        self.name = spec.name
        self.client = client

    async def aclose(self) -> None:
        """Close the judge's connections, if any (call before the event loop ends)."""
        if self.client is not None:
            await self.client.aclose()

    async def _matches(self, answer: str, facts: list[str]) -> list[bool]:
        if self.client is None:
            return string_matches(answer, facts, self.spec.case_sensitive)
        result = reply_result(await self.client.ask(judge_messages(answer, facts)))
        return judged_matches(result, len(facts))

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        try:
            facts = resolve_facts(self.spec.facts, sample, item)
            answer = render_template(self.spec.input, sample, item)
            empty = [i for i, f in enumerate(facts) if not normalise_fact(f)]
            if not facts or empty:
                raise ValueError("there are no reference facts to recall" if not facts else
                                 f"fact(s) {empty} are empty after normalisation")
            matches = await self._matches(answer, facts)
        except (TemplateError, ValueError, JudgeError) as e:
            return Score(score=0.0, error=f"{self.name}: {e}", grader=self.name)
        score = sum(matches) / len(facts)
        threshold = self.spec.pass_threshold
        return Score(score=score, grader=self.name,
                     sub_scores={f"fact[{i}]": float(m) for i, m in enumerate(matches)},
                     passed=None if threshold is None else score >= threshold)


def build(spec: dict[str, object], base_dir: Path) -> FactRecallGrader:
    """Registry entry point (``base_dir`` is unused)."""
    parsed = validate_spec(FactRecallSpec, spec)
    if parsed.mode == "string":
        return FactRecallGrader(parsed, None)
    if not parsed.model:
        raise GraderError("grader 'fact_recall' (builtin): field 'model': required when mode is "
                          "'judge' (the judge model's name)")
    schema = result_schema({"type": "array", "items": {"type": "integer"}})
    client = JudgeClient.from_fields(parsed, parsed.model,
                                     json_schema_format("fact_recall_result", schema))
    return FactRecallGrader(parsed, client)
