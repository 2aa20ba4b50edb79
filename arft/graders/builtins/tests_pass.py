"""``tests_pass``: run the task's tests against the rollout's workspace (Cosine's tests-pass gate).

Job spec::

    {"type": "builtin", "name": "tests_pass", "command": "python -m pytest -q",
     "tests": "{{ item.tests }}", "mode": "fraction", "timeout_s": 120, "memory_mb": 2048}

For each grade: the rollout's workspace (``sample["workspace"]``, kept by the job's
``rollout.workspace``) is copied into a fresh scratch directory — the workspace itself is only
read — then ``tests`` are written into the copy, **replacing** any file of the same name (so an
agent that edited the tests gains nothing), the agent's own test setup is neutralized
(``tests_guard``: its ``conftest.py``, pytest config sections, ``sitecustomize``/``.pth``
start-up hooks, pytest plugins and shadows, and the extra test modules it added are removed or
restored from the task's template, each reported as a ``hack:<kind>`` flag), and ``command`` runs
there with ``bash -c`` under ``arft.sandbox.run_sandboxed``: no network, no user site-packages,
``timeout_s`` wall clock, ``memory_mb`` address space, and the copy itself loaded into a private
1 GiB tmpfs (what the tests write never reaches the host disk; a bigger workspace is an error).
The scratch copy is deleted afterwards.

* ``tests`` (optional): a ``{relative path: file content}`` mapping, or a directory (or one
  file) relative to the job file's folder whose files are copied in; either literal or a
  template such as ``{{ item.tests }}``. Without it the workspace's own tests run as they are.
* ``command`` runs with the trainer's interpreter first on ``PATH`` (``python`` and ``pytest``
  are the ones arft runs under, read-only), plus ``env``.
* ``parser``: ``pytest`` reads the last summary line (``3 passed, 1 failed in 0.2s``; keep
  ``-q`` or the default verbosity, ``-qq`` prints no summary); ``exit_code`` scores exit status
  0 as passing; ``auto`` (default) uses ``pytest`` when the command mentions pytest.
* ``mode``: ``fraction`` (default) scores passed / (passed + failed + errors), skipped and
  xfail tests left out; ``all_or_nothing`` scores 1.0 only when every test passed.

Legitimate zeros (the code's doing), each with a flag and no ``error``: ``tests:timeout``,
``tests:no_summary`` (pytest ended without a summary, e.g. the code called ``os._exit``),
``tests:inconsistent_summary`` (the summary and the exit status disagree, e.g. the code printed a
fake summary or patched pytest's exit status), ``tests:killed`` (a signal, e.g. the CPU limit).
Neutralized tampering adds ``hack:pytest_conftest``, ``hack:pytest_config``, ``hack:startup_hook``,
``hack:pytest_plugin``, ``hack:shadows_pytest`` or ``hack:tests_modified`` to whatever the real
tests scored (a judge or ``multi`` formula may zero on them).
Error Scores (the job's or the host's doing): no workspace, tests that cannot be found or
written, a command that is not found (exit 126/127) or a pytest that is missing, no tests
collected, a sandbox that cannot start. ``sub_scores``: ``passed``, ``failed``, ``errors``
(pytest) or ``exit_code``.

Inside python graders: ``from arft.graders.builtins.tests_pass import parse_pytest_summary``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from arft.config.builtin_graders import TestsPassSpec
from arft.graders.base import GraderError, validate_spec
from arft.graders.builtins.tests_guard import Tampering, neutralize, safe_write
from arft.graders.templates import PLACEHOLDER, TemplateError, render_template, resolve
from arft.records import Score
from arft.sandbox import SandboxError, SandboxLimits, SandboxResult, remove_workspace, run_sandboxed
from arft.sandbox.python_env import interpreter_access
from arft.sandbox.workspace import template_of
from arft.secrets import SecretError, resolve_map

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SUMMARY = re.compile(r"^=*\s*(?P<body>(?:\d+ [a-z]+)(?:, \d+ [a-z]+)*|no tests ran)"
                      r" in [\d.]+s(?: \([\d:.]+\))?\s*=*\s*$")
_PLURALS = {"error": "errors", "warning": "warnings", "rerun": "reruns"}
_TAIL_CHARS = 600
_TMPFS_MB = 1024  # the copy runs in a private tmpfs of this size: tests cannot fill the disk


class _Problem(Exception):
    """Why the tests could not be run: becomes an error Score."""


def parse_pytest_summary(output: str) -> dict[str, int] | None:
    """Counts from pytest's last summary line (``passed``, ``failed``, ``errors``, ``skipped``,
    ``xfailed``, ``xpassed``, ``deselected``, ``warnings``, ...), or None when there is none."""
    for line in reversed(_ANSI.sub("", output).splitlines()):
        m = _SUMMARY.match(line.strip())
        if m is None:
            continue
        counts = {"passed": 0, "failed": 0, "errors": 0}
        if m.group("body") != "no tests ran":
            for part in m.group("body").split(", "):
                n, word = part.split(" ", 1)
                word = _PLURALS.get(word, word)
                counts[word] = counts.get(word, 0) + int(n)
        return counts
    return None


def pytest_fraction(counts: dict[str, int]) -> float:
    """passed / (passed + failed + errors); 0.0 when no test ran."""
    n = counts.get("passed", 0) + counts.get("failed", 0) + counts.get("errors", 0)
    return counts.get("passed", 0) / n if n else 0.0


def _relative(path: str) -> PurePosixPath:
    rel = PurePosixPath(path.replace("\\", "/"))
    parts = [p for p in rel.parts if p != "."]
    if not parts or rel.is_absolute() or ".." in parts:
        raise _Problem(f"test path {path!r} must be relative to the workspace, without '..'")
    return PurePosixPath(*parts)


def _files_from_dir(source: Path) -> dict[PurePosixPath, bytes]:
    if source.is_file():
        return {PurePosixPath(source.name): source.read_bytes()}
    if not source.is_dir():
        raise _Problem(f"tests {str(source)!r} is not a file or directory")
    return {PurePosixPath(*p.relative_to(source).parts): p.read_bytes()
            for p in sorted(source.rglob("*")) if p.is_file()}


def _test_files(tests: object, base_dir: Path) -> dict[PurePosixPath, bytes]:
    """The files to write into the copy, from a mapping or a directory/file path."""
    if tests is None:
        return {}
    if isinstance(tests, dict):
        bad = [k for k, v in tests.items() if not isinstance(v, str)]
        if bad:
            raise _Problem(f"tests: the content of {bad[0]!r} is not a string")
        return {_relative(str(k)): v.encode() for k, v in tests.items()}
    if isinstance(tests, str) and tests.strip():
        return _files_from_dir(base_dir / tests.strip())
    raise _Problem(f"tests must be a {{path: content}} mapping or a directory, got {tests!r}")


def _copy_workspace(workspace: Path, dest: Path) -> None:
    """Copy the workspace (links as links; fifos, sockets and devices left out)."""

    def special(folder: str, names: list[str]) -> set[str]:
        keep = (stat.S_ISREG, stat.S_ISDIR, stat.S_ISLNK)
        return {n for n in names
                if not any(f(os.lstat(os.path.join(folder, n)).st_mode) for f in keep)}

    shutil.copytree(workspace, dest, symlinks=True, ignore=special)


def _prepare(workspace: Path, files: dict[PurePosixPath, bytes]) -> tuple[Path, Path,
                                                                         list[Tampering]]:
    """A scratch root holding a copy of ``workspace`` with ``files`` written in and the agent's
    own test setup neutralized (``tests_guard``): the root, the copy, what was neutralized."""
    root = Path(tempfile.mkdtemp(prefix="arft-tests-"))
    root.chmod(0o711)
    copy = root / "workspace"
    try:
        _copy_workspace(workspace, copy)
        for rel, data in files.items():
            safe_write(copy, rel, data)
        tampering = neutralize(copy, template_of(workspace), frozenset(files))
    except (OSError, shutil.Error) as e:
        remove_workspace(root)
        raise _Problem(f"could not prepare the copy of the workspace: {e}") from None
    return root, copy, tampering


def _tail(result: SandboxResult) -> str:
    text = (result.stdout or "").strip()
    return text[-_TAIL_CHARS:] if text else "(no output)"


def _infra_problem(result: SandboxResult) -> str | None:
    """A reason when the run says nothing about the code (the host or the job is at fault)."""
    if result.error is not None:
        return f"the sandbox could not run the tests: {result.error}"
    if result.exit_code in (126, 127) and not result.timed_out:
        return f"the command was not found or is not executable (exit {result.exit_code}): " \
               f"{_tail(result)}"
    return None


def _score_pytest(result: SandboxResult, mode: str) -> tuple[float, dict[str, float],
                                                               tuple[str, ...], bool]:
    """``(score, sub_scores, flags, passed)`` from a pytest run; raises ``_Problem``."""
    counts = parse_pytest_summary(result.stdout)
    if counts is None:
        problem = _infra_problem(result)
        if problem is None and "No module named pytest" in result.stdout:
            problem = "pytest is not installed for the interpreter the command runs"
        if problem:
            raise _Problem(problem)
        return 0.0, {}, ("tests:no_summary",), False
    subs = {k: float(counts[k]) for k in ("passed", "failed", "errors")}
    bad = counts["failed"] + counts["errors"]
    if counts["passed"] + bad == 0:
        raise _Problem(f"no tests ran (exit {result.exit_code}); check `command` and `tests`: "
                       f"{_tail(result)}")
    if (result.exit_code == 0) != (bad == 0):
        return 0.0, subs, ("tests:inconsistent_summary",), False
    if mode == "all_or_nothing":
        return (1.0 if bad == 0 else 0.0), subs, (), bad == 0
    return pytest_fraction(counts), subs, (), bad == 0


def _score_exit(result: SandboxResult) -> tuple[float, dict[str, float], tuple[str, ...], bool]:
    problem = _infra_problem(result)
    if problem:
        raise _Problem(problem)
    flags = ("tests:killed",) if result.exit_code < 0 else ()
    ok = result.exit_code == 0
    return (1.0 if ok else 0.0), {"exit_code": float(result.exit_code)}, flags, ok


class TestsPassGrader:
    """Runs the task's tests on a copy of the rollout's workspace."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, spec: TestsPassSpec, base_dir: Path) -> None:
        self.spec = spec
        self.name = spec.name
        self.base_dir = Path(base_dir)
        self.env = resolve_map(spec.env, f"grader {spec.name!r} (tests_pass): env")
        """``spec.env`` with its ``${ENV_VAR}`` references resolved."""
        self.use_pytest = spec.parser == "pytest" or (
            spec.parser == "auto" and re.search(r"\bpytest\b", spec.command) is not None)

    def _tests(self, sample: dict[str, object], item: dict[str, object]) -> dict[PurePosixPath, bytes]:
        tests: Any = self.spec.tests
        if isinstance(tests, str) and len(PLACEHOLDER.findall(tests)) == 1 \
                and PLACEHOLDER.fullmatch(tests.strip()):
            tests = resolve(tests, sample, item)
        elif isinstance(tests, str):
            tests = render_template(tests, sample, item)
        return _test_files(tests, self.base_dir)

    async def _run(self, copy: Path) -> SandboxResult:
        path, readable = interpreter_access()
        limits = SandboxLimits(timeout_s=self.spec.timeout_s, memory_mb=self.spec.memory_mb,
                               max_output_chars=20_000, workspace_tmpfs_mb=_TMPFS_MB,
                               workspace_tmpfs_copy=True)
        shell = shutil.which("bash") or "/bin/sh"
        # No user site: with HOME = the workspace, its .local/lib/.../site-packages (and any
        # .pth or usercustomize there) would run at interpreter start.
        env = {"PATH": path, "PYTHONNOUSERSITE": "1", **self.env}
        return await run_sandboxed([shell, "-c", self.spec.command], copy, limits, env=env,
                                   merge_stderr=True, readable=readable)

    def _error(self, reason: str, flags: tuple[str, ...] = ()) -> Score:
        return Score(score=0.0, error=f"{self.name}: {reason}", flags=flags, grader=self.name)

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        workspace = sample.get("workspace")
        if not workspace:
            return self._error("the sample has no workspace; the job needs `rollout.workspace` "
                               "(a template folder copied for each rollout) so the tests have "
                               "code to run against")
        if not Path(str(workspace)).is_dir():
            return self._error(f"the rollout's workspace {workspace} no longer exists")
        try:
            files = self._tests(sample, item)
            root, copy, tampering = await asyncio.to_thread(_prepare, Path(str(workspace)), files)
        except (TemplateError, _Problem) as e:
            return self._error(str(e))
        hacks = tuple(dict.fromkeys(t.flag for t in tampering))
        try:
            result = await self._run(copy)
        except SandboxError as e:
            return self._error(f"the sandbox could not start: {e}", hacks)
        finally:
            await asyncio.to_thread(remove_workspace, root)
        return self._score(result, hacks)

    def _score(self, result: SandboxResult, hacks: tuple[str, ...] = ()) -> Score:
        """The Score of a run; ``hacks``: the flags of what ``tests_guard`` neutralized."""
        if result.timed_out:
            return Score(score=0.0, passed=False, flags=("tests:timeout", *hacks),
                         grader=self.name)
        try:
            if self.use_pytest:
                score, subs, flags, ok = _score_pytest(result, self.spec.mode)
            else:
                score, subs, flags, ok = _score_exit(result)
        except _Problem as e:
            return self._error(str(e), hacks)
        return Score(score=score, sub_scores=subs, passed=ok, flags=(*flags, *hacks),
                     grader=self.name)


def build(spec: dict[str, object], base_dir: Path) -> TestsPassGrader:
    """Registry entry point; a literal ``tests`` path must exist under ``base_dir``."""
    parsed = validate_spec(TestsPassSpec, spec)
    tests = parsed.tests
    try:
        if isinstance(tests, dict):
            _test_files(tests, Path(base_dir))
        elif isinstance(tests, str) and not PLACEHOLDER.search(tests):
            _test_files(tests, Path(base_dir))
    except (_Problem, OSError) as e:
        raise GraderError(f"grader 'tests_pass' (builtin): field 'tests': {e}") from None
    try:
        return TestsPassGrader(parsed, Path(base_dir))
    except SecretError as e:
        raise GraderError(str(e)) from None
