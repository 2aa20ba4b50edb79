"""The job's grader (``method.reinforcement.grader``), typed: a discriminated union on ``type``.

One spec model per grader type ``arft.graders.registry`` builds, under the hosted API's exact
field names: the hosted catalogue here (string_check, text_similarity, score_model, label_model,
python, multi, endpoint), arft's ``builtin`` designs in ``builtin_graders`` (discriminated again
on ``name``). ``multi`` children and the grader inside ``judge_hack_check`` are typed the same
way, so a typo anywhere in a job's grader is a load error naming its file and line.

These models are the one definition of every grader spec: ``load_job`` validates a job's grader
with them, and each builder in ``arft.graders`` validates the spec it is given with the same
model (``arft.graders.base.validate_spec``). They check the shape of a spec (field names, types,
ranges, regexes that must compile). What needs the grader's own code (a python source compiles,
a formula names its children, a tests folder exists) is checked when the registry builds the
grader from ``as_written(spec)``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, model_validator

from arft.config.base import Spec
from arft.config.builtin_graders import (AstGuardSpec, FactRecallSpec, Hack, SetF1Spec, StyleSpec,
                                         TestsPassSpec, ToolBudgetSpec, VerificationSpec)
from arft.config.judge import JudgeFields


class StringCheckSpec(Spec):
    """The hosted ``string_check``: compare two rendered templates, score 1.0 or 0.0."""

    type: Literal["string_check"]
    """The grader type."""
    name: str = "string_check"
    """Shown in metrics and error messages (the hosted API requires it; arft defaults it)."""
    input: str
    """Template of the text under test, usually ``{{ sample.output_text }}``."""
    reference: str
    """Template of the expected text, usually ``{{ item.<key> }}``."""
    operation: Literal["eq", "ne", "neq", "like", "ilike"]
    """``eq`` equal, ``ne``/``neq`` not equal, ``like`` the reference is a substring of the input,
    ``ilike`` the same ignoring case. Nothing is stripped."""


class TextSimilaritySpec(Spec):
    """The hosted ``text_similarity``: how close two rendered templates are, from 0 to 1."""

    type: Literal["text_similarity"]
    """The grader type."""
    name: str = "text_similarity"
    """Shown in metrics and error messages."""
    input: str
    """Template of the text under test, usually ``{{ sample.output_text }}``."""
    reference: str
    """Template of the expected text, usually ``{{ item.<key> }}``."""
    evaluation_metric: Literal["fuzzy_match", "bleu", "gleu", "meteor", "rouge_1", "rouge_2",
                               "rouge_3", "rouge_4", "rouge_5", "rouge_l", "cosine"]
    """The similarity measure (see ``arft.graders.text_similarity``); ``meteor`` and ``cosine``
    need the ``similarity`` extra."""
    pass_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """When set, ``passed`` is ``score >= pass_threshold``; otherwise ``passed`` is ``None``."""


class ContentPart(Spec):
    """A text part of a hosted input message (``input_text``/``output_text``/``text``)."""

    type: str = "input_text"
    """The part's kind; every kind is text here."""
    text: str
    """A template."""


class InputMessage(Spec):
    """One hosted ``input`` message of a model judge; ``content`` is a template."""

    type: str | None = None
    """The hosted API allows ``"type": "message"``; it changes nothing."""
    role: str
    """``system``, ``developer``, ``user`` or ``assistant``."""
    content: str | ContentPart | list[ContentPart]
    """A template, or text parts of templates (joined by newlines)."""

    def template(self) -> str:
        """The content as one template string (text parts joined by newlines)."""
        if isinstance(self.content, str):
            return self.content
        parts = [self.content] if isinstance(self.content, ContentPart) else self.content
        return "\n".join(p.text for p in parts)


class ScoreModelSpec(JudgeFields):
    """The hosted ``score_model``: a judge model answers a number."""

    type: Literal["score_model"]
    """The grader type."""
    name: str = "score_model"
    """Shown in metrics and error messages."""
    model: str
    """The judge model's name as its server knows it."""
    input: list[InputMessage]
    """The judge's messages; each ``content`` is a template."""
    range: tuple[float, float] = (0.0, 1.0)
    """The judge's answer is clipped to ``[low, high]``."""
    pass_threshold: float | None = None
    """``passed`` is ``score >= pass_threshold``; unset leaves ``passed`` as ``None``."""
    output_instructions: bool = True
    """arft: state the expected JSON in the system message, for servers that ignore
    ``response_format``."""


class LabelModelSpec(JudgeFields):
    """The hosted ``label_model``: a judge model picks a label; passing labels score 1.0."""

    type: Literal["label_model"]
    """The grader type."""
    name: str = "label_model"
    """Shown in metrics and error messages."""
    model: str
    """The judge model's name as its server knows it."""
    input: list[InputMessage]
    """The judge's messages; each ``content`` is a template."""
    labels: list[str] = Field(min_length=1)
    """Every label the judge may answer."""
    passing_labels: list[str] = Field(min_length=1)
    """The labels that score 1.0 (each one of ``labels``); any other scores 0.0."""
    output_instructions: bool = True
    """arft: state the expected JSON in the system message (see ``score_model``)."""


