"""The hosted ``multi`` grader: grade with several child graders, combine them with a formula.

Spec (the hosted fields, plus an optional ``pass_threshold``)::

    {"type": "multi", "name": "answer_and_tools",
     "graders": {"exact": {"type": "string_check", ...}, "close": {"type": "text_similarity", ...}},
     "calculate_output": "0.7 * exact + 0.3 * close"}

The formula reads each child by its key in ``graders`` (see ``arft.graders.formula`` for the safe
syntax: ``+ - * / ^``, parentheses and ``min max abs floor ceil exp sqrt log``); it is checked when
the grader is built, so a typo fails the job before it starts.

The children run concurrently. The result carries every child's score in ``sub_scores`` (and a
nested multi's own sub-scores as ``child.sub``), the union of their flags, and — when any child
failed — every child's error: the score is still computed from the children's scores (a failed
child counts 0) so training goes on, but the failure is visible and counted, never silent.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from arft.config.graders import MultiSpec
from arft.graders.base import close_grader, Grader, GraderError, validate_spec, warm_up_grader
from arft.graders.formula import Formula, FormulaError, parse_formula
from arft.graders.registry import build_grader
from arft.records import Score


class MultiGrader:
    """Grades with every child concurrently and combines their scores with the formula."""

    def __init__(self, spec: MultiSpec, children: dict[str, Grader], formula: Formula) -> None:
        self.spec = spec
        self.name = spec.name
        self.children = children
        self.formula = formula

    async def warm_up(self) -> None:
        """Start every child's workers now (``warm_up_grader``), concurrently."""
        await asyncio.gather(*(warm_up_grader(c) for c in self.children.values()))

    async def aclose(self) -> None:
        """Close every child that holds resources (python pools, judge connections)."""
        for child in self.children.values():
            await close_grader(child)

    async def _child(self, key: str, grader: Grader, sample: dict[str, object],
                     item: dict[str, object]) -> Score:
        """One child's Score; whatever goes wrong in the child becomes an error Score."""
        try:
            score = await grader.grade(sample, item)
        except Exception as e:  # noqa: BLE001 - one broken child must not hide the others
            return Score(score=0.0, error=f"{type(e).__name__}: {e}", grader=key)
        if not isinstance(score, Score):
            return Score(score=0.0, error=f"returned {type(score).__name__}, expected a Score",
                         grader=key)
        if not math.isfinite(score.score):
            return Score(score=0.0, error=f"returned a non-finite score {score.score}", grader=key)
        return score

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        keys = list(self.children)
        results = await asyncio.gather(
            *(self._child(k, self.children[k], sample, item) for k in keys))
        scores = dict(zip(keys, results))
        sub_scores: dict[str, float] = {}
        flags: dict[str, None] = {}  # a dict keeps first-seen order while removing duplicates
        errors = []
        for key, score in scores.items():
            sub_scores[key] = score.score
            sub_scores.update({f"{key}.{k}": v for k, v in score.sub_scores.items()})
            flags.update(dict.fromkeys(score.flags))
            if score.error is not None:
                errors.append(f"child '{key}' failed: {score.error}")
        try:
            value = self.formula.evaluate({k: s.score for k, s in scores.items()})
        except FormulaError as e:
            errors.append(f"{e}; fix calculate_output or the children")
            value = 0.0
        threshold = self.spec.pass_threshold
        passed = None if threshold is None or errors else value >= threshold
        return Score(score=value, sub_scores=sub_scores, passed=passed, flags=tuple(flags),
                     error=f"{self.name}: " + "; ".join(errors) if errors else None,
                     grader=self.name)


def _build_children(name: object, graders: object, base_dir: Path) -> dict[str, Grader]:
    """Every child, built (and so checked) by its own builder before the spec is validated, so a
    broken child's error names it the way a top-level grader's would; a ``graders`` that is no
    mapping is left to the spec."""
    children: dict[str, Grader] = {}
    if not isinstance(graders, dict):
        return children
    for key, child in graders.items():
        if not isinstance(child, dict):
            raise GraderError(f"grader {name!r} (multi): field 'graders.{key}' must be a "
                              f"grader spec (a mapping with a 'type'), got {type(child).__name__}")
        try:
            # A child without a name is named by its key, so its errors say which child it is.
            children[key] = build_grader({"name": key, **child}, base_dir)
        except GraderError as e:
            raise GraderError(f"grader {name!r} (multi): child 'graders.{key}': {e}") from None
    return children


def build(spec: dict[str, object], base_dir: Path) -> MultiGrader:
    """Registry entry point: builds every child, validates the spec, checks the formula.

    Raises ``GraderError`` naming this grader and the field (a child's own error included).
    """
    children = _build_children(spec.get("name", "multi"), spec.get("graders"), base_dir)
    parsed = validate_spec(MultiSpec, spec)
    try:
        formula = parse_formula(parsed.calculate_output, allowed_names=children)
    except FormulaError as e:
        raise GraderError(f"grader {parsed.name!r} (multi): field 'calculate_output': "
                          f"{e}") from None
    return MultiGrader(parsed, children, formula)
