"""Read logged chat-completions traffic (JSONL) into episode starts and whole conversations.

Three shapes are accepted, detected line by line:

1. A logged call ``{"request": {...}, "response": {...}, "metadata"?: {...}}``: ``request`` is a
   chat-completions request (``messages``, ``tools``, ``tool_choice``, ``model``, ...) and
   ``response`` a chat-completions response (``choices[0].message``) or the bare assistant
   message. Other top-level keys are the logger's own (pick them with ``--item``).
2. A chat-completions request ``{"messages": [...], "tools"?, ...}`` whose messages do not end
   with an assistant message (no demonstration). An arft dataset row is this shape plus item keys.
3. The hosted fine-tuning chat format: the same, with messages ending in assistant message(s).

For shapes 2 and 3 the keys that are neither chat fields nor request parameters
(``REQUEST_PARAMS``) are item keys, as in a dataset row. A record's *prompt* (the RL task) is its
messages before the first assistant message; its *conversation* (the demonstration) is every
message, the response included. Content parts are flattened, legacy ``functions`` /
``function_call`` are converted to tools and tool calls, tool-call arguments become JSON strings.
A bad line is reported as ``file:line: reason`` and skipped; the other lines are still read.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from arft.data.dataset import (DatasetError, ROLES, RowError, TOO_DEEP, TrafficImportError, _parse_content,
                               parse_tools, check_call, _summarise, _task_id)
from arft.data.redact import Redactor
from arft.records import Message, Task

PROMPT_ROLES = frozenset({"system", "developer", "user"})
MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name", "function_call"})
CHAT_KEYS = frozenset({"messages", "tools", "tool_choice", "functions", "function_call"})
REQUEST_PARAMS = frozenset({
    "model", "temperature", "max_tokens", "max_completion_tokens", "top_p", "stream",
    "stream_options", "n", "seed", "user", "parallel_tool_calls", "response_format", "stop",
    "frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "top_logprobs",
    "reasoning_effort", "service_tier", "store", "modalities", "prediction", "audio",
    "web_search_options", "verbosity", "prompt_cache_key", "safety_identifier"})
"""Chat-completions request parameters: never item keys of a shape-2/3 line."""
RESERVED_ITEM_KEYS = ("id", "messages", "tools", "tool_choice")
SHAPES = ('{"request": {...}, "response": {...}}, a chat-completions request {"messages": [...]} '
          'or a fine-tuning row {"messages": [..., assistant]}')
PROGRESS_EVERY = 2000
TOOLS_CACHED = 8

ItemPath = tuple[str, str, tuple[str, ...]]
"""(item key, the path as written, its dotted parts)."""


@dataclass(slots=True)
class TrafficRecord:
    """One valid line: the episode's start, the whole logged conversation, tools and item."""

    line: int
    prompt: list[dict[str, Any]]
    """The messages before the first assistant message (chat-completions dicts)."""
    conversation: list[dict[str, Any]] | None
    """Every message, the response included; None for a request without an answer (shape 2)."""
    tools: list[dict[str, Any]] | None
    """Completions-format function schemas offered; None when the request offered none."""
    tool_choice: str | dict[str, Any] | None
    """Kept only when it was not ``auto``."""
    item: dict[str, Any]
    parallel_tool_calls: bool | None = None
    """``False`` when the request turned parallel calls off; else None (the default)."""
    source_id: str | None = None
    """A shape-2/3 line's own ``id`` (a dataset row's task id)."""


@dataclass
class TrafficLog:
    """What a traffic file holds: the valid records in file order and every bad line."""

    path: Path
    records: list[TrafficRecord]
    errors: list[str]
    """``file:line: reason`` for every line that was skipped."""
    lines: int
    """Non-blank lines read."""
    dropped_keys: Counter[str] = field(default_factory=Counter)
    """Non-empty message keys no chat message can hold (``reasoning_content``, ...), by key."""


@dataclass
class _Reader:
    """Per-file state shared by the line parsers."""

    items: list[ItemPath]
    item_optional: bool
    redactor: Redactor | None
    dropped: Counter[str] = field(default_factory=Counter)
    tools_cache: list[tuple[Any, list[dict[str, Any]]]] = field(default_factory=list)
    strings: dict[str, str] = field(default_factory=dict)


