"""The file-locator example's tools: shell-style ``list``, ``grep`` and ``read`` on the rollout's
own copy of a repository (``ctx.workspace``).

Outputs are bounded (a 135M model's context is short) and every path is resolved inside the
workspace: a path that escapes it (``../``, an absolute path, a symlink out) is refused with an
error the model sees. ``make_data.py`` calls the same functions (``*_in``, on a plain folder) to
write the worked examples' tool results, so the examples show exactly what the tools return.
"""

from __future__ import annotations

import re
from pathlib import Path

from arft.tools.base import ToolContext

MAX_LIST = 60
"""Most paths ``list`` prints."""
MAX_GREP = 12
"""Most files ``grep`` prints a match of."""
MAX_READ_LINES = 40
"""Most lines ``read`` prints."""
MAX_LINE_CHARS = 100


def _resolve(root: Path, path: str) -> Path:
    """``path`` inside ``root``; ValueError (shown to the model) when it escapes or is missing."""
    root = root.resolve()
    target = (root / (path.strip() or ".")).resolve()
    if target != root and root not in target.parents:
        raise ValueError(f"path '{path}' is outside the repository; use a path relative to the "
                         "repository root, e.g. '.' or 'tests'")
    if not target.exists():
        raise ValueError(f"no such file or folder: '{path}'; call list('.') to see the files")
    return target


def _files(target: Path) -> list[Path]:
    if target.is_file():
        return [target]
    return sorted(p for p in target.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _workspace(ctx: ToolContext | None) -> Path:
    if ctx is None or ctx.workspace is None:
        raise ValueError("this tool needs the rollout's workspace: set rollout.workspace in the job")
    return ctx.workspace


def _clip(line: str) -> str:
    line = line.strip()
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "..."


def list_in(root: Path, path: str = ".") -> str:
    """Every file under ``path`` (relative to ``root``), one per line, sorted."""
    root = root.resolve()
    files = [p.relative_to(root).as_posix() for p in _files(_resolve(root, path))]
    shown = files[:MAX_LIST]
    more = len(files) - len(shown)
    return "\n".join(shown + ([f"... {more} more files"] if more else [])) or "(empty folder)"


def grep_in(root: Path, pattern: str, path: str = ".") -> str:
    """``file:line: text`` of the first line of each file under ``path`` that matches ``pattern``
    (case-insensitive), like ``grep -m1``: one line per file keeps the 135M model's context short."""
    if not pattern.strip():
        raise ValueError("pattern is empty: give a word to search for, e.g. 'invoice_total'")
    root = root.resolve()
    try:
        regex = re.compile(pattern, re.IGNORECASE)
    except re.error:  # a small model writes "foo(" more often than a real regex
        regex = re.compile(re.escape(pattern), re.IGNORECASE)
    hits: list[str] = []
    for file in _files(_resolve(root, path)):
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        first = next(((n, line) for n, line in enumerate(lines, 1) if regex.search(line)), None)
        if first is not None:
            hits.append(f"{file.relative_to(root).as_posix()}:{first[0]}: {_clip(first[1])}")
    if not hits:
        return f"no matches for '{pattern}'"
    more = len(hits) - MAX_GREP
    return "\n".join(hits[:MAX_GREP] + ([f"... {more} more files"] if more > 0 else []))


def read_in(root: Path, path: str) -> str:
    """The first lines of a file, numbered."""
    target = _resolve(root, path)
    if target.is_dir():
        raise ValueError(f"'{path}' is a folder; call list('{path}') to see its files")
    lines = target.read_text(encoding="utf-8", errors="replace").splitlines()
    body = [f"{n}: {line.rstrip()[:MAX_LINE_CHARS]}" for n, line in enumerate(lines[:MAX_READ_LINES], 1)]
    more = len(lines) - MAX_READ_LINES
    return "\n".join(body + ([f"... {more} more lines"] if more > 0 else [])) or "(empty file)"


def list_files(path: str = ".", ctx: ToolContext | None = None) -> str:
    """List the repository's files.

    Args:
        path: A folder, e.g. ".".
    """
    return list_in(_workspace(ctx), path)


def grep(pattern: str, path: str = ".", ctx: ToolContext | None = None) -> str:
    """Find the files that contain a word (first matching line of each file).

    Args:
        pattern: A word, e.g. "invoice_total".
        path: A folder to search in.
    """
    return grep_in(_workspace(ctx), pattern, path)


def read(path: str, ctx: ToolContext | None = None) -> str:
    """Show a file's first lines.

    Args:
        path: A file, e.g. "billing/invoice.py".
    """
    return read_in(_workspace(ctx), path)
