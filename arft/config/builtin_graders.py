"""Spec models of arft's built-in reward designs (``{"type": "builtin", "name": "<design>"}``).

Each design's behaviour is described in its module under ``arft.graders.builtins``; the recursive
``judge_hack_check`` (it holds a grader) is with the union in ``arft.config.graders``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from arft.config.base import Spec
from arft.config.judge import JudgeFields


class SetF1Spec(Spec):
    """``set_f1``: F-beta of a predicted set against a reference set (file selection)."""

    type: Literal["builtin"] = "builtin"
    """The grader type."""
    name: Literal["set_f1"]
    """The design."""
    predicted: str | list[str]
    """Template of the model's set, e.g. ``{{ sample.output_json.files }}``."""
    reference: str | list[str]
    """Template of the expected set, e.g. ``{{ item.files }}``, or a literal list."""
    normalize: Literal["path", "lower", "none"] = "path"
    """How elements compare: ``path`` (``./a//b/`` is ``a/b``), ``lower`` (case-folded),
    ``none`` (as given, trimmed)."""
    beta: float = Field(default=1.0, gt=0)
    """F-beta weight: ``beta`` > 1 favours recall, < 1 favours precision."""


class FactRecallSpec(JudgeFields):
    """``fact_recall``: the share of reference facts the answer contains (judge fields used only
    in ``judge`` mode, where ``model`` is required)."""

    type: Literal["builtin"]
    """The grader type."""
    name: Literal["fact_recall"]
    """The design."""
    facts: str | list[str]
    """A template resolving to the list of reference facts, or the list itself."""
    input: str = "{{ sample.output_text }}"
    """Template of the answer to search."""
    mode: Literal["string", "judge"] = "string"
    """``string``: a fact is present when its normalised text is a substring of the answer;
    ``judge``: one judge call names the facts the answer states or implies."""
    case_sensitive: bool = False
    """String mode only: compare with case."""
    pass_threshold: float | None = Field(default=None, ge=0, le=1)
    """When set, ``passed`` is ``score >= pass_threshold``."""


class TestsPassSpec(Spec):
    """``tests_pass``: the task's tests run against a copy of the rollout's workspace."""

    __test__ = False  # not a pytest test class, whatever its name

    type: Literal["builtin"] = "builtin"
    """The grader type."""
    name: Literal["tests_pass"]
    """The design."""
    command: str = Field(default="python -m pytest -q", min_length=1)
    """Shell command run in the copy (``bash -c``)."""
    tests: str | dict[str, str] | None = None
    """``{path: content}``, a directory/file relative to the job file, or a template of either
    (default: the workspace's own tests)."""
    mode: Literal["fraction", "all_or_nothing"] = "fraction"
    """``fraction``: passed / (passed + failed + errors); ``all_or_nothing``: 1.0 only when
    every test passed."""
    parser: Literal["auto", "pytest", "exit_code"] = "auto"
    """``pytest`` reads pytest's summary line, ``exit_code`` scores exit status 0 as passing;
    auto: ``pytest`` when the command mentions pytest, else ``exit_code``."""
    timeout_s: float = Field(default=120.0, gt=0)
    """Wall-clock seconds the command may run."""
    memory_mb: int = Field(default=2048, gt=0)
    """Memory (address space, MiB) the command may allocate."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for the command."""


class StylePattern(Spec):
    """One unprofessional-tone rule: a regex, the penalty when it matches, and its flag label."""

    regex: str
    """A Python regex searched in the text (inline flags such as ``(?i)`` allowed)."""
    penalty: float = Field(default=0.1, ge=0)
    """Subtracted once when the regex matches."""
    label: str = Field(default="pattern", pattern=r"^[A-Za-z0-9_.\-]+$")
    """The flag ``style:<label>`` set when it matches."""


