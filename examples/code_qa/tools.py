"""The code_qa example's tools: read-only ``search`` and ``read`` over the generated codebase.

The codebase sits beside this file (``codebase/``); both tools only read it, so every rollout can
share the one folder (no per-rollout workspace copy). ``search_in``/``read_in`` take the root
explicitly so ``make_data.py`` can run them on a freshly generated tree for the worked examples.
Outputs are bounded (a handful of hits, a few dozen lines) to keep the 135M model's context short.
"""

from __future__ import annotations

import re
from pathlib import Path

CODEBASE = Path(__file__).resolve().parent / "codebase"
MAX_HITS = 5
MAX_LINE_CHARS = 100
MAX_READ_LINES = 30
STOPWORDS = frozenset(
    "a an and are at by does do for from how in is it its of on or the this that to what which "
    "who whose with service services function file name value setting".split())


def stem(token: str) -> str:
    """A crude English stem, enough to match 'retries' to 'retry' and 'settles' to 'settle'."""
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def tokens(text: str) -> set[str]:
    """Lowercase stems of the words of ``text`` (identifiers split at underscores and dots)."""
    return {stem(t) for t in re.split(r"[^a-z0-9]+", text.lower()) if t}


def _matches(word: str, pool: set[str]) -> bool:
    # A prefix match ('own' ~ 'owner', 'batch' ~ 'batche') covers what the stemmer misses.
    return any(word == t or (min(len(word), len(t)) >= 3 and (t.startswith(word) or word.startswith(t)))
               for t in pool)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def search_in(root: Path, query: str) -> str:
    """The best ``path:line: text`` hits for ``query`` under ``root`` (see ``search``)."""
    words = sorted(tokens(query) - {stem(w) for w in STOPWORDS})
    if not words:
        raise ValueError("the query has no search words; use words such as a service name and a "
                         "setting, e.g. 'billing port'")
    hits: list[tuple[int, str, int, str]] = []
    for path in _files(root):
        rel = path.relative_to(root).as_posix()
        in_path = tokens(rel)
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            in_line = tokens(line)
            # A word found in the line counts twice a word found only in the file's path.
            score = sum(2 if _matches(w, in_line) else 1 if _matches(w, in_path) else 0 for w in words)
            if score > 0 and line.strip():
                hits.append((-score, rel, n, line.strip()[:MAX_LINE_CHARS]))
    if not hits:
        return f"No matches for {query!r}. Try other words, e.g. a service name and a setting."
    return "\n".join(f"{rel}:{n}: {text}" for _, rel, n, text in sorted(hits)[:MAX_HITS])


def read_in(root: Path, path: str) -> str:
    """The numbered lines of ``path`` (relative to ``root``), at most ``MAX_READ_LINES`` of them."""
    target = (root / path.strip().lstrip("/").removeprefix("./")).resolve()
    if not target.is_relative_to(root.resolve()) or not target.is_file():
        raise FileNotFoundError(f"no file {path!r} in the codebase; use search to find paths such "
                                "as services/billing/config.py")
    lines = target.read_text().splitlines()
    shown = [f"{n}: {line[:MAX_LINE_CHARS]}" for n, line in enumerate(lines[:MAX_READ_LINES], start=1)]
    if len(lines) > MAX_READ_LINES:
        shown.append(f"... ({len(lines) - MAX_READ_LINES} more lines)")
    return "\n".join(shown)


def search(query: str) -> str:
    """Search the codebase; returns the best matching lines as path:line: text.

    Args:
        query: Words to look for, e.g. "billing default port".
    """
    return search_in(CODEBASE, query)


def read(path: str) -> str:
    """Read one file of the codebase, with line numbers.

    Args:
        path: The file's path, e.g. "services/billing/config.py".
    """
    return read_in(CODEBASE, path)