def parse_item_paths(specs: Sequence[str]) -> list[ItemPath]:
    """``KEY=PATH`` options (``answer=metadata.expected``); ``TrafficImportError`` for a bad one."""
    out = []
    for spec in specs:
        key, sep, path = spec.partition("=")
        key, path = key.strip(), path.strip()
        if not sep or not key or not path:
            raise TrafficImportError(f"--item {spec!r}: write it as KEY=PATH, e.g. answer=metadata.expected")
        if key in RESERVED_ITEM_KEYS:
            raise TrafficImportError(f"--item {spec!r}: {key!r} is a row field, not an item key; pick "
                                     "another name (e.g. reference)")
        out.append((key, path, tuple(path.split("."))))
    return out


def read_traffic(path: str | Path, *, item_paths: Sequence[str] = (), item_optional: bool = False,
                 redactor: Redactor | None = None,
                 on_progress: Callable[[int, int], None] | None = None) -> TrafficLog:
    """Every record of the JSONL traffic file at ``path`` (bad lines in ``errors``).

    ``item_paths`` (``KEY=PATH``) copy values of each line into its item; a line without the path
    is a bad line unless ``item_optional``. ``redactor`` is applied to every kept string.
    ``on_progress(bytes_read, total_bytes)`` is called every few thousand lines.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: traffic file not found; give a JSONL file of logged "
                           "requests (one JSON object a line)")
    reader = _Reader(parse_item_paths(item_paths), item_optional, redactor)
    log = TrafficLog(path=path, records=[], errors=[], lines=0, dropped_keys=reader.dropped)
    total, done = path.stat().st_size, 0
    with path.open("rb") as f:
        for lineno, line in enumerate(f, start=1):
            done += len(line)
            if on_progress is not None and lineno % PROGRESS_EVERY == 0:
                on_progress(done, total)
            if not line.strip():
                continue
            log.lines += 1
            try:
                log.records.append(_parse_line(line, lineno, reader))
            except RowError as e:
                log.errors.append(f"{path}:{lineno}: {e}")
    if on_progress is not None:
        on_progress(done, total)
    return log


def _parse_line(line: bytes, lineno: int, reader: _Reader) -> TrafficRecord:
    try:
        obj = json.loads(line)
    except UnicodeDecodeError:
        raise RowError("not UTF-8 text; save the log as UTF-8") from None
    except json.JSONDecodeError as e:
        text = line.decode("utf-8", "replace").rstrip()
        where = "the end of the line" if e.pos >= len(text) else f"column {e.pos + 1}"
        raise RowError(f"not valid JSON ({e.msg} at {where}); each line must be one JSON "
                       "object") from None
    except RecursionError:
        raise RowError(TOO_DEEP) from None
    if not isinstance(obj, dict):
        raise RowError(f"a line must be a JSON object, got {type(obj).__name__}; write {SHAPES}")
    source_id = None
    if "request" in obj:  # the logger's own keys are no item keys (pick them with --item)
        (request, reply), extras = _logged_call(obj), {}
    elif "messages" in obj:
        request, reply = obj, None
        extras = {k: v for k, v in obj.items() if k not in CHAT_KEYS and k not in REQUEST_PARAMS}
        if "id" in obj:  # a dataset row's task id (it stays in the item, as load_tasks keeps it)
            source_id = _task_id(obj, lineno, "")
    else:
        raise RowError(f"unknown shape (keys {sorted(obj)[:8]}); write {SHAPES}")
    legacy: dict[str, str] = {}  # the id given to the last legacy function_call
    messages = _messages(request.get("messages"), reader, legacy)
    if reply is not None:
        messages.append(_message(reply, "response message", reader, legacy))
    prompt, conversation = _split(messages, reply is not None)
    item = {k: (reader.redactor.value(v) if reader.redactor else v) for k, v in extras.items()}
    item.update(_items(obj, reader))
    tools, choice = _tools(request, reader)
    parallel = request.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RowError(f"'parallel_tool_calls' must be true or false, got {json.dumps(parallel)[:40]}")
    return TrafficRecord(line=lineno, prompt=prompt, conversation=conversation, tools=tools,
                         tool_choice=choice, item=item, source_id=source_id,
                         parallel_tool_calls=False if parallel is False else None)


def _logged_call(obj: dict[str, object]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(request, the assistant's reply or None) of a logged request/response."""
    request, response = obj["request"], obj.get("response")
    if not isinstance(request, dict) or "messages" not in request:
        raise RowError("'request' must be a chat-completions request object with 'messages'")
    if response is None:
        return request, None
    if isinstance(response, dict) and isinstance(response.get("choices"), list):
        choices = response["choices"]
        message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            raise RowError("'response.choices[0].message' is missing; log the whole "
                           "chat-completions response (or just its assistant message)")
        if message.get("role", "assistant") != "assistant":
            raise RowError(f"'response.choices[0].message' has role {message['role']!r}, not "
                           "'assistant'")
        return request, {**message, "role": "assistant"}
    if isinstance(response, dict) and response.get("role") == "assistant":
        return request, response
    raise RowError("'response' must be a chat-completions response ({\"choices\": [{\"message\": "
                   "...}]}) or an assistant message ({\"role\": \"assistant\", ...})")


