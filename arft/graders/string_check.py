"""The hosted ``string_check`` grader: compare two rendered templates, score 1.0 or 0.0.

Spec (exactly the hosted fields)::

    {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
     "reference": "{{ item.answer }}", "operation": "eq"}

Operations: ``eq`` (equal), ``ne``/``neq`` (not equal), ``like`` (the reference is a substring of
the input), ``ilike`` (the same, ignoring case). Comparisons are exact: nothing is stripped.
"""

from __future__ import annotations

from pathlib import Path

from arft.config.graders import StringCheckSpec
from arft.graders.base import validate_spec
from arft.graders.templates import TemplateError, render_template
from arft.records import Score


def compare(operation: str, text: str, reference: str) -> bool:
    """Whether ``text`` passes ``operation`` against ``reference``."""
    if operation == "eq":
        return text == reference
    if operation in ("ne", "neq"):
        return text != reference
    if operation == "like":
        return reference in text
    if operation == "ilike":
        return reference.casefold() in text.casefold()
    raise ValueError(f"unknown string_check operation {operation!r}; use eq, ne, neq, like or ilike")


class StringCheckGrader:
    """Scores 1.0 when the comparison holds, else 0.0; template errors give an error Score."""

    def __init__(self, spec: StringCheckSpec) -> None:
        self.spec = spec
        self.name = spec.name

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        try:
            text = render_template(self.spec.input, sample, item)
            reference = render_template(self.spec.reference, sample, item)
        except TemplateError as e:
            # Not a grade: recorded as a grader error with its reason, never a silent zero.
            return Score(score=0.0, error=f"{self.name}: {e}", grader=self.name)
        score = 1.0 if compare(self.spec.operation, text, reference) else 0.0
        return Score(score=score, passed=score == 1.0, grader=self.name)


def build(spec: dict[str, object], base_dir: Path) -> StringCheckGrader:
    """Registry entry point (``base_dir`` is unused: string_check reads no files)."""
    return StringCheckGrader(validate_spec(StringCheckSpec, spec))
