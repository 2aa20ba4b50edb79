"""The hosted ``python`` grader: the user's ``def grade(sample, item) -> float``, sandboxed.

Spec (the hosted fields, plus ``source_file`` and the limits as arft additions)::

    {"type": "python", "name": "exact", "source": "def grade(sample, item):\\n    return 1.0",
     "image_tag": "2025-05-08",          # accepted and ignored: arft runs its own interpreter
     "timeout_s": 120, "memory_mb": 2048, "disk_mb": 1024}

``source_file: "grader.py"`` (resolved against the job file's folder) may replace ``source``. At
build time the source is compiled (a syntax error is a ``GraderError`` naming the line) and must
define a top-level ``def grade(sample, item)``; it is never run in the trainer's process.

Every grade runs in the sandbox (``arft.sandbox.pool``): its own process, no network, none of
the trainer's environment variables, nothing writable but its scratch folder (and private
/tmp, /dev/shm), the trainer's own files hidden, killed at ``timeout_s``, ``memory_mb`` of
address space, files and scratch capped at ``disk_mb``. By default a warm pool of fork servers
(one per CPU) serves the grades; ``mode="fresh"`` starts a new interpreter per grade instead.
The hosted sandbox's libraries (numpy, scipy, sympy, pandas, rapidfuzz, scikit-learn,
rouge-score, deepdiff, jsonschema, pydantic, pyyaml, nltk, sqlparse) and ``arft`` itself are
importable inside when they are installed here. ``sample["workspace"]`` is passed as a string
but the rollout's workspace is not visible inside the sandbox.

``grade`` returns a number (bool counts as 1.0/0.0) or, an arft addition, a dict
``{"score": x, "sub_scores"?: {name: number}, "flags"?: [str], "passed"?: bool}``. An exception
(its traceback's last lines are kept), a non-finite or non-numeric result, a timeout, a memory
or process kill: each gives ``Score(score=0.0, error=<reason>)``, never a silent zero.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any, Literal

from arft.config.graders import PythonGraderSpec
from arft.graders.base import GraderError, validate_spec
from arft.records import Score
from arft.sandbox import CallLimits, CallResult, SandboxedFunction, WarmPool, run_fresh

_DICT_KEYS = ("score", "sub_scores", "flags", "passed")


def check_source(source: str, filename: str, label: str) -> None:
    """Compile ``source`` and check it defines ``def grade(sample, item)``; never runs it."""
    try:
        tree = ast.parse(source, filename, "exec")
        compile(tree, filename, "exec", dont_inherit=True)  # errors only the compiler finds
    except SyntaxError as e:
        raise GraderError(f"{label}: syntax error on line {e.lineno}: {e.msg}; fix the source "
                          "(`python -m py_compile FILE` shows the same error)") from None
    except (RecursionError, MemoryError):  # CPython's parser gives up on very deep nesting
        raise GraderError(f"{label}: the code is nested too deeply to compile (an expression "
                          "thousands of operators long?); split it into smaller "
                          "statements") from None
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name == "grade"]
    if not defs:
        raise GraderError(f"{label}: the source has no top-level `def grade(sample, item)`; "
                          "define one that returns a float (or a dict with a 'score')")
    fn = defs[-1]  # the last definition is the one that counts
    if isinstance(fn, ast.AsyncFunctionDef):
        raise GraderError(f"{label}: `grade` (line {fn.lineno}) is `async def`; write a plain "
                          "`def grade(sample, item)`")
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    required = len(positional) - len(a.defaults)
    kw_required = [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
    if (len(positional) < 2 and a.vararg is None) or required > 2 or kw_required:
        shown = ", ".join(p.arg for p in positional) or "no parameters"
        raise GraderError(f"{label}: `grade` (line {fn.lineno}) takes ({shown}) but is called "
                          "as grade(sample, item); give it exactly two parameters")


def _number(value: object, what: str) -> float:
    """A finite float from a grade's number; ValueError naming ``what`` otherwise."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, (int, float)):
        raise ValueError(f"{what} is {value!r} ({type(value).__name__}), not a number")
    if not math.isfinite(value):
        raise ValueError(f"{what} is {value}, not a finite number")
    return float(value)


