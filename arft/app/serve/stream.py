"""A streamed reply's deltas: ``StreamSplitter`` turns the growing text of one reply into
chat-completions ``delta`` objects that add up to the non-streamed message.

A delta is sent only for what can no longer change: content up to the first call, and a call
once it is closed (see ``StreamSplitter``). A call cut by ``max_tokens`` is dropped from the reply
(``arft.app.serve.chat.reply_message``), so it must never have been announced.
"""

from __future__ import annotations

import json
import re
from typing import Any

from arft.chat.toolcalls import END_OF_TURN_MARKERS, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, new_call_id

_NAME = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


class StreamSplitter:
    """Turns the growing text of one reply into chat-completions deltas.

    Content is streamed as it comes, up to the first ``<tool_call>``, holding back what might be
    the start of a marker (``<tool_c``, ``<|im_e``) and trailing whitespace (a reply's content is
    stripped). With ``early_names`` (a constrained turn: every call the grammar opened will be a
    valid call of a real tool) a call's id and name are sent as soon as the call is closed (not
    when its name is written: a call that ``max_tokens`` cuts is dropped from the reply, and a
    client must not have seen it); its arguments (and any later call, and content after the
    calls) are sent by ``finish`` from the parsed reply, so the deltas always add up to the
    non-streamed message.
    """

    def __init__(self, prefill: str, early_names: bool) -> None:
        self.prefill = prefill
        self.early_names = early_names
        self.sent = ""
        self.call_ids: list[str] = []
        self._names: list[str] = []
        self._markers = (TOOL_CALL_OPEN, *END_OF_TURN_MARKERS)

    def feed(self, sampled_text: str) -> list[dict[str, Any]]:
        """Deltas for what became certain in ``prefill + sampled_text``."""
        text = self.prefill + sampled_text
        opened = text.find(TOOL_CALL_OPEN)
        zone = text if opened < 0 else text[:opened]
        ends = [i for i in (zone.find(m) for m in END_OF_TURN_MARKERS) if i >= 0]
        if ends:
            zone = zone[:min(ends)]
        elif opened < 0:  # still growing: hold back what may become a marker
            zone = zone[: len(zone) - self._partial_marker(zone)]
        content = zone.strip()  # leading whitespace never counts; trailing waits for more text
        deltas = []
        if content.startswith(self.sent) and len(content) > len(self.sent):
            deltas.append({"content": content[len(self.sent):]})
            self.sent = content
        if self.early_names and opened >= 0:
            deltas += self._announce(text)
        return deltas

    def _partial_marker(self, zone: str) -> int:
        """Length of the longest end of ``zone`` that starts a marker."""
        for n in range(min(len(zone), max(map(len, self._markers))), 0, -1):
            if any(m.startswith(zone[-n:]) for m in self._markers):
                return n
        return 0

    def _announce(self, text: str) -> list[dict[str, Any]]:
        deltas = []
        blocks = text.split(TOOL_CALL_OPEN)[1:]
        for i, block in enumerate(blocks):
            if i < len(self._names):
                continue
            name = _closed_call_name(block)
            if name is None:
                break
            self._names.append(name)
            self.call_ids.append(new_call_id())
            deltas.append({"tool_calls": [{"index": i, "id": self.call_ids[i], "type": "function",
                                           "function": {"name": name, "arguments": ""}}]})
        return deltas

    def finish(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """The deltas that complete ``message`` (the parsed reply) after what was streamed."""
        deltas: list[dict[str, Any]] = []
        for i, call in enumerate(message.get("tool_calls") or ()):
            fn = call["function"]
            if i < len(self._names):
                deltas.append({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
            else:
                deltas.append({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                               "function": {"name": fn["name"], "arguments": fn["arguments"]}}]})
        content = message.get("content") or ""
        if content.startswith(self.sent) and len(content) > len(self.sent):
            deltas.insert(0, {"content": content[len(self.sent):]})
        return deltas


def _closed_call_name(block: str) -> str | None:
    """The name of the call that ``block`` (the text after a call's open marker) holds, once its
    JSON is whole and its close marker written; None before."""
    match = _NAME.match(block)
    if match is None:
        return None
    try:  # a close marker inside an argument's string is not the call's close
        end = json.JSONDecoder().raw_decode(block, len(block) - len(block.lstrip()))[1]
    except ValueError:
        return None
    if not block[end:].lstrip().startswith(TOOL_CALL_CLOSE):
        return None
    return str(json.loads(f'"{match.group(1)}"'))
