"""How tools are offered to the model: tool schemas in one shape, ``tool_choice`` parsed, and the
Hermes/Qwen-style tool block arft writes into the system message for templates that ignore
``tools=`` (the ``hermes`` family of ``arft.chat.formats``).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from arft.chat.toolcalls import format_tool_call, format_tool_responses
from arft.errors import ArftError

ToolChoice = str | dict[str, object] | None

HERMES_TOOL_BLOCK = """# Tools

You may call one or more functions to help with the user's request.

The functions you can call are listed within <tools></tools> XML tags, one JSON schema per line:
<tools>
{schemas}
</tools>

To call a function, write a JSON object with the function's name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>
You may write several <tool_call> blocks in one turn. The results come back in the next user \
message, one <tool_response></tool_response> block per call, in the same order. When you have \
what you need, answer the user without a tool call."""

WORKED_EXAMPLE = """# Example

The function {name} below only illustrates the format; it is not one of your functions.

user: What time is it in Paris and in Tokyo?
assistant:
{calls}
user:
{responses}
assistant: It is 09:30 in Paris and 16:30 in Tokyo."""


# ValueError too: the doctor's baseline (arft.app.doctor.run) reports a ValueError from the run it
# starts, a model whose chat format cannot render the job's tools among them.
class ChatFormatError(ArftError, ValueError):
    """A conversation, tool list or tool_choice the chat format cannot render; says what to do."""


def normalize_tool(tool: dict[str, object]) -> dict[str, Any]:
    """A function schema in chat-completions shape ``{"type": "function", "function": {...}}``."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        return tool
    if isinstance(tool.get("name"), str):
        return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
    raise ChatFormatError(
        f"tool schema {json.dumps(tool)[:120]} has no function name: write it as "
        '{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}'
    )


def tool_name(tool: dict[str, object]) -> str:
    """The function name of a tool schema (either shape)."""
    return str(normalize_tool(tool)["function"]["name"])


def parse_tool_choice(tool_choice: ToolChoice) -> tuple[str, str | None]:
    """``(kind, name)`` with kind in auto | none | required | named (name set only for named)."""
    if tool_choice is None or tool_choice == "auto":
        return "auto", None
    if tool_choice in ("none", "required"):
        return str(tool_choice), None
    if isinstance(tool_choice, str) and tool_choice:
        return "named", tool_choice
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool_choice.get("name")
        if isinstance(name, str) and name:
            return "named", name
    raise ChatFormatError(
        f"tool_choice {tool_choice!r} is not understood: use auto, none, required, a tool name, "
        'or {"type": "function", "function": {"name": ...}}'
    )


def hermes_tool_block(tools: Sequence[dict[str, object]], worked_example: bool = True) -> str:
    """The system-message text that lists ``tools`` and explains the ``<tool_call>`` format."""
    schemas = "\n".join(json.dumps(normalize_tool(t), ensure_ascii=False) for t in tools)
    block = HERMES_TOOL_BLOCK.format(schemas=schemas)
    if not worked_example:
        return block
    # A neutral tool that is not one of the task's, so the example never suggests real answers.
    taken = {tool_name(t) for t in tools}
    name = "get_time"
    while name in taken:
        name = "example_" + name
    calls = "\n".join(format_tool_call(name, {"city": c}) for c in ("Paris", "Tokyo"))
    responses = format_tool_responses(['{"city": "Paris", "time": "09:30"}',
                                       '{"city": "Tokyo", "time": "16:30"}'])
    return block + "\n\n" + WORKED_EXAMPLE.format(name=name, calls=calls, responses=responses)
