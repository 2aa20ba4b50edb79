"""Grader templates: ``{{ item.x }}`` and ``{{ sample.output_text }}`` placeholders in strings.

A placeholder is a path rooted at ``sample`` or ``item``, followed by ``.key``, ``[index]``
(negative indexes count from the end) or ``["key"]`` / ``['key']`` (for keys with spaces or dots).
Spaces inside the braces are optional. Strings are inserted as they are; every other value is
inserted as JSON, so ``{{ item.facts }}`` renders ``["a", "b"]``.

One convenience: a ``.key`` or ``[index]`` step applied to a *string* that holds JSON descends
into the parsed JSON. That is what makes ``{{ sample.output_tools[0].function.arguments.city }}``
work, since tool-call arguments are JSON-encoded strings.

A path that does not exist raises ``TemplateError`` naming the template and the missing part;
graders turn it into an error ``Score`` (never a silent 0).
"""

from __future__ import annotations

import json
import re
from typing import Any

from arft.errors import ArftError

PLACEHOLDER = re.compile(r"\{\{\s*(.*?)\s*\}\}", re.DOTALL)
STEP = re.compile(
    r"""\.(?P<attr>[A-Za-z_][A-Za-z0-9_\-]*)      # .key
      | \[\s*(?P<index>-?\d{1,18})\s*\]          # [0] (more digits: no list is that long)
      | \[\s*"(?P<dq>(?:[^"\\]|\\.)*)"\s*\]      # ["key"]
      | \[\s*'(?P<sq>(?:[^'\\]|\\.)*)'\s*\]      # ['key']
    """,
    re.VERBOSE,
)
ROOT = re.compile(r"\s*(sample|item)\b")


class TemplateError(ArftError):
    """A template placeholder that cannot be resolved; the message names template and part."""


def _parse_path(expr: str) -> tuple[str, list[str | int]]:
    """Split ``sample.a[0]["b c"]`` into the root and its steps."""
    m = ROOT.match(expr)
    if m is None:
        raise TemplateError(f"placeholder '{{{{ {expr} }}}}' must start with 'sample' or 'item' "
                            "(e.g. {{ item.answer }} or {{ sample.output_text }})")
    steps: list[str | int] = []
    pos = m.end()
    rest = expr.rstrip()
    while pos < len(rest):
        s = STEP.match(rest, pos)
        if s is None:
            raise TemplateError(f"placeholder '{{{{ {expr} }}}}': cannot read the path at "
                                f"{rest[pos:]!r}; write steps as .key, [0] or [\"key\"]")
        if s.group("attr") is not None:
            steps.append(s.group("attr"))
        elif s.group("index") is not None:
            steps.append(int(s.group("index")))
        else:
            quoted = s.group("dq") if s.group("dq") is not None else s.group("sq")
            steps.append(re.sub(r"\\(.)", r"\1", quoted))
        pos = s.end()
    return m.group(1), steps


def _describe(root: str, steps: list[str | int]) -> str:
    out = root
    for step in steps:
        if isinstance(step, int):
            out += f"[{step}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", step):
            out += f".{step}"
        else:
            out += f"[{json.dumps(step)}]"
    return out


def _step(value: object, step: str | int, here: str) -> Any:
    """Apply one path step; ``here`` is the path so far, for the error message."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TemplateError(f"{here} is a string, not an object or list, so it has no "
                                f"{step!r}") from None
    if isinstance(value, dict):
        key = str(step)
        if key not in value:
            keys = ", ".join(map(str, value)) or "(none)"
            raise TemplateError(f"{here} has no key {key!r} (it has: {keys})")
        return value[key]
    if isinstance(value, list):
        if not isinstance(step, int):
            raise TemplateError(f"{here} is a list; index it with [0], not {step!r}")
        if not -len(value) <= step < len(value):
            raise TemplateError(f"{here} has {len(value)} element(s); index {step} is out of range")
        return value[step]
    raise TemplateError(f"{here} is {json.dumps(value)}, which has no {step!r}")


def resolve(path_expr: str, sample: dict[str, object], item: dict[str, object]) -> Any:
    """The raw value at ``path_expr`` (``item.x``, ``sample.output_tools[0]``; braces optional)."""
    expr = path_expr.strip()
    whole = PLACEHOLDER.fullmatch(expr)
    if whole is not None:
        expr = whole.group(1)
    root, steps = _parse_path(expr)
    value: Any = sample if root == "sample" else item
    for i, step in enumerate(steps):
        value = _step(value, step, _describe(root, steps[:i]))
    return value


def to_text(value: object) -> str:
    """How a value appears in a rendered template: strings as is, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_template(template: str, sample: dict[str, object], item: dict[str, object]) -> str:
    """Replace every ``{{ path }}`` in ``template``; raises ``TemplateError`` naming the template."""

    def substitute(m: re.Match[str]) -> str:
        try:
            return to_text(resolve(m.group(1), sample, item))
        except TemplateError as e:
            raise TemplateError(f"template {template!r}: {e}") from None

    return PLACEHOLDER.sub(substitute, template)


def is_lone_placeholder(template: str) -> bool:
    """Whether ``template`` is exactly one ``{{ ... }}`` (``{{ a }} {{ b }}`` is not)."""
    found = PLACEHOLDER.findall(template)
    return len(found) == 1 and PLACEHOLDER.fullmatch(template.strip()) is not None


def template_value(template: str | list[str], sample: dict[str, object],
                   item: dict[str, object]) -> Any:
    """A spec value: the raw value of a lone placeholder, else the rendered text (or the list)."""
    if isinstance(template, list):
        return template
    if is_lone_placeholder(template):
        return resolve(template, sample, item)
    return render_template(template, sample, item)
