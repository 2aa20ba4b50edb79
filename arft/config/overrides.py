"""``--set SECTION.FIELD=VALUE``: change any field of a job from the command line.

An override is applied to the job file's data *before* validation, so it is checked exactly as
if it had been written in the file (types, unknown fields with "did you mean", the hosted shape),
and ``load_job`` names the ``--set`` that caused an error where it would name the file's line.
The value is read as YAML (``0.9`` a number, ``true`` a boolean, ``[a, b]`` a list, ``{k: v}`` a
mapping, anything else a string), as the same text in the job file would be; a path step that is
a number indexes a list (``--set method.reinforcement.tools.0.server_url=http://...``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, NamedTuple

import yaml

from arft.config.base import JobError

EXAMPLE = "e.g. --set sampling.temperature=0.9"


class Override(NamedTuple):
    """One ``--set``: the text as written, the dotted path split into keys, and the value."""

    text: str
    path: tuple[str, ...]
    value: Any

    @property
    def flag(self) -> str:
        """How errors name it: ``--set sampling.temperature=abc``."""
        return f"--set {self.text}"


def parse_override(text: str) -> Override:
    """``SECTION.FIELD=VALUE`` as an ``Override``; a ``JobError`` that shows the form otherwise."""
    key, sep, raw = text.partition("=")
    path = tuple(p.strip() for p in key.strip().split("."))
    if not sep or not all(path):
        raise JobError(f"--set {text}: write SECTION.FIELD=VALUE with a dotted path to the field, {EXAMPLE}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise JobError(f"--set {text}: the value is not valid YAML ({problem}); quote it for the shell, "
                       f"e.g. --set 'rollout.stop=[\"END\"]'") from None
    return Override(text, path, value)


def apply_overrides(data: dict[str, Any], overrides: Sequence[Override]) -> dict[str, Any]:
    """A copy of the job data with every override set, in order (a later one wins). Missing
    sections are created; a step into a value that is not a mapping or list is an error."""
    data = dict(data)  # only the containers on an override's path are copied (the file may nest deeply)
    for o in overrides:
        node: Any = data
        for depth, key in enumerate(o.path[:-1]):
            node = _child(node, key, o, depth)
        _put(node, o.path[-1], o, len(o.path) - 1)
    return data


def _index(node: list[Any], key: str, o: Override, depth: int) -> int:
    """``key`` as an index into the list ``node`` (at ``o.path[:depth]``)."""
    where = ".".join(o.path[:depth])
    if not key.isdigit() or int(key) >= len(node):
        raise JobError(f"{o.flag}: {where} is a list of {len(node)}; index it by position "
                       f"0..{len(node) - 1} ({where}.0.FIELD=VALUE), not '{key}'")
    return int(key)


def _child(node: Any, key: str, o: Override, depth: int) -> Any:
    """The mapping or list at ``key`` inside ``node``, made an empty mapping when absent or null."""
    if isinstance(node, list):
        at: int | str = _index(node, key, o, depth)
    elif isinstance(node, dict):
        at = key
        if node.get(key) is None:
            node[key] = {}
    else:
        raise _not_a_section(node, o, depth)
    child = node[at]
    if isinstance(child, (dict, list)):  # a copy, so the caller's data is never changed
        node[at] = child = copy.copy(child)
    return child


def _put(node: Any, key: str, o: Override, depth: int) -> None:
    if isinstance(node, list):
        node[_index(node, key, o, depth)] = o.value
    elif isinstance(node, dict):
        node[key] = o.value
    else:
        raise _not_a_section(node, o, depth)


def _not_a_section(node: Any, o: Override, depth: int) -> JobError:
    where = ".".join(o.path[:depth])
    return JobError(f"{o.flag}: {where} is a value ({type(node).__name__}), not a section with "
                    f"fields; set it whole: --set {where}=VALUE")


def blamed(doc_path: tuple[Any, ...], overrides: Sequence[Override]) -> Override | None:
    """The last override that an error at ``doc_path`` (a path in the document) comes from: the
    error is at or inside the value it set, or in the section that holds it."""
    path = tuple(str(p) for p in doc_path)
    for o in reversed(overrides):
        n = min(len(path), len(o.path))
        if n and path[:n] == o.path[:n]:
            return o
    return None
