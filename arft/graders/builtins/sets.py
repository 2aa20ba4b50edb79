"""``set_f1``: F-beta of a predicted set against a reference set (Cognition's file-selection F1).

Job spec::

    {"type": "builtin", "name": "set_f1",
     "predicted": "{{ sample.output_json.files }}", "reference": "{{ item.files }}",
     "normalize": "path", "beta": 1.0}

``predicted`` and ``reference`` are templates (or literal lists). A template that is exactly one
placeholder yields the raw value (a list stays a list); anything else renders to text. A list
gives its elements; a text that is a JSON list is parsed; any other text is split on commas,
newlines and whitespace, with list bullets, quotes and brackets stripped (``- `a.py`,`` ->
``a.py``). ``normalize``: ``path`` (default: ``./a//b/`` -> ``a/b``, backslashes -> ``/``),
``lower`` (case-folded) or ``none`` (as given, trimmed).

Score: F-beta (``beta`` > 1 weighs recall more), ``sub_scores`` ``precision`` and ``recall``,
``passed`` when the sets are equal. An empty prediction has precision 1 (nothing wrong was
named) and an empty reference has recall 1, so empty-vs-empty scores 1.0 and every other case
with an empty side scores 0.0.

**Unparseable output is a grade, not an error.** When the model's output cannot be read as a
set (``output_json`` is not JSON, lacks the key, or holds an object or number), the rollout
scores 0.0 with the flag ``unparseable_output`` and no ``error``: the model failed the task
format, which is exactly what the reward should teach. A spec problem (a ``reference`` path
missing from the item, a ``predicted`` path rooted at an unknown sample key) is an error Score.

Inside python graders: ``from arft.graders.builtins.sets import set_f1, precision_recall_f``.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path
from typing import Iterable, Literal

from arft.config.builtin_graders import SetF1Spec
from arft.graders.base import validate_spec
from arft.graders.templates import PLACEHOLDER, TemplateError, template_value
from arft.records import Score

Normalize = Literal["path", "lower", "none"]
_SEPARATORS = re.compile(r"[,\s]+")
_STRIP = "`'\"[](){}<>;:*"
_BULLET = re.compile(r"^(?:[-*+•]|\d+[.)])$")
_SAMPLE_ROOT = re.compile(r"^\s*sample\s*\.\s*([A-Za-z_][A-Za-z0-9_\-]*)")


class UnparseableError(ValueError):
    """A value that cannot be read as a set of strings."""


def normalize_item(text: str, normalize: Normalize = "path") -> str:
    """One element as it is compared: trimmed, then path-normalised or case-folded."""
    text = text.strip()
    if normalize == "lower":
        return text.casefold()
    if normalize == "path" and text:
        path = posixpath.normpath(text.replace("\\", "/"))
        return "" if path == "." else path
    return text


def _split_text(text: str) -> list[str]:
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            parsed = json.loads(stripped)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list):
            return to_items(parsed)
    tokens = (t.strip(_STRIP) for t in _SEPARATORS.split(text))
    return [t for t in tokens if t and not _BULLET.match(t)]


def to_items(value: object) -> list[str]:
    """``value`` as a list of strings; raises ``UnparseableError`` for objects, numbers, None."""
    if isinstance(value, str):
        return _split_text(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = []
        for element in value:
            if isinstance(element, (dict, list)) or element is None:
                raise UnparseableError(f"a list element is {json.dumps(element)}, not a string")
            items.append(str(element))
        return items
    raise UnparseableError(f"expected a list or a string, got {json.dumps(value, default=str)}")


def _as_set(values: Iterable[str] | str, normalize: Normalize) -> set[str]:
    items = to_items(values) if isinstance(values, str) else [str(v) for v in values]
    return {n for n in (normalize_item(v, normalize) for v in items) if n}


def precision_recall_f(predicted: Iterable[str] | str, reference: Iterable[str] | str,
                       beta: float = 1.0, normalize: Normalize = "path"
                       ) -> tuple[float, float, float]:
    """``(precision, recall, f_beta)`` of two sets (see the module docstring for empty sets)."""
    pred, ref = _as_set(predicted, normalize), _as_set(reference, normalize)
    hits = len(pred & ref)
    precision = hits / len(pred) if pred else 1.0
    recall = hits / len(ref) if ref else 1.0
    if not pred or not ref:
        return precision, recall, 1.0 if pred == ref else 0.0
    if hits == 0:
        return precision, recall, 0.0
    b2 = beta * beta
    return precision, recall, (1 + b2) * precision * recall / (b2 * precision + recall)


def set_f1(predicted: Iterable[str] | str, reference: Iterable[str] | str, beta: float = 1.0,
           normalize: Normalize = "path") -> float:
    """F-beta (F1 by default) of ``predicted`` against ``reference``; strings are split."""
    return precision_recall_f(predicted, reference, beta, normalize)[2]


def _model_output_problem(template: str | list[str], sample: dict[str, object]) -> bool:
    """Whether a failed ``predicted`` template failed inside the model's output (a grade)."""
    if isinstance(template, list):
        return False
    inner = [m.group(1) for m in PLACEHOLDER.finditer(template)]
    roots = [_SAMPLE_ROOT.match(expr) for expr in inner]
    return bool(roots) and all(r is not None and r.group(1) in sample for r in roots)


class SetF1Grader:
    """Grades F-beta of the predicted against the reference set."""

    def __init__(self, spec: SetF1Spec) -> None:
        self.spec = spec
        self.name = spec.name

    def _error(self, reason: str) -> Score:
        return Score(score=0.0, error=f"{self.name}: {reason}", grader=self.name)

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        try:
            reference = to_items(template_value(self.spec.reference, sample, item))
        except (TemplateError, UnparseableError) as e:
            return self._error(f"reference: {e}")
        try:
            predicted = to_items(template_value(self.spec.predicted, sample, item))
        except (TemplateError, UnparseableError) as e:
            if isinstance(e, TemplateError) and not _model_output_problem(self.spec.predicted,
                                                                          sample):
                return self._error(f"predicted: {e}")
            # The model's output is not a set: a legitimate zero, flagged (module docstring).
            return Score(score=0.0, sub_scores={"precision": 0.0, "recall": 0.0}, passed=False,
                         flags=("unparseable_output",), grader=self.name)
        p, r, f = precision_recall_f(predicted, reference, self.spec.beta, self.spec.normalize)
        return Score(score=f, sub_scores={"precision": p, "recall": r}, passed=f == 1.0,
                     grader=self.name)


def build_set_f1(spec: dict[str, object], base_dir: Path) -> SetF1Grader:
    """Registry entry point (``base_dir`` is unused)."""
    return SetF1Grader(validate_spec(SetF1Spec, spec))
