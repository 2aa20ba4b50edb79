"""Redact secrets and personal data from imported traffic before anything is stored.

``arft import --redact REGEX`` (repeatable) replaces every match with ``[REDACTED]``;
``--redact pii`` is a named preset (``PII_PATTERNS``: e-mail addresses, credit-card-like digit
runs, ``sk-...`` API keys, ``Bearer ...`` tokens, phone numbers, IPv4 addresses);
``--redact-hook file.py:function`` runs a function ``str -> str`` of the user's own after the
patterns. A ``Redactor`` is applied to every string the importer keeps (message contents,
tool-call argument values, item values) and counts what it replaced.

The preset is deliberately broad (a version number such as ``1.2.3.4`` looks like an IPv4 address
and is redacted too): losing a little text is cheaper than training on a customer's card number.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

from arft.errors import ArftError
from arft.pyfile import NotAPythonFile, load_file

REPLACEMENT = "[REDACTED]"
PII_RULES: tuple[tuple[str, str, str | None], ...] = (
    ("email", r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
              r"\.[A-Za-z]{2,}", "@"),
    ("api_key", r"\bsk-[A-Za-z0-9_-]{8,}", "sk-"),
    ("bearer", r"\b[Bb]earer\s+[A-Za-z0-9._~+/=-]{8,}", "earer"),
    # The digit patterns start with \d (the lookbehind comes after it) so that the regex engine
    # can skip to the next digit instead of trying every position: 10x faster on prose.
    ("card", r"\d(?<![\w.]\d)(?:[ -]?\d){12,18}(?![\w.])", None),
    ("phone", r"\d(?<![\w.]\d)\d\d[ .-]\d{3}[ .-]\d{4}(?![\w.])", None),
    ("ipv4", r"\d(?<![\w.]\d)\d{0,2}\.(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){2}"
             r"(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])", None),
    ("phone_international", r"\+(?<![\w+]\+)\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?!\w)", "+"),
    ("phone_parenthesised", r"\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}(?![\w.])", "("),
)
"""The ``pii`` preset, applied in this order: (name, pattern, a substring every match contains,
used to skip the pattern on strings without it)."""
PII_PATTERNS: dict[str, str] = {name: pattern for name, pattern, _ in PII_RULES}
PRESETS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "pii": tuple((pattern, needle) for _, pattern, needle in PII_RULES)}
"""Names ``--redact`` accepts instead of a regular expression."""

Rule = tuple["re.Pattern[str]", "str | None"]


class RedactError(ArftError):
    """A redaction that cannot be set up or applied (bad regex, broken hook); says what to fix."""


class Redactor:
    """Replaces matches of the patterns (then applies the hook); ``count`` is how many it did.

    A hook changes are counted as the number of ``[REDACTED]`` markers it added (at least one
    per string it changed).
    """

    def __init__(self, patterns: Sequence[str] = (),
                 hook: Callable[[str], str] | None = None, hook_name: str = "hook") -> None:
        self.count = 0
        self._hook = hook
        self._hook_name = hook_name
        self._rules = _compile(patterns)

    def __call__(self, text: str) -> str:
        """``text`` with every match replaced by ``[REDACTED]``."""
        for regex, needle in self._rules:
            if needle is None or needle in text:
                text, n = regex.subn(REPLACEMENT, text)
                self.count += n
        if self._hook is not None:
            text = self._run_hook(text)
        return text

    def _run_hook(self, text: str) -> str:
        try:
            out = self._hook(text)  # type: ignore[misc]
        except Exception as e:
            raise RedactError(f"redact hook {self._hook_name} raised {type(e).__name__}: {e}; "
                              "fix the hook (it must take a string and return a string)") from e
        if not isinstance(out, str):
            raise RedactError(f"redact hook {self._hook_name} returned {type(out).__name__}, "
                              "not a string; return the (redacted) text")
        if out != text:
            self.count += max(1, out.count(REPLACEMENT) - text.count(REPLACEMENT))
        return out

    def value(self, value: object) -> Any:
        """``value`` with every string inside it (list items, dict values) redacted."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value


def _compile(patterns: Sequence[str]) -> list[Rule]:
    """The rules in order; neighbouring patterns without a needle are joined into one
    alternation (one pass over each string) unless they cannot be (a global flag like ``(?i)``)."""
    expanded = [rule for name in patterns for rule in PRESETS.get(name, ((name, None),))]
    rules: list[Rule] = []
    for p, needle in expanded:
        try:
            regex = re.compile(p)
        except re.error as e:
            raise RedactError(f"--redact {p!r} is not a valid regular expression ({e}); fix it, "
                              f"or use a preset ({', '.join(PRESETS)})") from None
        if regex.match(""):
            raise RedactError(f"--redact {p!r} matches the empty string (it would redact "
                              "between every character); make it match at least one character")
        previous = rules[-1] if rules else None
        if needle is None and previous is not None and previous[1] is None:
            try:
                regex = re.compile(f"{previous[0].pattern}|(?:{p})")
                rules.pop()
            except re.error:
                pass
        rules.append((regex, needle))
    return rules


def load_hook(ref: str, base_dir: Path | str = ".") -> Callable[[str], str]:
    """The function ``file.py:function`` names (a path relative to ``base_dir``)."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not target.endswith(".py") or not attr:
        raise RedactError(f"--redact-hook {ref!r}: write it as path/to/file.py:function")
    path = Path(target).expanduser()
    path = (path if path.is_absolute() else Path(base_dir) / path).resolve()
    if not path.is_file():
        raise RedactError(f"--redact-hook {ref!r}: file {path} not found")
    try:
        module = load_file(path, f"arft_redact_{path.stem}_{uuid.uuid4().hex[:8]}")
    except NotAPythonFile:
        raise RedactError(f"--redact-hook {ref!r}: {path} is not an importable Python file") from None
    except Exception as e:
        raise RedactError(f"--redact-hook {ref!r}: importing {path} failed "
                          f"({type(e).__name__}: {e}); fix the file") from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise RedactError(f"--redact-hook {ref!r}: {path.name} has no function {attr!r}")
    return fn


def build_redactor(patterns: Sequence[str] = (), hook: str | None = None,
                   base_dir: Path | str = ".") -> Redactor | None:
    """The redactor for ``--redact`` patterns/presets and ``--redact-hook``; None when neither."""
    if not patterns and hook is None:
        return None
    fn = load_hook(hook, base_dir) if hook is not None else None
    return Redactor(patterns, fn, hook_name=hook or "hook")
