"""Process rewards read from the trajectory: ``verification_bonus`` and ``tool_budget``.

Both read ``sample["trajectory"]["tool_calls"]`` (the executed-call records: ``name``,
``arguments``, ``output``, ``status``, ``turn``), so they judge *how* the agent worked, not its
answer. A sample without a trajectory (e.g. a bare ``--model-sample`` text) is an error Score.

``verification_bonus`` (Cosine: reward agents that verify their own work)::

    {"type": "builtin", "name": "verification_bonus", "tools": ["run_tests"],
     "patterns": ["pytest", "python -m pytest", "npm test"], "bonus": 1.0,
     "require_after_last_edit": true}

Scores ``bonus`` when a *verification* succeeded after the agent's last *edit*, else 0.0.

* A verification is a call to one of ``tools``, or a call whose arguments run one of the
  ``patterns``. Patterns are **command prefixes**, matched only where a shell command starts (the
  start of a string argument, or after ``;``, ``&``, ``|``, ``(``, a newline, ``VAR=x``
  assignments or a directory such as ``.venv/bin/``), so ``echo pytest`` or a file that says
  ``import pytest`` is not a test run. ``output_patterns`` (regexes, optional) further require
  the call's output to look like a test report. It succeeded when its status is ``ok`` (with
  ``"require_success": false`` a run that failed, status ``tool_error``, counts too).
* An edit is a call to one of ``edit_tools`` (default: any tool whose name contains write, edit,
  patch, apply, replace, insert, create or delete), or a call whose arguments run one of
  ``edit_patterns`` (default: ``sed -i``, ``git apply``, ``cp``, ``mv``, ... ) or redirect output
  into a file (``cat > f``, ``echo x >> f``; not ``> /dev/null``). Within one command line the
  order counts: ``sed -i ... && pytest`` edits, then verifies; ``pytest > log.txt`` is a
  verification whose own log does not count as an edit.
* Calls of one turn run concurrently, so a verification in the same turn as another call's edit
  did not see that edit and does not count. Records without a ``turn`` are taken as sequential.
* With ``"require_after_last_edit": false`` any successful verification earns the bonus. Without
  any edit, any successful verification counts.

Flags: ``verify:none`` (no verification at all), ``verify:failed`` (none succeeded),
``verify:stale`` (verified, but edited afterwards). ``sub_scores``: ``n_verifications``
(successful ones) and ``n_edits``.

``tool_budget`` (the talk's latency lever)::

    {"type": "builtin", "name": "tool_budget", "budget": 4, "penalty": 0.1,
     "kind": "linear", "count": "executed"}

1.0 within budget; ``linear``: 1 − penalty × (calls over budget), ``step``: 1 − penalty once
over budget, clipped at 0. ``count``: ``executed`` (default: calls that ran, as the rollout loop
counts them — refused and unparseable calls excluded) or ``all`` (every record). Flag
``budget:over``; ``sub_scores``: ``n_calls``.

Inside python graders: ``from arft.graders.builtins.trajectory_rewards import
verification_report, budget_score, count_tool_calls`` (they take
``sample["trajectory"]["tool_calls"]`` dicts).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from arft.budget import BudgetKind, CallCount, CallUse, budget_penalty, count_calls, usage
from arft.config.builtin_graders import ToolBudgetSpec, VerificationSpec
from arft.graders.base import validate_spec
from arft.records import Score

# Where a shell command may start: string start, a separator, then env assignments and a path.
_COMMAND_START = r"(?:^|(?<=[;&|(\n]))\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:[^\s;&|()]*/)?"
# An output redirection into a file (not a descriptor duplication, not /dev/null).
_REDIRECT = re.compile(r"(?<![<>&0-9])[0-9]?>>?(?!&)\s*(?!/dev/null\b)[^\s;&|<>()]")
_SEGMENT_START = re.compile(r"[;&|(\n]")


def default_verify_commands() -> list[str]:
    """Command prefixes that run a test suite or checker."""
    return ["pytest", "py.test", "python -m pytest", "python3 -m pytest", "python -m unittest",
            "python3 -m unittest", "tox", "nox", "npm test", "npm run test", "yarn test",
            "pnpm test", "npx jest", "jest", "vitest", "go test", "cargo test", "make test",
            "make check", "mvn test", "gradle test", "gradlew test", "ctest", "rspec",
            "bundle exec rspec", "dotnet test", "phpunit"]


def default_edit_commands() -> list[str]:
    """Command prefixes that change files."""
    return ["sed -i", "perl -i", "patch", "git apply", "git am", "git checkout", "git restore",
            "git reset", "tee", "cp", "mv", "rm", "truncate", "dd"]


def default_edit_name_parts() -> tuple[str, ...]:
    """Substrings of tool names that mark a tool as an edit tool (when ``edit_tools`` is unset)."""
    return ("write", "edit", "patch", "apply", "replace", "insert", "create", "delete")


def command_regex(prefix: str) -> re.Pattern[str]:
    """A regex matching ``prefix`` run as a command (see the module docstring)."""
    words = r"\s+".join(re.escape(w) for w in prefix.split())
    end = r"(?![\w.\-])" if re.match(r"[\w.\-]", prefix[-1:]) else ""
    return re.compile(_COMMAND_START + words + end)


@dataclass(frozen=True)
class VerifyRules:
    """What counts as a verification and what as an edit."""

    tools: frozenset[str] = frozenset({"run_tests"})
    patterns: tuple[re.Pattern[str], ...] = ()
    edit_tools: frozenset[str] | None = None
    edit_patterns: tuple[re.Pattern[str], ...] = ()
    require_success: bool = True
    output_patterns: tuple[re.Pattern[str], ...] | None = None

    @classmethod
    def make(cls, *, tools: Iterable[str] = ("run_tests",), patterns: Iterable[str] | None = None,
             edit_tools: Iterable[str] | None = None, edit_patterns: Iterable[str] | None = None,
             require_success: bool = True,
             output_patterns: Iterable[str] | None = None) -> "VerifyRules":
        """Rules from plain lists (``None`` patterns: the defaults)."""
        verify = default_verify_commands() if patterns is None else patterns
        edits = default_edit_commands() if edit_patterns is None else edit_patterns
        return cls(tools=frozenset(tools), patterns=tuple(command_regex(p) for p in verify),
                   edit_tools=None if edit_tools is None else frozenset(edit_tools),
                   edit_patterns=tuple(command_regex(p) for p in edits),
                   require_success=require_success,
                   output_patterns=None if output_patterns is None
                   else tuple(re.compile(p) for p in output_patterns))


def _strings(arguments: str) -> list[str]:
    """The string values of JSON arguments (a list of strings joined as one command)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except (json.JSONDecodeError, ValueError):
        return [arguments]
    out: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            out.append(" ".join(v))
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    walk(value)
    return out


