"""Load and validate a task dataset: JSONL, one task a line, in the hosted Agent RFT format.

A row is ``{"messages": [...], "tools": [<function schemas>]?, "tool_choice"?, "parallel_tool_calls"?,
<any other keys>}``.
The other keys (``id`` included) become the task's ``item``, which graders read as
``{{item.key}}``. Every problem is reported as ``file:line: reason`` together with what to do;
all bad rows of a file are reported at once so a user can fix them in one pass, and no row is
ever skipped silently (only blank lines are not rows).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Collection, Iterable

from arft.errors import ArftError
from arft.records import FunctionCall, Message, Task, ToolCall

ROLES = ("system", "user", "assistant", "tool", "developer")
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
TEXT_PART_TYPES = ("text", "input_text", "output_text")
ROW_SPECIAL_KEYS = ("messages", "tools", "tool_choice", "parallel_tool_calls")
MAX_REPORTED = 20
TOO_DEEP = ("JSON nested too deeply to read (lists or objects about a thousand levels inside "
            "each other); flatten it")
UNDECODABLE = re.compile("[\udc80-\udcff]")
"""A byte that is not UTF-8, as ``errors="surrogateescape"`` decodes it."""


# ValueError too: opening a run checks its splits' tools with DatasetError, and callers of a run
# (the doctor's checks, the warm start in arft.app.expert_iteration) report a ValueError from it
# as the data's fault.
class DatasetError(ArftError, ValueError):
    """A dataset that cannot be used; every line of the message is ``file:line: reason``."""


# ValueError too: the row checks (normalise_tool_schema, parse_messages) are documented and tested
# as raising ValueError.
class RowError(ArftError, ValueError):
    """One bad row or message; the loaders report it as a ``DatasetError`` prefixed ``file:line:``,
    ``arft serve`` as a 400 naming the field."""


# ValueError too: a bad --item (arft.data.traffic.parse_item_paths) was a ValueError to
# import_traffic's callers before this class covered it, and its tests still catch it so.
class TrafficImportError(ArftError, ValueError):
    """An import of logged traffic (``arft.data.importer``) that cannot run: a bad option, no
    valid line, an output folder in the way; the message says what to do."""


def load_tasks(path: str | Path) -> list[Task]:
    """Read the JSONL dataset at ``path`` into tasks, in file order.

    Raises ``DatasetError`` listing every bad row (``file:line: reason``), duplicate ids (naming
    both lines), or a file with no rows at all.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: dataset file not found (check training_file / "
                           "validation_file in the job; relative paths resolve against the job file's folder)")
    errors: list[str] = []
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8", errors="surrogateescape") as f:  # a bad byte fails its line
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue  # blank lines (e.g. a trailing newline) are not rows
            try:
                task = _parse_row(line, lineno, path.stem)
            except RowError as e:
                errors.append(f"{path}:{lineno}: {e}")
                continue
            if task.id in seen:
                errors.append(f"{path}:{lineno}: duplicate task id {task.id!r} (also on line "
                              f"{seen[task.id]}); give every row a unique 'id' or drop the key")
                continue
            seen[task.id] = lineno
            tasks.append(task)
    if errors:
        raise DatasetError(_summarise(path, errors))
    if not tasks:
        raise DatasetError(f"{path}: the dataset has no rows; add one JSON object per line "
                           '(e.g. {"messages": [{"role": "user", "content": "..."}]})')
    return tasks


def _summarise(path: Path, errors: list[str]) -> str:
    """One error is reported as is; several get a count header (and are capped)."""
    if len(errors) == 1:
        return errors[0]
    shown = errors[:MAX_REPORTED]
    more = len(errors) - len(shown)
    head = f"{path}: {len(errors)} bad row(s); fix them and run again"
    tail = [f"... and {more} more"] if more else []
    return "\n".join([head, *shown, *tail])


def _parse_row(line: str, lineno: int, stem: str) -> Task:
    bad = UNDECODABLE.search(line)
    if bad is not None:
        raise RowError(f"not UTF-8 text (byte 0x{ord(bad.group()) - 0xDC00:02X} at column "
                       f"{bad.start() + 1}); save the file as UTF-8")
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise RowError(f"not valid JSON ({e.msg} at column {e.colno}); each line must be one "
                       "JSON object") from None
    except RecursionError:
        raise RowError(TOO_DEEP) from None
    if not isinstance(row, dict):
        raise RowError(f"a row must be a JSON object, got {type(row).__name__}; write "
                       '{"messages": [...], ...} on each line')
    messages = parse_messages(row.get("messages"))
    tools = parse_tools(row["tools"]) if row.get("tools") is not None else None
    tool_choice = row.get("tool_choice")
    if tool_choice is not None and not isinstance(tool_choice, (str, dict)):
        raise RowError("'tool_choice' must be a string (auto, none, required, a tool name) or "
                       '{"type": "function", "function": {"name": ...}}')
    parallel = row.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RowError(f"'parallel_tool_calls' must be true or false, got {json.dumps(parallel)[:40]}")
    task_id = _task_id(row, lineno, stem)
    item = {k: v for k, v in row.items() if k not in ROW_SPECIAL_KEYS}
    return Task(id=task_id, messages=messages, tools=tools, tool_choice=tool_choice,
                parallel_tool_calls=parallel, item=item)