def _split(messages: list[dict[str, object]], answered: bool
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(prompt, conversation): the messages before the first assistant one, and all of them
    when the line holds an answer (a response, or messages ending with the assistant's)."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    prompt = messages[:first]
    if not prompt:
        raise RowError("no system or user message before the first assistant message; the "
                       "conversation must start with the request")
    for i, m in enumerate(prompt):
        if m["role"] not in PROMPT_ROLES:
            raise RowError(f"messages[{i}] is a {m['role']} message before any assistant "
                           "message; a tool result must answer an assistant tool call")
    if answered or messages[-1]["role"] == "assistant":
        return prompt, messages
    return prompt, None


def _messages(raw: object, reader: _Reader, legacy: dict[str, str]) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise RowError("'messages' must be a non-empty list of chat messages")
    return [_message(m, f"messages[{i}]", reader, legacy) for i, m in enumerate(raw)]


def _message(raw: object, where: str, reader: _Reader, legacy: dict[str, str]) -> dict[str, Any]:
    """One message as a chat-completions dict: content a string, arguments JSON strings."""
    if not isinstance(raw, dict):
        raise RowError(f"{where} must be an object with 'role' and 'content'")
    role = raw.get("role")
    if role not in ROLES and role != "function":
        got = "no 'role'" if role is None else f"role {role!r}"
        raise RowError(f"{where} has {got}; use one of {list(ROLES)}")
    for key in raw.keys() - MESSAGE_KEYS:
        if raw[key] not in (None, "", [], {}):
            reader.dropped[key] += 1
    out: dict[str, Any] = {"role": role}
    calls = _tool_calls(raw, where, reader, legacy) if role == "assistant" else None
    content = _parse_content(raw, where, has_calls=bool(calls))
    if content is not None:
        out["content"] = _text(content, role, reader)
    if calls:
        out["tool_calls"] = calls
    if role == "function":  # legacy: the answer to the last function_call
        if "id" not in legacy:
            raise RowError(f"{where} is a 'function' message without a function_call before it")
        out["role"], out["tool_call_id"] = "tool", legacy["id"]
    elif role == "tool":
        if not isinstance(raw.get("tool_call_id"), str) or not raw["tool_call_id"]:
            raise RowError(f"{where} is a tool message without 'tool_call_id'")
        out["tool_call_id"] = raw["tool_call_id"]
    if raw.get("name") is not None:
        if not isinstance(raw["name"], str):
            raise RowError(f"{where}: 'name' must be a string")
        out["name"] = raw["name"]
    return out


def _text(content: str, role: str, reader: _Reader) -> str:
    if reader.redactor is not None:
        content = reader.redactor(content)
    if role in ("system", "developer"):  # one string object for a prompt shared by every line
        content = reader.strings.setdefault(content, content)
    return content


def _tool_calls(raw: dict[str, object], where: str, reader: _Reader,
                legacy: dict[str, str]) -> list[dict[str, Any]] | None:
    calls = raw.get("tool_calls")
    if calls is None and isinstance(raw.get("function_call"), dict):
        legacy["n"] = str(int(legacy.get("n", "0")) + 1)
        legacy["id"] = f"call_legacy_{legacy['n']}"
        calls = [{"id": legacy["id"], "type": "function", "function": raw["function_call"]}]
    if calls is None:
        return None
    if not isinstance(calls, list):
        raise RowError(f"{where}: 'tool_calls' must be a list of "
                       '{"id", "type": "function", "function": {"name", "arguments"}}')
    out = []
    for j, call in enumerate(calls):
        here = f"{where}.tool_calls[{j}]"
        fn = check_call(call, here)
        out.append({"id": call["id"], "type": "function", "function": {
            "name": fn["name"], "arguments": _arguments(fn.get("arguments"), here, reader)}})
    return out


def _arguments(args: object, where: str, reader: _Reader) -> str:
    """A JSON string of an object; string values redacted (the string re-encoded only then)."""
    if args is None or args == "":
        args = "{}"  # some servers log a call without arguments as ""
    parsed = args
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError as e:
            raise RowError(f"{where}.function.arguments is not valid JSON ({e.msg}): "
                           f"{args[:80]!r}") from None
    if not isinstance(parsed, dict):
        raise RowError(f"{where}.function.arguments must be a JSON object, got {args!r:.80}")
    if reader.redactor is not None:
        before = reader.redactor.count
        parsed = reader.redactor.value(parsed)
        if reader.redactor.count != before:
            return json.dumps(parsed, ensure_ascii=False)
    return args if isinstance(args, str) else json.dumps(parsed, ensure_ascii=False)


def _tools(request: dict[str, object], reader: _Reader
           ) -> tuple[list[dict[str, Any]] | None, str | dict[str, Any] | None]:
    """The offered tools (``tools`` or legacy ``functions``) and a tool_choice other than auto."""
    raw = request.get("tools")
    if raw is None and request.get("functions") is not None:
        fns = request["functions"]
        raw = [{"type": "function", "function": f} for f in fns] if isinstance(fns, list) else fns
    tools = None
    if raw is not None:  # lines of one application repeat a few tool lists: parse each once
        tools = next((parsed for seen, parsed in reader.tools_cache if seen == raw), None)
        if tools is None:
            tools = list(parse_tools(raw))
            reader.tools_cache.insert(0, (raw, tools))
            del reader.tools_cache[TOOLS_CACHED:]
    choice = request.get("tool_choice", request.get("function_call"))
    if isinstance(choice, dict) and "type" not in choice and isinstance(choice.get("name"), str):
        choice = {"type": "function", "function": {"name": choice["name"]}}  # legacy
    if choice is not None and not isinstance(choice, (str, dict)):
        raise RowError("'tool_choice' must be a string (auto, none, required) or "
                       '{"type": "function", "function": {"name": ...}}')
    return tools, None if choice == "auto" else choice


def _items(obj: dict[str, object], reader: _Reader) -> dict[str, Any]:
    """The ``--item KEY=PATH`` values of one line (redacted)."""
    out: dict[str, Any] = {}
    for key, path, parts in reader.items:
        value: Any = obj
        for depth, part in enumerate(parts):
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif (isinstance(value, list) and part.isdecimal() and len(part) < 19  # int() takes it
                  and int(part) < len(value)):
                value = value[int(part)]
            else:
                if reader.item_optional:
                    break
                at = ".".join(parts[:depth]) or "the line"
                raise RowError(f"--item {key}={path}: {at} has no {part!r} (pass "
                               "--item-optional to import such lines without the key)")
        else:
            out[key] = reader.redactor.value(value) if reader.redactor else value
    return out


def canonical(messages: list[dict[str, object]]) -> str:
    """The canonical JSON of a message list: what makes two episode starts the same."""
    return json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def traffic_tasks(path: str | Path) -> list[Task]:
    """The tasks of a traffic file (any shape above, dataset rows included), for the doctor.

    A line with its own ``id`` is one task (a dataset row); lines without one that share an
    episode start are the turns of one session and make one task (``file:line`` of the first).
    Raises ``DatasetError`` listing every bad line, duplicate ids, or a file without rows.
    """
    path = Path(path)
    log = read_traffic(path)
    errors = list(log.errors)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for rec in log.records:
        key = rec.source_id if rec.source_id is not None else canonical(rec.prompt)
        if key in seen:
            if rec.source_id is not None:
                errors.append(f"{path}:{rec.line}: duplicate task id {key!r} (also on line "
                              f"{seen[key]}); give every row a unique 'id'")
            continue
        seen[key] = rec.line
        tid = rec.source_id if rec.source_id is not None else f"{path.stem}:{rec.line}"
        tasks.append(Task(id=tid, messages=tuple(Message(**m) for m in rec.prompt),
                          tools=tuple(rec.tools) if rec.tools is not None else None,
                          tool_choice=rec.tool_choice, item=rec.item))
    if errors:
        raise DatasetError(_summarise(path, errors))
    if not tasks:
        raise DatasetError(f"{path}: the traffic file has no rows; write one logged request "
                           "a line")
    return tasks