def _last_pos(text: str, regexes: Sequence[re.Pattern[str]]) -> int:
    return max((m.start() for r in regexes for m in r.finditer(text)), default=-1)


def _last_redirect(text: str) -> int:
    """Start of the command segment holding the last file redirection, or -1."""
    matches = list(_REDIRECT.finditer(text))
    if not matches:
        return -1
    starts = [s.end() for s in _SEGMENT_START.finditer(text, 0, matches[-1].start())]
    return starts[-1] if starts else 0


def classify_call(name: str, arguments: str, rules: VerifyRules) -> tuple[bool, bool]:
    """``(edits, verifies)`` of one call; ``verifies`` only if it ran after the call's own edits."""
    if name in rules.tools:
        return False, True
    if rules.edit_tools is not None:
        named_edit = name in rules.edit_tools
    else:
        named_edit = any(part in name.lower() for part in default_edit_name_parts())
    if named_edit:
        return True, False
    edits = verifies = False
    for text in _strings(arguments):
        last_edit = max(_last_pos(text, rules.edit_patterns), _last_redirect(text))
        last_verify = _last_pos(text, rules.patterns)
        edits = edits or last_edit >= 0
        # A tie is a verification redirecting its own output (``pytest > log``), not an edit.
        verifies = verifies or (last_verify >= 0 and last_verify >= last_edit)
    return edits, verifies


def _succeeded(call: dict[str, object], rules: VerifyRules) -> bool:
    ok = ("ok",) if rules.require_success else ("ok", "tool_error")
    if call.get("status", "ok") not in ok:
        return False
    if rules.output_patterns is None:
        return True
    return any(p.search(str(call.get("output", ""))) for p in rules.output_patterns)


def _turn_groups(calls: Sequence[dict[str, object]]) -> list[list[dict[str, object]]]:
    """Consecutive calls of the same turn (they ran concurrently); no turn: one call each."""
    groups: list[list[dict[str, object]]] = []
    for call in calls:
        turn = call.get("turn")
        if groups and turn is not None and groups[-1][0].get("turn") == turn:
            groups[-1].append(call)
        else:
            groups.append([call])
    return groups


@dataclass(frozen=True)
class VerificationResult:
    """What the trajectory shows about self-verification."""

    verified_after_last_edit: bool
    ever_verified: bool
    n_verifications: int
    n_failed_verifications: int
    n_edits: int


def verification_report(tool_calls: Sequence[dict[str, object]],
                        rules: VerifyRules | None = None) -> VerificationResult:
    """Walk the calls turn by turn, tracking whether the latest edit was verified afterwards."""
    rules = rules or VerifyRules.make()
    verified_now = ever = False
    n_ok = n_failed = n_edits = 0
    for group in _turn_groups(tool_calls):
        kinds = [classify_call(str(c.get("name", "")), str(c.get("arguments", "")), rules)
                 for c in group]
        good = [i for i, (c, k) in enumerate(zip(group, kinds)) if k[1] and _succeeded(c, rules)]
        edits = [i for i, k in enumerate(kinds) if k[0]]
        n_ok += len(good)
        n_failed += sum(1 for k in kinds if k[1]) - len(good)
        n_edits += len(edits)
        ever = ever or bool(good)
        if not edits:
            verified_now = verified_now or bool(good)
        else:  # only a call that edited and then verified itself saw this turn's edits
            verified_now = len(edits) == 1 and edits[0] in good
    return VerificationResult(verified_after_last_edit=verified_now, ever_verified=ever,
                              n_verifications=n_ok, n_failed_verifications=n_failed,
                              n_edits=n_edits)