def _from_dict(value: dict[str, object]) -> dict[str, object]:
    unknown = sorted(set(value) - set(_DICT_KEYS))
    if unknown:
        raise ValueError(f"grade returned a dict with unknown keys {unknown}; use "
                         f"{', '.join(_DICT_KEYS)}")
    if "score" not in value:
        raise ValueError("grade returned a dict without a 'score'; add {'score': <float>}")
    fields: dict[str, object] = {"score": _number(value["score"], "the 'score'")}
    subs = value.get("sub_scores") or {}
    if not isinstance(subs, dict):
        raise ValueError(f"'sub_scores' is {type(subs).__name__}; make it a dict name -> number")
    fields["sub_scores"] = {str(k): _number(v, f"sub_score {k!r}") for k, v in subs.items()}
    flags = value.get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ValueError(f"'flags' is {flags!r}; make it a list of strings")
    fields["flags"] = tuple(flags)
    passed = value.get("passed")
    if passed is not None and not isinstance(passed, bool):
        raise ValueError(f"'passed' is {passed!r}; make it true or false")
    fields["passed"] = passed
    return fields


def to_score(result: CallResult, name: str) -> Score:
    """The Score for a sandboxed call's result; every failure keeps its reason."""
    if not result.ok:
        prefix = "grade raised " if result.kind == "exception" else ""
        return Score(score=0.0, error=f"{name}: {prefix}{result.error}", grader=name)
    try:
        if isinstance(result.value, dict):
            return Score(**_from_dict(result.value), grader=name)
        return Score(score=_number(result.value, "grade's result"), grader=name)
    except ValueError as e:
        return Score(score=0.0, error=f"{name}: {e}; return a finite float or "
                                      "{'score': <float>, 'sub_scores': {...}}", grader=name)


class PythonGrader:
    """Grades in the sandbox: a warm pool (``mode="pool"``) or a new process per grade."""

    def __init__(self, spec: PythonGraderSpec, source: str, filename: str, *,
                 mode: Literal["pool", "fresh"] = "pool", pool_size: int | None = None,
                 max_processes: int = 256, scratch_root: Path | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.mode = mode
        self.scratch_root = scratch_root
        limits = CallLimits(timeout_s=spec.timeout_s, memory_mb=spec.memory_mb,
                            disk_mb=spec.disk_mb, max_processes=max_processes)
        self.function = SandboxedFunction(source, filename, "grade", limits)
        self._pool = (WarmPool(self.function, pool_size, scratch_root=scratch_root)
                      if mode == "pool" else None)

    @property
    def isolation(self) -> tuple[str, ...]:
        """Sandbox layers applied (pool mode, after the first grade)."""
        return self._pool.isolation if self._pool is not None else ()

    async def warm_up(self) -> None:
        """Start the pool's sandboxed workers now (``WarmPool.start``); nothing in fresh mode."""
        if self._pool is not None:
            await self._pool.start()

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        if self._pool is not None:
            result = await self._pool.call(sample, item)
        else:
            result = await run_fresh(self.function, sample, item, scratch_root=self.scratch_root)
        return to_score(result, self.name)

    async def aclose(self) -> None:
        """Stop the pool's sandboxed workers (a later grade would need a new grader)."""
        if self._pool is not None:
            await self._pool.aclose()


def load_source(spec: PythonGraderSpec, base_dir: Path) -> tuple[str, str]:
    """``(source, filename)``: the inline source, or ``source_file`` read from ``base_dir``."""
    if spec.source is not None:
        return spec.source, f"<python grader {spec.name!r}>"
    path = Path(spec.source_file or "").expanduser()
    path = path if path.is_absolute() else Path(base_dir) / path
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except (OSError, UnicodeDecodeError) as e:
        raise GraderError(f"python grader {spec.name!r}: cannot read source_file {path} ({e}); "
                          "paths resolve against the job file's folder") from None


def build(spec: dict[str, object], base_dir: Path, **options: Any) -> PythonGrader:
    """Registry entry point; ``options`` go to ``PythonGrader`` (mode, pool_size, ...)."""
    parsed = validate_spec(PythonGraderSpec, spec)
    source, filename = load_source(parsed, base_dir)
    check_source(source, filename, f"python grader {parsed.name!r} ({filename})")
    return PythonGrader(parsed, source, filename, **options)
