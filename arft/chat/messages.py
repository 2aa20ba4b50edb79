"""A conversation as the plain message dicts a chat template renders, for each family of
``arft.chat.formats``: ``template`` (OpenAI shape, calls as objects, for tool-aware templates) and
``hermes`` (role/content only: calls as ``<tool_call>`` text, results as one user message, the
tool block in the system message).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from arft.chat.tool_prompt import hermes_tool_block
from arft.chat.toolcalls import format_tool_call, format_tool_responses
from arft.records import Message


def assistant_text(message: Message) -> str:
    """An assistant message's content with its tool calls written as ``<tool_call>`` blocks.

    Same layout as Qwen's template: the content, then each call on its own lines.
    """
    parts = [message.content] if message.content else []
    parts += [format_tool_call(tc.function.name, tc.function.arguments)
              for tc in message.tool_calls or ()]
    return "\n".join(parts)


def hermes_messages(messages: Sequence[Message], listed: list[dict[str, object]],
                    worked_example: bool) -> list[dict[str, Any]]:
    """Plain role/content messages: calls as text, tool results as one user message."""
    dicts: list[dict[str, Any]] = []
    previous_was_tool = False
    for m in messages:
        if m.role == "tool":
            block = format_tool_responses([m.content or ""])
            if previous_was_tool:
                dicts[-1]["content"] += "\n" + block
            else:
                dicts.append({"role": "user", "content": block})
            previous_was_tool = True
            continue
        previous_was_tool = False
        role = "system" if m.role == "developer" else m.role
        content = assistant_text(m) if m.role == "assistant" else (m.content or "")
        dicts.append({"role": role, "content": content})
    if listed:
        # Our own system message also keeps templates from inserting their default one.
        block = hermes_tool_block(listed, worked_example)
        if dicts and dicts[0]["role"] == "system":
            system = dicts[0]["content"]
            merged = f"{system}\n\n{block}" if system else block
            dicts[0] = {"role": "system", "content": merged}
        else:
            dicts.insert(0, {"role": "system", "content": block})
    return dicts


def template_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """OpenAI-shape messages for a tool-aware template (arguments as objects)."""
    dicts = []
    for m in messages:
        d: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role,
                             "content": m.content or ""}
        if m.tool_calls:
            d["tool_calls"] = [{"id": tc.id, "type": "function", "function": {
                "name": tc.function.name, "arguments": _arguments_value(tc.function.arguments)}}
                for tc in m.tool_calls]
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        if m.name:
            d["name"] = m.name
        dicts.append(d)
    return dicts


def _arguments_value(arguments: str) -> Any:
    """Arguments as a dict for templates (``tojson`` of a string would double-encode it)."""
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments
