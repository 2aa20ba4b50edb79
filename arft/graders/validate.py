"""The hosted ``graders/run`` and ``graders/validate`` endpoints as library calls.

* ``run_grader(spec, base_dir, item, sample)`` grades one hand-written sample (``arft grade``).
  The sample is the ``build_sample`` namespace; ``complete_sample`` fills the keys a user left
  out (``output_json`` parsed from ``output_text``, no tool calls, a one-message trajectory) and
  ``sample_from_text`` builds one from a bare answer.
* ``validate_grader(spec, base_dir, item, sample)`` lists everything wrong with a spec without
  grading anything: the spec must build (schema), every ``{{ ... }}`` template in it (all string
  fields, ``multi`` children included) must resolve against the item and sample, and a python
  grader's source must parse and define ``grade(sample, item)``. The source is only parsed with
  ``ast``, never executed.
"""

from __future__ import annotations

import ast
import difflib
import json
from collections.abc import Iterator, Sized
from pathlib import Path

from arft.errors import ArftError
from arft.graders.item_reads import item_keys
from arft.graders.base import build_sample, close_grader, GraderError
from arft.graders.registry import build_grader, grade_sample
from arft.graders.templates import _parse_path, PLACEHOLDER, resolve, TemplateError
from arft.records import json_list, json_object, Message, new_trace_id, Rollout, Score

SAMPLE_KEYS = ("output_text", "output_json", "output_tools", "choices", "trajectory", "workspace")
TRAJECTORY_KEYS = ("trace_id", "messages", "tool_calls", "n_tool_calls", "n_turns",
                   "parse_errors", "finish_reason", "status")
PYTHON_FILE_KEYS = ("file", "path", "source_file")
"""Keys naming a python grader's source file (arft addition; the hosted field is ``source``)."""


class InputError(ArftError):
    """A grader, item or sample argument that cannot be read; the message says what to pass."""


# -- samples -----------------------------------------------------------------------------------


def sample_from_text(text: str) -> dict[str, object]:
    """The sample of a rollout whose only message is the assistant answer ``text``."""
    rollout = Rollout(trace_id=new_trace_id(), task_id="sample", n_turns=1,
                      messages=(Message(role="assistant", content=text),))
    return build_sample(rollout)


def _text_of_choices(choices: object) -> str:
    try:
        content = json_object(json_object(json_list(choices)[0])["message"])["content"]
    except (LookupError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def complete_sample(raw: dict[str, object]) -> dict[str, object]:
    """A full sample from a partial one: keys left out get the values ``build_sample`` would give
    a one-message rollout answering ``output_text`` (``output_json`` parsed from it, no tool
    calls). ``output_text`` defaults to the first choice's content. Unknown keys are an error.
    """
    unknown = [k for k in raw if k not in SAMPLE_KEYS]
    if unknown:
        hints = [f"{k!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
            k, SAMPLE_KEYS, n=1)) else "") for k in unknown]
        raise InputError(f"sample has unknown key(s) {', '.join(hints)}; a sample may have: "
                         f"{', '.join(SAMPLE_KEYS)}")
    text = raw.get("output_text", _text_of_choices(raw.get("choices")))
    if not isinstance(text, str):
        raise InputError(f"sample output_text must be a string, got {type(text).__name__}")
    sample = sample_from_text(text)
    sample.update(raw)
    if "output_json" not in raw:
        try:
            sample["output_json"] = json.loads(text)
        except (json.JSONDecodeError, ValueError):
            sample["output_json"] = None
    tools, trajectory = sample["output_tools"], sample["trajectory"]
    if "trajectory" not in raw and tools and isinstance(tools, Sized) and isinstance(trajectory, dict):
        trajectory["n_tool_calls"] = len(tools)
    return sample


# -- grading one sample ------------------------------------------------------------------------


async def run_grader(spec: dict[str, object], base_dir: Path, item: dict[str, object],
                     sample: dict[str, object]) -> Score:
    """The hosted graders/run: build ``spec`` and grade one (complete) sample.

    Raises ``GraderError`` for a spec that does not build; every grading failure is an error
    ``Score`` instead.
    """
    grader = build_grader(spec, base_dir)
    try:
        return await grade_sample(grader, sample, item)
    finally:
        await close_grader(grader)


def score_json(score: Score) -> dict[str, object]:
    """The graders/run answer: ``{"score", "sub_scores", "passed", "error", "flags"}``."""
    return {"score": score.score, "sub_scores": dict(score.sub_scores), "passed": score.passed,
            "error": score.error, "flags": list(score.flags)}