def _task_id(row: dict[str, object], lineno: int, stem: str) -> str:
    if "id" not in row:
        return f"{stem}:{lineno}"
    value = row["id"]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise RowError(f"'id' must be a non-empty string or an integer, got {value!r}")
    return str(value)


def parse_messages(raw: object) -> tuple[Message, ...]:
    """Chat-completions messages as records (``RowError`` naming the message and the fault)."""
    if raw is None:
        raise RowError("no 'messages'; every row needs a non-empty list of chat messages")
    if not isinstance(raw, list) or not raw:
        raise RowError("'messages' must be a non-empty list of chat messages "
                       '(e.g. [{"role": "user", "content": "..."}])')
    return tuple(_parse_message(m, i) for i, m in enumerate(raw))


def _parse_message(raw: object, index: int) -> Message:
    where = f"messages[{index}]"
    if not isinstance(raw, dict):
        raise RowError(f"{where} must be an object with 'role' and 'content'")
    unknown = sorted(set(raw) - set(MESSAGE_KEYS))
    if unknown:
        raise RowError(f"{where} has unknown key(s) {unknown}; a message may only have "
                       f"{list(MESSAGE_KEYS)}")
    role = raw.get("role")
    if role not in ROLES:
        got = "no 'role'" if role is None else f"role {role!r}"
        raise RowError(f"{where} has {got}; use one of {list(ROLES)}")
    tool_calls = _parse_tool_calls(raw.get("tool_calls"), where, role)
    content = _parse_content(raw, where, has_calls=bool(tool_calls))
    tool_call_id = raw.get("tool_call_id")
    if role == "tool" and not (isinstance(tool_call_id, str) and tool_call_id):
        raise RowError(f"{where} is a tool message without 'tool_call_id'; set it to the 'id' "
                       "of the assistant tool call it answers")
    if role != "tool" and tool_call_id is not None:
        raise RowError(f"{where}: only tool messages carry 'tool_call_id' (role is {role!r})")
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise RowError(f"{where}: 'name' must be a string")
    return Message(role=role, content=content, tool_calls=tool_calls,
                   tool_call_id=tool_call_id, name=name)


def _parse_content(raw: dict[str, object], where: str, has_calls: bool) -> str | None:
    """Message content as a string; a list of text parts is joined with newlines."""
    content = raw.get("content")
    if content is None:
        # An assistant few-shot turn that only calls tools legitimately has no content.
        if has_calls:
            return None
        raise RowError(f"{where} has no 'content'; give it a string (or a list of "
                       '{"type": "text", "text": ...} parts)')
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            ok = (isinstance(part, dict) and part.get("type") in TEXT_PART_TYPES
                  and isinstance(part.get("text"), str))
            if not ok:
                raise RowError(f"{where}.content[{j}] must be a text part "
                               '{"type": "text", "text": "..."}; images and audio are not supported')
            texts.append(part["text"])
        return "\n".join(texts)
    raise RowError(f"{where}: 'content' must be a string or a list of text parts, got "
                   f"{type(content).__name__}")


def _parse_tool_calls(raw: object, where: str, role: str) -> tuple[ToolCall, ...] | None:
    """Few-shot tool calls on an assistant message, in chat-completions shape."""
    if raw is None:
        return None
    if role != "assistant":
        raise RowError(f"{where}: only assistant messages carry 'tool_calls' (role is {role!r})")
    if not isinstance(raw, list):
        raise RowError(f"{where}: 'tool_calls' must be a list of "
                       '{"id", "type": "function", "function": {"name", "arguments"}}')
    calls = []
    for j, call in enumerate(raw):
        here = f"{where}.tool_calls[{j}]"
        fn = check_call(call, here)
        calls.append(ToolCall(id=call["id"], function=FunctionCall(
            name=fn["name"], arguments=_arguments(fn, here))))
    return tuple(calls)


