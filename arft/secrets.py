"""Secrets in a job: ``${ENV_VAR}`` references resolved at start, and redaction of everything
secret-looking before a job, a log line or a dashboard's config is written.

A job names a secret by reference, never by value::

    tools: [{name: lookup, server_url: ..., headers: {Authorization: "Bearer ${TOOL_TOKEN}"},
             signing_secret: "${TOOL_SIGNING_SECRET}"}]

References are resolved, from the environment arft runs in, in these places only (the
``REFERENCE_MAPS`` and ``REFERENCE_FIELDS``): every value of a ``headers`` map (endpoint tools,
the endpoint grader) and of an ``env`` map (MCP servers, ``tests_pass``), and the
``signing_secret`` and ``api_key`` fields (endpoint tools and graders, model judges, the openai
engine). Each component resolves its own fields when it is built (``resolve``,
``resolve_map``); ``check`` resolves a whole job up front so that a missing variable is an error
naming its full field path before anything starts.

What is written (the run store's job record, dashboards' configs, logs) is passed through
``redact``/``scrub``: a value under ``headers`` or under a secret-looking key (``SECRET_KEY``) is
kept only when it is a reference (``"Bearer ${TOKEN}"``), otherwise replaced by ``MASK``; and
every resolved value is replaced wherever it appears. The job is therefore stored with its
references, never with what they resolved to.

This module imports nothing from arft, so every layer can use it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from arft.errors import ArftError

REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""A reference to an environment variable: ``${NAME}``."""
REFERENCE_MAPS = frozenset({"headers", "env"})
"""Maps whose every value may hold references."""
REFERENCE_FIELDS = frozenset({"signing_secret", "api_key"})
"""String fields that may hold references."""
SECRET_KEY = re.compile(r"key(?!word)|token(?!s)|secret|passw|authorization|cookie|credential",
                        re.IGNORECASE)
"""A key whose string value is treated as a secret (``api_key``, ``X-Auth-Token``, ...); a key
ending in ``_env`` names a variable instead (``api_key_env``) and is kept, and so is a key that
is no name (a file path such as ``test_token.py``: see ``NAME``), a count of tokens
(``micro_batch_tokens: auto``, ``max_tokens``) and a setting about keywords
(``rollout.schema_keywords: lenient``)."""
NAME = re.compile(r"[A-Za-z0-9_-]+")
"""What a field, header or variable name looks like."""
SCHEME_WORD = re.compile(r"\s*(?:bearer|basic|token)?\s*", re.IGNORECASE)
"""What may stand beside references in a value that is stored as written (``Bearer ${T}``)."""
MASK = "***"
"""What a secret is replaced by."""
MIN_SCRUB_CHARS = 4
"""Resolved values shorter than this are not scrubbed from free text (they would mangle it)."""


# ValueError too: the doctor's baseline (arft.app.doctor.run) reports a ValueError from the run it
# starts, a tool header naming an unset variable among them.
class SecretError(ArftError, ValueError):
    """A reference to an environment variable that is not set; names the field and the variable."""


def _missing(field: str, name: str) -> str:
    return (f"{field} references ${{{name}}}, which is not set; export it in the environment "
            f"arft runs in (export {name}=...) or remove the reference from the job")


def resolve(value: str, field: str, env: Mapping[str, str] | None = None) -> str:
    """``value`` with every ``${NAME}`` replaced by ``env[NAME]`` (default: ``os.environ``).

    Raises ``SecretError`` naming ``field`` and the variable when one is unset or empty.
    """
    env = os.environ if env is None else env
    missing = [n for n in REFERENCE.findall(value) if not env.get(n)]
    if missing:
        raise SecretError("; ".join(_missing(field, n) for n in dict.fromkeys(missing)))
    return REFERENCE.sub(lambda m: env[m.group(1)], value)