# -- validation: templates ---------------------------------------------------------------------


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def spec_strings(spec: object, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a spec with its path (``graders.a.input``, ``input[0].content``).

    A python grader's ``source`` is code, not a template, and is skipped.
    """
    if isinstance(spec, str):
        yield path, spec
    elif isinstance(spec, dict):
        is_python = spec.get("type") == "python"
        for key, value in spec.items():
            if is_python and key == "source":
                continue
            yield from spec_strings(value, _join(path, str(key)))
    elif isinstance(spec, list):
        for i, value in enumerate(spec):
            yield from spec_strings(value, _join(path, i))


def _check_default_sample(steps: list[str | int]) -> str | None:
    """Without a real sample only the keys every sample has can be checked."""
    if not steps:
        return None
    if steps[0] not in SAMPLE_KEYS:
        return f"sample has no key {steps[0]!r} (it has: {', '.join(SAMPLE_KEYS)})"
    if steps[0] == "trajectory" and len(steps) > 1 and steps[1] not in TRAJECTORY_KEYS:
        return f"sample.trajectory has no key {steps[1]!r} (it has: {', '.join(TRAJECTORY_KEYS)})"
    return None


def _check_placeholder(expr: str, item: dict[str, object] | None,
                       sample: dict[str, object] | None) -> str | None:
    """Why ``{{ expr }}`` does not resolve, or None when it does (or cannot be checked)."""
    try:
        root, steps = _parse_path(expr)
        if root == "item":
            if item is not None:
                resolve(expr, sample or {}, item)
            return None
        if sample is None:
            return _check_default_sample(steps)
        resolve(expr, sample, item or {})
    except TemplateError as e:
        return str(e)
    return None


def template_problems(spec: object, item: dict[str, object] | None = None,
                      sample: dict[str, object] | None = None) -> list[str]:
    """Every template placeholder in ``spec`` that does not resolve, named with its spec path.

    ``item`` None: ``{{ item.* }}`` placeholders are only checked for syntax. ``sample`` None:
    ``{{ sample.* }}`` is checked against the keys every sample has.
    """
    problems = []
    for path, text in spec_strings(spec):
        for m in PLACEHOLDER.finditer(text):
            reason = _check_placeholder(m.group(1), item, sample)
            if reason is not None:
                problems.append(f"{path or '(spec)'}: {{{{ {m.group(1)} }}}}: {reason}")
    return problems


# -- validation: python sources ----------------------------------------------------------------


def python_source_problems(source: str, where: str) -> list[str]:
    """Syntax errors and a missing or mis-shaped ``def grade(sample, item)``; never executes."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [f"{where}: syntax error on line {e.lineno}: {e.msg}; fix the grader's source "
                "(`python -m py_compile FILE` shows the same error)"]
    except (RecursionError, MemoryError):  # CPython's parser gives up on very deep nesting
        return [f"{where}: the code is nested too deeply to compile (an expression thousands of "
                "operators long?); split it into smaller statements"]
    grades = [n for n in tree.body
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "grade"]
    if not grades:
        return [f"{where}: no top-level `def grade(sample, item)`; the python grader calls "
                "grade(sample, item) and expects a float"]
    fn = grades[-1]  # the last definition is the one that counts
    if isinstance(fn, ast.AsyncFunctionDef):
        return [f"{where}: `grade` is `async def`; write a plain `def grade(sample, item)`"]
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    required = len(positional) - len(a.defaults)
    kw_required = [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
    takes_two = len(positional) >= 2 or a.vararg is not None
    if not takes_two or required > 2 or kw_required:
        shown = ", ".join(p.arg for p in positional) or "no arguments"
        return [f"{where}: `grade` (line {fn.lineno}) takes ({shown}) but is called as "
                "grade(sample, item); give it exactly two positional parameters"]
    return []


def _python_source(spec: dict[str, object], base_dir: Path) -> tuple[str, str] | None:
    """``(source, label)`` of a python grader spec, or None when it names none (schema error)."""
    source = spec.get("source")
    if isinstance(source, str):
        return source, "source"
    for key in PYTHON_FILE_KEYS:
        value = spec.get(key)
        if isinstance(value, str) and value.endswith(".py"):
            path = Path(value).expanduser()
            path = path if path.is_absolute() else base_dir / path
            try:
                return path.read_text(encoding="utf-8"), f"{key} ({path})"
            except OSError as e:
                raise InputError(f"{key}: cannot read {path} ({e.strerror}); paths resolve "
                                 "against the grader file's folder") from None
    return None


def _python_specs(spec: object, path: str = "") -> Iterator[tuple[str, dict[str, object]]]:
    """Every python grader inside ``spec`` (itself, ``multi`` children, ...), with its path."""
    if isinstance(spec, dict):
        if spec.get("type") == "python":
            yield path, spec
        for key, value in spec.items():
            if isinstance(value, (dict, list)):
                yield from _python_specs(value, _join(path, str(key)))
    elif isinstance(spec, list):
        for i, value in enumerate(spec):
            yield from _python_specs(value, _join(path, i))


def python_problems(spec: object, base_dir: Path) -> list[str]:
    """Problems of every python grader source in ``spec``."""
    problems: list[str] = []
    for path, sub in _python_specs(spec):
        try:
            found = _python_source(sub, base_dir)
        except InputError as e:
            problems.append(f"{path}.{e}" if path else str(e))
            continue
        if found is not None:
            source, label = found
            where = f"{path}.{label}" if path else label
            problems += python_source_problems(source, where)
    return problems


def _subscript_keys(source: str) -> list[str]:
    """Constant keys of ``item["key"]`` subscripts that ``def grade(sample, item)`` reads (the
    second parameter, whatever its name), followed through the source's own helper functions
    (``arft.graders.item_reads``); nothing when the source does not parse."""
    return item_keys(source)


def item_reads(spec: object, base_dir: Path) -> list[tuple[str, str]]:
    """The item fields a grader needs, as ``(where, path)``: every ``{{ item.* }}`` template
    (``where`` is the spec path) and every ``item["key"]`` a python grader's ``grade`` reads by
    subscript (a missing key raises ``KeyError``; ``item.get`` has a default and is left out).
    Each ``path`` resolves with ``templates.resolve(path, sample, item)``.
    """
    found: list[tuple[str, str]] = []
    for path, text in spec_strings(spec):
        for m in PLACEHOLDER.finditer(text):
            try:
                root = _parse_path(m.group(1))[0]
            except TemplateError:
                continue  # validate_grader reports it
            if root == "item":
                found.append((path or "(spec)", m.group(1).strip()))
    for path, sub in _python_specs(spec):
        try:
            source = _python_source(sub, base_dir)
        except InputError:
            continue  # validate_grader reports it
        for key in _subscript_keys(source[0]) if source else []:
            found.append((f"{path or 'grader'} source", f"item[{json.dumps(key)}]"))
    return list(dict.fromkeys(found))


# -- validation: the whole spec ----------------------------------------------------------------


def build_problems(spec: object, base_dir: Path) -> list[str]:
    """Why ``spec`` does not build (schema, unknown type, a child that fails), or nothing."""
    try:
        grader = build_grader(spec, base_dir)
    except GraderError as e:
        return [str(e)]
    except ImportError as e:
        kind = spec.get("type") if isinstance(spec, dict) else None
        return [f"grader type {kind!r} cannot be loaded in this install ({e}); install the "
                "missing package or use another grader type"]
    except Exception as e:  # noqa: BLE001 - a validator reports, it does not crash
        return [f"the grader failed to build: {type(e).__name__}: {e}"]
    _close_now(grader)
    return []


def _close_now(grader: object) -> None:
    """Close a grader from synchronous code (best effort inside a running event loop)."""
    import asyncio

    if not any(callable(getattr(grader, a, None)) for a in ("aclose", "close")):
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(close_grader(grader))
        return
    # Already inside a loop (an async caller): schedule the close instead of blocking it.
    asyncio.ensure_future(close_grader(grader))


def validate_grader(spec: object, base_dir: Path, item: dict[str, object] | None = None,
                    sample: dict[str, object] | None = None) -> list[str]:
    """The hosted graders/validate: every problem of ``spec`` (empty list: valid).

    Checks, in order: python grader sources parse and define ``grade(sample, item)``; the spec
    builds (type, fields, children) — skipped when a python source is broken, since the build
    would only repeat that; every template resolves against ``item`` and ``sample``
    (see ``template_problems``). ``sample`` is completed with ``complete_sample`` first, which
    raises ``InputError`` for a sample with unknown keys (bad input, not a grader problem).
    """
    if sample is not None:
        sample = complete_sample(sample)
    py = python_problems(spec, base_dir)
    problems = py + ([] if py else build_problems(spec, base_dir))
    if isinstance(spec, (dict, list)):
        problems += template_problems(spec, item, sample)
    return problems