def check_call(call: object, here: str) -> dict[str, Any]:
    """The ``function`` of one chat-completions tool call, once its shape is checked (``RowError``
    naming ``here`` otherwise)."""
    fn = call.get("function") if isinstance(call, dict) else None
    bad_type = isinstance(call, dict) and call.get("type", "function") != "function"
    if not isinstance(call, dict) or bad_type or not isinstance(fn, dict) or not isinstance(fn.get("name"), str) \
            or not fn["name"]:
        raise RowError(f"{here} must be "
                       '{"id", "type": "function", "function": {"name", "arguments"}}')
    if not isinstance(call.get("id"), str) or not call["id"]:
        raise RowError(f"{here} needs an 'id' (the tool message answering it repeats it "
                       "as 'tool_call_id')")
    return fn


def _arguments(fn: dict[str, object], where: str) -> str:
    """Arguments as a JSON string; an object written inline is encoded for the user."""
    args = fn.get("arguments", "{}")
    if isinstance(args, dict):
        return json.dumps(args)
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return args
    raise RowError(f"{where}.function.arguments must be a JSON object (or a string encoding "
                   f"one), got {args!r}")


def parse_tools(raw: object) -> tuple[dict[str, Any], ...]:
    """Function tool schemas, normalised to the completions shape (``RowError`` for a bad one)."""
    if not isinstance(raw, list):
        raise RowError("'tools' must be a list of function schemas "
                       '{"type": "function", "function": {"name", "description", "parameters"}}')
    tools = [normalise_tool_schema(t, f"tools[{i}]") for i, t in enumerate(raw)]
    names = [t["function"]["name"] for t in tools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise RowError(f"'tools' lists {dupes} more than once; keep one schema per tool")
    return tuple(tools)


def normalise_tool_schema(raw: object, where: str = "tool") -> dict[str, Any]:
    """A function schema in completions format; the flat Responses-API shape is converted.

    Completions: ``{"type": "function", "function": {"name", "description", "parameters"}}``.
    Responses:   ``{"type": "function", "name", "description", "parameters", "strict"?}``.
    Raises ``RowError`` (a ``ValueError``) when ``raw`` is neither.
    """
    usage = (f"{where} must be a function schema "
             '{"type": "function", "function": {"name", "description", "parameters"}}')
    if not isinstance(raw, dict) or raw.get("type", "function") != "function":
        raise RowError(usage + " (only function tools are supported)")
    if isinstance(raw.get("function"), dict):
        fn = dict(raw["function"])
    elif "name" in raw:
        fn = {k: v for k, v in raw.items() if k != "type"}
    else:
        raise RowError(usage)
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        raise RowError(f"{where} has no function 'name'; " + usage)
    if "parameters" in fn and not isinstance(fn["parameters"], dict):
        raise RowError(f"{where}: 'parameters' of {fn['name']!r} must be a JSON schema object")
    if "description" in fn and not isinstance(fn["description"], str):
        raise RowError(f"{where}: 'description' of {fn['name']!r} must be a string")
    return {"type": "function", "function": fn}


def check_task_tools(tasks: Iterable[Task], available: Collection[str] | None, path: str | Path) -> None:
    """Check that every tool a task names (in ``tools`` or ``tool_choice``) is one the job provides.

    ``available`` holds the tool names the job's tools expose (``name in available``; a toolbox's
    ``lookup`` also holds every name a ``serves`` entry answers, its iteration the declared
    ones), or is ``None`` when they are not known before the tools start (an MCP server): then
    there is nothing to check against yet.
    Raises ``DatasetError`` naming each offending task and tool and listing the available tools.
    """
    if available is None:
        return
    have = ", ".join(sorted(available)) or "(none: the job defines no tools)"
    errors = []
    for task in tasks:
        for name in _named_tools(task):
            if name not in available:
                errors.append(f"{path}: task {task.id!r} names tool {name!r}, which the job "
                              f"does not provide (available: {have}); add it to "
                              "method.reinforcement.tools (one entry with serves: \"*\" "
                              "answers every tool rows bring) or remove it from the row")
    if errors:
        raise DatasetError(_summarise(Path(path), errors))


def _named_tools(task: Task) -> list[str]:
    names = [t["function"]["name"] for t in task.tools or ()]
    choice = task.tool_choice
    if isinstance(choice, dict):
        function = choice.get("function")
        fn = function if isinstance(function, dict) else choice
        if isinstance(name := fn.get("name"), str):
            names.append(name)
    elif isinstance(choice, str) and choice not in ("auto", "none", "required"):
        names.append(choice)
    return list(dict.fromkeys(names))