class StyleSpec(Spec):
    """``style_penalty``: a tone score, ``base`` minus verbosity, emoji and pattern penalties."""

    type: Literal["builtin"] = "builtin"
    """The grader type."""
    name: Literal["style_penalty"]
    """The design."""
    input: str = "{{ sample.output_text }}"
    """Template of the text to judge."""
    max_words: int | None = Field(default=150, ge=0)
    """Words allowed before the verbosity penalty (``None``: no limit)."""
    per_word_over: float = Field(default=0.002, ge=0)
    """Penalty per word past ``max_words``."""
    emoji_penalty: float = Field(default=0.2, ge=0)
    """Penalty, once, when the text holds any emoji."""
    patterns: list[StylePattern] | None = None
    """Tone rules; ``None`` (default) uses ``default_patterns()``, ``[]`` none."""
    base: float = 1.0
    """The score before penalties (the result is clipped to [0, 1])."""


class VerificationSpec(Spec):
    """``verification_bonus``: a bonus when the agent verified its work after its last edit."""

    type: Literal["builtin"] = "builtin"
    """The grader type."""
    name: Literal["verification_bonus"]
    """The design."""
    patterns: list[str] | None = None
    """Command prefixes that verify (run tests); default: arft's list (pytest, npm test, go
    test, make test, ...; ``default_verify_commands()``)."""
    tools: list[str] = Field(default_factory=lambda: ["run_tests"])
    """Tool names whose every call is a verification."""
    bonus: float = 1.0
    """The score when a verification succeeded after the last edit (else 0.0)."""
    require_after_last_edit: bool = True
    """False: any successful verification earns the bonus, edits after it or not."""
    edit_tools: list[str] | None = None
    """Tool names that edit; default: names containing write, edit, patch, apply, ..."""
    edit_patterns: list[str] | None = None
    """Command prefixes that edit files; default: arft's list (sed -i, git apply, cp, mv, ...;
    ``default_edit_commands()``)."""
    require_success: bool = True
    """False: a verification that ran but failed (status ``tool_error``) counts too."""
    output_patterns: list[str] | None = None
    """Regexes; when set, a verification's output must match one of them."""


class ToolBudgetSpec(Spec):
    """``tool_budget``: 1.0 within a tool-call budget, less for every call over it."""

    type: Literal["builtin"] = "builtin"
    """The grader type."""
    name: Literal["tool_budget"]
    """The design."""
    budget: int = Field(ge=0)
    """Tool calls allowed without penalty."""
    penalty: float = Field(default=0.1, ge=0)
    """Subtracted per call over the budget (``linear``) or once (``step``)."""
    kind: Literal["linear", "step"] = "linear"
    """``linear``: ``penalty`` per call over; ``step``: ``penalty`` once when over."""
    count: Literal["executed", "all"] = "executed"
    """``executed``: calls that ran (refused and unparseable ones left out); ``all``: every call."""


class AstGuardSpec(Spec):
    """``ast_guard``: static analysis of produced Python for reward hacks."""

    type: Literal["builtin"] = "builtin"
    """The grader type."""
    name: Literal["ast_guard"]
    """The design."""
    code: str | None = None
    """Template of the code (default ``{{ sample.output_text }}``); fenced blocks extracted."""
    code_from: str | None = None
    """``workspace:<relative path>``: read a file (or a folder's ``*.py``) of the workspace."""
    required_function: str | None = None
    """A function (``solve``) or method (``ModelNew.forward``) that must really exist."""
    forbidden_names: list[str] = Field(default_factory=list)
    """Dotted names that must not be imported, called or referenced (templates allowed)."""
    protected_paths: list[str] = Field(default_factory=list)
    """Path fragments the code must not open, list, import or run (``tests/``, ``grader``)."""
    expected_outputs: str | list[Any] | None = None
    """Values that must not appear as literals (a list, or a template such as
    ``{{ item.expected }}``)."""
    test_inputs: str | list[Any] | None = None
    """Values that must not be special-cased in comparisons, ``in`` tests or table keys."""
    checks: list[str] | None = None
    """Patterns to report (default: all; ``unparseable`` is always on)."""
    penalty: Literal["zero"] | float = "zero"
    """``zero``: any finding scores 0; a number in (0, 1]: ``1 - penalty`` per finding."""


class Hack(Spec):
    """One reward hack the judge looks for; ``name`` becomes the flag ``hack:<name>``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    """A short identifier of the hack."""
    description: str = Field(min_length=1)
    """What the judge should look for, in words."""