def _tool_calls(sample: dict[str, object]) -> list[dict[str, object]] | None:
    trajectory = sample.get("trajectory")
    if not isinstance(trajectory, dict) or not isinstance(trajectory.get("tool_calls"), list):
        return None
    return trajectory["tool_calls"]


_NO_TRAJECTORY = ("the sample has no trajectory (sample.trajectory.tool_calls); this grader "
                  "judges a whole rollout, not a bare answer")


class VerificationGrader:
    """``bonus`` when the agent verified its work (after its last edit), else 0."""

    def __init__(self, spec: VerificationSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.rules = VerifyRules.make(
            tools=spec.tools, patterns=spec.patterns, edit_tools=spec.edit_tools,
            edit_patterns=spec.edit_patterns, require_success=spec.require_success,
            output_patterns=spec.output_patterns)

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        calls = _tool_calls(sample)
        if calls is None:
            return Score(score=0.0, error=f"{self.name}: {_NO_TRAJECTORY}", grader=self.name)
        r = verification_report(calls, self.rules)
        ok = r.verified_after_last_edit if self.spec.require_after_last_edit else r.ever_verified
        flags: tuple[str, ...] = ()
        if not ok:
            if r.ever_verified:
                flags = ("verify:stale",)
            elif r.n_failed_verifications:
                flags = ("verify:failed",)
            else:
                flags = ("verify:none",)
        return Score(score=self.spec.bonus if ok else 0.0, passed=ok, flags=flags,
                     sub_scores={"n_verifications": float(r.n_verifications),
                                 "n_edits": float(r.n_edits)}, grader=self.name)


def build_verification_bonus(spec: dict[str, object], base_dir: Path) -> VerificationGrader:
    """Registry entry point (``base_dir`` is unused)."""
    return VerificationGrader(validate_spec(VerificationSpec, spec))


def count_tool_calls(tool_calls: Sequence[dict[str, object]], count: CallCount = "executed") -> int:
    """Calls that ran (``executed``: not refused, not unparseable) or every record (``all``),
    counted as the trainer's budget penalty counts them (``arft.budget``)."""
    return count_calls((str(c.get("status", "ok")) for c in tool_calls), count)


def budget_score(used: float, budget: float, penalty: float = 0.1, kind: BudgetKind = "linear") -> float:
    """1.0 within ``budget``; over it 1 − the trainer's budget penalty (``arft.budget``):
    penalty × units over (linear) or penalty once (step). Never below 0."""
    return max(0.0, 1.0 - budget_penalty(used, budget, penalty, kind))


def budget_calls(tool_calls: Sequence[dict[str, object]]) -> list[CallUse]:
    """A JSON trajectory's tool-call records as the budget sees them (``arft.budget.usage``)."""
    return [CallUse(str(c.get("name", "")), str(c.get("status", "ok")), int(_number(c.get("turn", i))),
                    _number(c.get("latency_s", 0.0))) for i, c in enumerate(tool_calls)]


def _number(value: object) -> float:
    # a record's turn and latency: numbers in a trajectory arft wrote, numeric strings in one a user wrote
    if isinstance(value, int | float | str):
        return float(value)
    raise TypeError(f"expected a number, got {type(value).__name__}")


class ToolBudgetGrader:
    """1.0 within the tool-call budget, less for every call (linear) or once (step) over it."""

    def __init__(self, spec: ToolBudgetSpec) -> None:
        self.spec = spec
        self.name = spec.name

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        calls = _tool_calls(sample)
        if calls is None:
            return Score(score=0.0, error=f"{self.name}: {_NO_TRAJECTORY}", grader=self.name)
        spec = self.spec
        n = count_tool_calls(calls, spec.count)
        used = usage(budget_calls(calls), spec.unit, spec.count, spec.tool_costs)
        over = used > spec.budget
        sub_scores = {"n_calls": float(n)}
        if spec.unit != "calls":
            sub_scores["latency_s" if spec.unit == "latency" else "turns"] = used
        return Score(score=budget_score(used, spec.budget, spec.penalty, spec.kind),
                     passed=not over, flags=("budget:over",) if over else (),
                     sub_scores=sub_scores, grader=self.name)


def build_tool_budget(spec: dict[str, object], base_dir: Path) -> ToolBudgetGrader:
    """Registry entry point (``base_dir`` is unused)."""
    return ToolBudgetGrader(validate_spec(ToolBudgetSpec, spec))
