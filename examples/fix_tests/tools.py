"""The fix_tests example's tools: read a file, replace one line, run the task's tests.

Every tool works in the rollout's own workspace (``ctx.workspace``, a fresh copy of the task's
``projects/<task>/`` folder). ``run_tests`` writes the row's hidden tests (``item.tests``) into the
workspace first — restoring them if the agent changed them — and runs pytest there under the
same sandbox as the ``tests_pass`` grader (no network, time and memory limits).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from arft.graders.builtins.tests_pass import interpreter_access
from arft.sandbox import SandboxLimits, run_sandboxed
from arft.tools.base import ToolContext

PYTEST = ["python", "-m", "pytest", "-q", "--tb=no", "-rfE", "-p", "no:cacheprovider"]
# No third-party plugins (arft's own pytest-asyncio would warn) and no bytecode in the workspace.
TEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
_OUTPUT_LINES = 12  # the tail the model sees: the FAILED lines and the summary
# pytest's progress line ("..F   [100%]") and section rules: tokens that tell the model nothing.
_NOISE = re.compile(r"^(?:[.FEsxX]+\s+\[\s*\d+%\]|=+.*=+)$")


def _workspace(ctx: ToolContext) -> Path:
    if ctx.workspace is None:
        raise RuntimeError("this tool needs the job's rollout.workspace (the task's project)")
    return Path(ctx.workspace).resolve()


def _file(ctx: ToolContext, path: str) -> Path:
    """``path`` inside the workspace; anything that leaves it (``..``, absolute, links) is refused."""
    root = _workspace(ctx)
    target = (root / path.strip()).resolve()
    if not target.is_relative_to(root) or target == root:
        raise ValueError(f"{path!r} is outside your project; use a name like 'calc.py'")
    return target


def _files_list(ctx: ToolContext) -> str:
    return ", ".join(sorted(p.name for p in _workspace(ctx).iterdir() if p.is_file())) or "none"


def read_file(path: str, ctx: ToolContext) -> str:
    """Read a file of the project.

    Args:
        path: The file name.
    """
    target = _file(ctx, path)
    if target.is_file():
        return target.read_text()
    hidden = ctx.item.get("tests", {})
    if isinstance(hidden, dict) and path.strip() in hidden:
        return hidden[path.strip()]
    raise FileNotFoundError(f"no file {path!r}; the project has: {_files_list(ctx)}")


def replace(path: str, old: str, new: str, ctx: ToolContext) -> str:
    """Replace a line of a file with a new line.

    Args:
        path: The file name.
        old: The exact text to replace.
        new: The new text.
    """
    target = _file(ctx, path)
    if not target.is_file():
        raise FileNotFoundError(f"no file {path!r}; the project has: {_files_list(ctx)}")
    text = target.read_text()
    updated = _replace_line(text, old, new)
    if updated is None:
        count = text.count(old) if old else 0
        if count == 0:
            raise ValueError(f"the text {old!r} is not in {path}; read_file it and copy a line "
                             "exactly")
        if count > 1:
            raise ValueError(f"the text {old!r} occurs {count} times in {path}; give a longer "
                             "piece")
        updated = text.replace(old, new, 1)
    target.write_text(updated)
    return f"Replaced 1 occurrence in {path}."


def _replace_line(text: str, old: str, new: str) -> str | None:
    """Swap the one whole line equal to ``old`` (indentation aside) for ``new`` at the line's own
    indentation — the model rarely copies indentation right — or None when no single line is."""
    if "\n" in old.strip() or not old.strip():
        return None
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == old.strip()]
    if len(hits) != 1:
        return None
    line = lines[hits[0]]
    indent = line[:len(line) - len(line.lstrip())]
    ending = line[len(line.rstrip("\r\n")):]
    lines[hits[0]] = indent + new.strip() + ending
    return "".join(lines)


def _write_tests(root: Path, tests: object) -> None:
    if not isinstance(tests, dict):
        raise RuntimeError("the task row has no 'tests' mapping {file name: content}")
    for name, content in tests.items():
        target = root / name
        if target.is_symlink() or target.is_file():  # never write through a planted link
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        target.write_text(str(content))


async def run_tests(ctx: ToolContext) -> str:
    """Run the tests."""
    root = _workspace(ctx)
    _write_tests(root, ctx.item.get("tests"))
    path, readable = interpreter_access()
    limits = SandboxLimits(timeout_s=30, memory_mb=2048, max_output_chars=8000)
    result = await run_sandboxed(PYTEST, root, limits, merge_stderr=True, readable=readable,
                                 env={"PATH": path, **TEST_ENV})
    if result.error is not None:
        raise RuntimeError(f"the tests could not start: {result.error}")
    if result.timed_out:  # an error, so verification_bonus does not count it as a test run
        raise TimeoutError("the tests timed out after 30s")
    lines = [line for line in result.stdout.splitlines()
             if line.strip() and not _NOISE.match(line.strip())]
    return "\n".join(lines[-_OUTPUT_LINES:]) or f"(no output, exit code {result.exit_code})"
