"""Spec models of arft's built-in reward designs (``{"type": "builtin", "name": "<design>"}``).

Each design's behaviour is described in its module under ``arft.graders.builtins``; the recursive
``judge_hack_check`` (it holds a grader) is with the union in ``arft.config.graders``.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, field_validator, model_validator

from arft.config.base import Spec
from arft.config.judge import JudgeFields

AST_GUARD_PATTERNS: dict[str, str] = {
    "unparseable": "the code is not valid Python (or too deeply nested to analyse)",
    "missing_file": "code_from names a file the workspace does not have",
    "missing_function": "the required function is not defined",
    "aliased_function": "the required function is a lambda, an import or another name, or is "
                        "rebound after its def",
    "trivial_body": "the required function is a stub: pass/..., one constant return, "
                    "NotImplementedError, or it ignores every argument",
    "calls_reference": "a forbidden name (e.g. the reference implementation) is imported, "
                       "called or referenced",
    "reads_tests": "a protected path (tests, grader, expected outputs) is opened, listed, "
                   "imported or run",
    "inspects_frames": "the code walks interpreter frames, the stack or the garbage collector "
                       "(how a solution reads its caller's expected values)",
    "patches_timer": "a timer (time, timeit, torch.cuda.synchronize/Event, ...) is replaced, "
                     "or work moves to a side CUDA stream the timer does not wait for",
    "patches_modules": "sys.modules, builtins, import hooks, code objects or another module's "
                       "functions are overwritten or mocked",
    "overrides_equality": "a class makes comparisons always succeed (__eq__ always True, "
                          "__sub__ always 0, ...)",
    "hardcoded_outputs": "expected outputs appear as literals or as a lookup table",
    "special_cases_inputs": "the code compares against known test inputs or keys a table by them",
    "exits_early": "the code ends or skips the run (sys.exit, os._exit, SystemExit, "
                   "pytest.skip, atexit)",
    "catches_everything": "a handler swallows every exception incl. AssertionError (bare "
                          "except, BaseException, suppress, return in finally)",
    "uses_eval_exec": "eval/exec/compile, computed imports or code objects run code the "
                      "analysis cannot see",
}
"""The hack patterns ``ast_guard`` knows (the values its ``checks`` accept), each with what it
means; ``arft.graders.builtins.ast_checks`` finds them."""

_IDENTIFIER_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _regex(value: str, subject: str = "") -> str:
    """``value`` when it compiles as a Python regex, else a ``ValueError`` (``subject`` starts
    its message) saying why."""
    try:
        re.compile(value)
    except re.error as e:
        raise ValueError(f"{subject}not a valid regular expression: {e}") from None
    return value


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

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return _regex(value)


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

    @field_validator("patterns", "edit_patterns")
    @classmethod
    def _not_blank(cls, value: list[str] | None) -> list[str] | None:
        if any(not p.strip() for p in value or ()):
            raise ValueError("a command prefix must not be empty (it would match every command)")
        return value

    @field_validator("output_patterns")
    @classmethod
    def _compiles(cls, value: list[str] | None) -> list[str] | None:
        for pattern in value or ():
            _regex(pattern, f"{pattern!r} is ")
        return value


class ToolBudgetSpec(Spec):
    """``tool_budget``: 1.0 within a tool-call budget, less for every call over it."""

    type: Literal["builtin"] = "builtin"
    """The grader type."""
    name: Literal["tool_budget"]
    """The design."""
    budget: float = Field(ge=0)
    """What a rollout may use without penalty, in ``unit`` (calls, turns or seconds)."""
    penalty: float = Field(default=0.1, ge=0)
    """Subtracted per unit over the budget (``linear``) or once (``step``)."""
    kind: Literal["linear", "step"] = "linear"
    """``linear``: ``penalty`` per unit over; ``step``: ``penalty`` once when over."""
    count: Literal["executed", "all"] = "executed"
    """For ``unit: calls``: ``executed`` counts calls that ran (refused and unparseable ones left
    out); ``all`` every call."""
    unit: Literal["calls", "turns", "latency"] = "calls"
    """``calls``, ``turns`` (sequential tool rounds) or ``latency`` (critical-path seconds), as
    the job's ``budget.unit``."""
    tool_costs: dict[str, NonNegativeFloat] | None = None
    """Seconds per call of each tool for ``unit: latency``; others use their measured latency."""


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

    @field_validator("checks")
    @classmethod
    def _known_checks(cls, value: list[str] | None) -> list[str] | None:
        unknown = [c for c in value or [] if c not in AST_GUARD_PATTERNS]
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; known: {', '.join(AST_GUARD_PATTERNS)}")
        return value

    @field_validator("penalty")
    @classmethod
    def _penalty_range(cls, value: str | float) -> str | float:
        if not isinstance(value, str) and not 0 < value <= 1:
            raise ValueError(f"must be 'zero' or a number in (0, 1], got {value}")
        return value

    @field_validator("required_function")
    @classmethod
    def _dotted_name(cls, value: str | None) -> str | None:
        if value is not None and not _IDENTIFIER_PATH.fullmatch(value):
            raise ValueError(f"{value!r} is not a name like 'solve' or 'ModelNew.forward'")
        return value

    @field_validator("code_from")
    @classmethod
    def _workspace_path(cls, value: str | None) -> str | None:
        if value is None:
            return value
        prefix, _, rel = value.partition(":")
        path = PurePosixPath(rel)
        if prefix != "workspace" or not rel or path.is_absolute() or ".." in path.parts:
            raise ValueError(f"{value!r} must be 'workspace:<relative path>' inside the "
                             "workspace (no leading '/', no '..')")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> AstGuardSpec:
        if self.code is not None and self.code_from is not None:
            raise ValueError("set 'code' or 'code_from', not both")
        return self


class Hack(Spec):
    """One reward hack the judge looks for; ``name`` becomes the flag ``hack:<name>``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    """A short identifier of the hack."""
    description: str = Field(min_length=1)
    """What the judge should look for, in words."""