class PythonGraderSpec(Spec):
    """The hosted ``python`` grader: ``def grade(sample, item) -> float``, run sandboxed."""

    type: Literal["python"]
    """The grader type."""
    name: str = "python"
    """Shown in metrics and error messages."""
    source: str | None = None
    """Python code defining ``grade(sample, item)`` (give this or ``source_file``)."""
    source_file: str | None = None
    """arft addition: a ``.py`` file holding the source, relative to the job file's folder."""
    image_tag: str | None = None
    """Accepted for hosted specs and ignored: the sandbox runs this machine's interpreter."""
    timeout_s: float = Field(120.0, gt=0)
    """Wall-clock seconds of one grade; the grade is killed and scores 0 with the reason."""
    memory_mb: int = Field(2048, gt=0)
    """Memory (address space, MiB) one grade may allocate."""
    disk_mb: int = Field(1024, gt=0)
    """Size (MiB) of the scratch folder (and of /tmp and /dev/shm) and of any one file written."""

    @model_validator(mode="after")
    def _one_source(self) -> PythonGraderSpec:
        if (self.source is None) == (self.source_file is None):
            raise ValueError("give exactly one of 'source' (the code) and 'source_file' "
                             "(a .py file relative to the job file)")
        return self


class MultiSpec(Spec):
    """The hosted ``multi``: child graders combined by a formula."""

    type: Literal["multi"]
    """The grader type."""
    name: str = "multi"
    """Shown in metrics and error messages."""
    graders: dict[str, GraderSpec] = Field(min_length=1)
    """Child grader specs by key; ``calculate_output`` names children by these keys (a child
    without a ``name`` is named by its key)."""
    calculate_output: str
    """The formula combining the children's scores, e.g. ``"0.5 * a + 0.5 * b"`` (``+ - * / ^``,
    parentheses, ``min max abs floor ceil exp sqrt log``)."""
    pass_threshold: float | None = None
    """arft addition: when set, ``passed`` is ``score >= pass_threshold`` (if no child failed)."""


class EndpointSpec(Spec):
    """The hosted ``endpoint`` grader: POST ``{sample, item, trace_id}``, read ``{"score": x}``."""

    type: Literal["endpoint"]
    """The grader type."""
    name: str = "endpoint"
    """Shown in metrics and error messages."""
    url: str
    """The http(s) URL every grade is POSTed to."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Sent with every request (e.g. ``Authorization: Bearer ${GRADER_TOKEN}``): ``${ENV_VAR}``
    references are resolved at start; the run stores the references, and a literal value as
    ``***``."""
    signing_secret: str | None = None
    """arft: when set (best as ``${ENV_VAR}``), every request carries an ``arft-signature``
    header (HMAC-SHA256 of the timestamp and the body; see ``arft.signing``)."""
    timeout_s: float = Field(default=30.0, gt=0)
    """Seconds one attempt may take, connection to last byte."""
    max_retries: int = Field(default=3, ge=0)
    """Extra attempts after a retryable failure (so at most ``1 + max_retries`` requests)."""
    rate_limit_per_s: float | None = Field(default=None, gt=0)
    """At most this many requests started per second (``None``: no limit)."""


class JudgeHackCheckSpec(JudgeFields):
    """``judge_hack_check``: a judge reads the whole trajectory and zeroes listed reward hacks;
    otherwise the inner grader's score passes through."""

    type: Literal["builtin"]
    """The grader type."""
    name: Literal["judge_hack_check"]
    """The design."""
    model: str
    """The judge model's name as its server knows it."""
    grader: GraderSpec
    """The inner grader spec whose score passes through when no hack is found."""
    hacks: list[Hack] | None = None
    """The hacks to look for; default ``default_hacks()`` (the talk's Mako patterns)."""
    max_transcript_chars: int = Field(default=200_000, gt=1000)
    """The trajectory shown to the judge is cut in the middle beyond this many characters."""


BuiltinGraderSpec = Annotated[
    Union[SetF1Spec, FactRecallSpec, TestsPassSpec, StyleSpec, VerificationSpec, ToolBudgetSpec,
          AstGuardSpec, JudgeHackCheckSpec],
    Field(discriminator="name"),
]
"""arft's built-in designs (``type: builtin``), told apart by ``name``."""

GraderSpec = Annotated[
    Union[StringCheckSpec, TextSimilaritySpec, ScoreModelSpec, LabelModelSpec, PythonGraderSpec,
          MultiSpec, EndpointSpec, BuiltinGraderSpec],
    Field(discriminator="type"),
]
"""Any grader a job may name, told apart by ``type`` (and ``builtin`` designs by ``name``)."""

MultiSpec.model_rebuild()
JudgeHackCheckSpec.model_rebuild()


def as_written(spec: BaseModel) -> dict[str, Any]:
    """A grader spec as the job wrote it: the fields that were set, as plain data (what the
    grader builders and the spec checks of ``arft.graders.validate`` read)."""
    return spec.model_dump(exclude_unset=True)
