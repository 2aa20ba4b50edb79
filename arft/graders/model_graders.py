"""The hosted ``score_model`` and ``label_model`` graders: a model judge reads rendered messages.

Specs (hosted fields, plus arft's judge fields ``base_url``, ``api_key_env``, ``timeout_s``,
``max_retries``, ``backoff_s`` — see ``arft.config.judge.JudgeFields``)::

    {"type": "score_model", "name": "quality", "model": "gpt-4o-mini",
     "input": [{"role": "system", "content": "Grade the answer from 0 to 1."},
               {"role": "user", "content": "Q: {{ item.question }}\\nA: {{ sample.output_text }}"}],
     "range": [0, 1], "pass_threshold": 0.5, "sampling_params": {"temperature": 0}}

    {"type": "label_model", "name": "tone", "model": "gpt-4o-mini", "input": [...],
     "labels": ["professional", "casual", "rude"], "passing_labels": ["professional"]}

The judge is asked for the hosted structured output ``{"steps": [...], "result": ...}``. A
``score_model`` result is clipped to ``range``; a ``label_model`` scores 1.0 for a passing label,
else 0.0. A non-numeric or off-label answer, a failed request or a template error scores 0 with
the reason in ``error`` (never a silent zero).
"""

from __future__ import annotations

import math
from pathlib import Path

from arft.config.graders import LabelModelSpec, ScoreModelSpec
from arft.graders.base import GraderError, validate_spec
from arft.graders.judge import (JudgeClient, JudgeError, check_input, clip, json_schema_format,
                                render_messages, reply_result, result_schema)
from arft.graders.templates import TemplateError
from arft.records import Score

SCORE_INSTRUCTIONS = ('Reply with JSON only: {{"steps": [{{"description": "...", "conclusion": '
                      '"..."}}], "result": <a number from {low} to {high}>}}.')
LABEL_INSTRUCTIONS = ('Reply with JSON only: {{"steps": [{{"description": "...", "conclusion": '
                      '"..."}}], "result": "<one of: {labels}>"}}.')


def _number(value: object) -> float | None:
    """A finite number from a judge's result (a JSON number or a numeric string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


class ScoreModelGrader:
    """Asks the judge for a number; clips it to ``range``."""

    def __init__(self, spec: ScoreModelSpec) -> None:
        self.spec = spec
        self.name = spec.name
        low, high = spec.range
        schema = result_schema({"type": "number"})
        self.client = JudgeClient.from_fields(spec, spec.model,
                                              json_schema_format("score_model_result", schema))
        self.instructions = (SCORE_INSTRUCTIONS.format(low=low, high=high)
                             if spec.output_instructions else None)

    def _error(self, reason: str) -> Score:
        return Score(score=0.0, error=f"{self.name}: {reason}", grader=self.name)

    async def aclose(self) -> None:
        """Close the judge's connections (call before the event loop ends)."""
        await self.client.aclose()

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        try:
            messages = render_messages(self.spec.input, sample, item, self.instructions)
            text = await self.client.ask(messages)
            result = reply_result(text)
        except (TemplateError, JudgeError) as e:
            return self._error(str(e))
        value = _number(result)
        if value is None:
            return self._error(f"the judge's result is not a number: {clip(str(result))}")
        low, high = self.spec.range
        score = min(max(value, low), high)
        passed = None if self.spec.pass_threshold is None else score >= self.spec.pass_threshold
        return Score(score=score, passed=passed, grader=self.name)


class LabelModelGrader:
    """Asks the judge for one of ``labels``; 1.0 when it is a passing label."""

    def __init__(self, spec: LabelModelSpec) -> None:
        self.spec = spec
        self.name = spec.name
        schema = result_schema({"type": "string", "enum": list(spec.labels)})
        self.client = JudgeClient.from_fields(spec, spec.model,
                                              json_schema_format("label_model_result", schema))
        labels = ", ".join(spec.labels)
        self.instructions = (LABEL_INSTRUCTIONS.format(labels=labels)
                             if spec.output_instructions else None)

    def _error(self, reason: str) -> Score:
        return Score(score=0.0, error=f"{self.name}: {reason}", grader=self.name)

    async def aclose(self) -> None:
        """Close the judge's connections (call before the event loop ends)."""
        await self.client.aclose()

    def _label(self, result: object) -> str | None:
        """The label the judge chose: exact, else the one label equal ignoring case and quotes."""
        if not isinstance(result, str):
            return None
        if result in self.spec.labels:
            return result
        wanted = result.strip().strip("\"'`.").casefold()
        matches = [label for label in self.spec.labels if label.casefold() == wanted]
        return matches[0] if len(matches) == 1 else None

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        try:
            messages = render_messages(self.spec.input, sample, item, self.instructions)
            result = reply_result(await self.client.ask(messages))
        except (TemplateError, JudgeError) as e:
            return self._error(str(e))
        label = self._label(result)
        if label is None:
            return self._error(f"the judge answered {clip(str(result))}, which is not one of the "
                               f"labels {self.spec.labels}")
        passed = label in self.spec.passing_labels
        return Score(score=1.0 if passed else 0.0, passed=passed, grader=self.name)


def _check_range(spec: ScoreModelSpec) -> None:
    low, high = spec.range
    if not low < high:
        raise GraderError(f"grader {spec.name!r} (score_model): field 'range': the low end must "
                          f"be below the high end, got {list(spec.range)}")


def _check_labels(spec: LabelModelSpec) -> None:
    if len(set(spec.labels)) != len(spec.labels):
        raise GraderError(f"grader {spec.name!r} (label_model): field 'labels': duplicate labels "
                          f"in {spec.labels}")
    unknown = [label for label in spec.passing_labels if label not in spec.labels]
    if unknown:
        raise GraderError(f"grader {spec.name!r} (label_model): field 'passing_labels': "
                          f"{unknown} not in labels {spec.labels}")


def build_score_model(spec: dict[str, object], base_dir: Path) -> ScoreModelGrader:
    """Registry entry point for ``score_model`` (``base_dir`` is unused)."""
    parsed = validate_spec(ScoreModelSpec, spec)
    _check_range(parsed)
    check_input(parsed.name, parsed.input)
    return ScoreModelGrader(parsed)


def build_label_model(spec: dict[str, object], base_dir: Path) -> LabelModelGrader:
    """Registry entry point for ``label_model`` (``base_dir`` is unused)."""
    parsed = validate_spec(LabelModelSpec, spec)
    _check_labels(parsed)
    check_input(parsed.name, parsed.input)
    return LabelModelGrader(parsed)