def resolve_map(values: Mapping[str, str], field: str,
                env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every value of ``values`` resolved (``field`` names the map in errors: ``headers``)."""
    return {k: resolve(v, f"{field}.{k}", env) for k, v in values.items()}


def is_reference(value: str) -> bool:
    """Whether ``value`` is references only, beside at most a scheme word (``Bearer ${T}``)."""
    return bool(REFERENCE.search(value)) and SCHEME_WORD.fullmatch(REFERENCE.sub("", value)) is not None


def _join(path: str, key: str | int) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)


def _reference_sites(data: object, path: str = "", parent: str = "") -> Iterator[tuple[str, str, str]]:
    """``(path, key, value)`` of every string in ``data`` at a place where references resolve."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            if isinstance(value, str) and (parent in REFERENCE_MAPS or key in REFERENCE_FIELDS):
                yield _join(path, key), str(key), value
            elif not isinstance(value, str):
                yield from _reference_sites(value, _join(path, key), str(key))
    elif isinstance(data, list | tuple):
        for i, value in enumerate(data):
            yield from _reference_sites(value, _join(path, i), parent)


def _named_variables(data: object) -> Iterator[str]:
    """The names held by secret-looking ``*_env`` keys (``api_key_env: OPENAI_API_KEY``)."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            if isinstance(value, str) and str(key).endswith("_env") and SECRET_KEY.search(str(key)):
                yield value
            else:
                yield from _named_variables(value)
    elif isinstance(data, list | tuple):
        for value in data:
            yield from _named_variables(value)


def check(data: object, env: Mapping[str, str] | None = None) -> frozenset[str]:
    """Resolve every reference in ``data`` (a job as plain data) and return the secret values
    (what references resolved to, and the variables ``*_env`` keys name) for ``scrub``.

    Raises ``SecretError`` listing every unset variable with its full field path, e.g.
    ``method.reinforcement.tools[0].headers.Authorization references ${TOOL_TOKEN}, ...``.
    """
    env = os.environ if env is None else env
    values: set[str] = set()
    errors: list[str] = []
    for path, _, value in _reference_sites(data):
        names = REFERENCE.findall(value)
        errors += [_missing(path, n) for n in dict.fromkeys(names) if not env.get(n)]
        values.update(env[n] for n in names if env.get(n))
    if errors:
        raise SecretError("\n".join(errors))
    values.update(env[n] for n in _named_variables(data) if env.get(n))
    return frozenset(values)


def scrub(text: str, values: Iterable[str]) -> str:
    """``text`` with every one of ``values`` (of at least ``MIN_SCRUB_CHARS``) replaced by MASK."""
    for value in sorted((v for v in values if len(v) >= MIN_SCRUB_CHARS), key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def _is_secret_place(key: str, parent: str) -> bool:
    return parent == "headers" or key in REFERENCE_FIELDS or (
        bool(SECRET_KEY.search(key)) and not key.endswith("_env") and bool(NAME.fullmatch(key)))


def redact(data: object, values: Iterable[str] = (), parent: str = "") -> Any:
    """A copy of ``data`` (plain JSON-like data) fit to be written: a string under ``headers`` or
    a secret-looking key becomes ``MASK`` unless it is a reference, and every one of ``values``
    (resolved secrets) is scrubbed from every string."""
    values = tuple(values)
    if isinstance(data, Mapping):
        out: dict[Any, Any] = {}
        for key, value in data.items():
            if isinstance(value, str) and _is_secret_place(str(key), parent):
                out[key] = value if is_reference(value) else MASK
            else:
                out[key] = redact(value, values, str(key))
        return out
    if isinstance(data, list | tuple):
        return [redact(v, values, parent) for v in data]
    if isinstance(data, str):
        return scrub(data, values)
    return data


class SecretFilter(logging.Filter):
    """Scrubs secret values from every log record it sees (message, arguments and traceback)."""

    def __init__(self, values: Iterable[str]) -> None:
        super().__init__()
        self.values = frozenset(values)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message, self.values)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text, self.values)
        return True


@contextmanager
def redacting_logs(values: Iterable[str]) -> Iterator[None]:
    """For the block, scrub ``values`` from what every log handler present writes (the root
    logger's, every named logger's, and logging's last-resort handler)."""
    secret_filter = SecretFilter(values)
    if not secret_filter.values:
        yield
        return
    loggers = [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    handlers = {h for lg in loggers for h in lg.handlers}
    if logging.lastResort is not None:
        handlers.add(logging.lastResort)
    for handler in handlers:
        handler.addFilter(secret_filter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(secret_filter)
