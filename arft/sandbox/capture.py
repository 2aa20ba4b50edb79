"""Bounded capture of a sandboxed command's output: the head and tail are kept, the rest counted.

A command that floods stdout must not fill the trainer's memory, and what a model or a grader
needs to see is usually the start (the command's first complaint) and the end (the summary).
"""

from __future__ import annotations

import asyncio

READ_CHUNK = 1 << 16


class OutputCapture:
    """Keeps the head and tail of a byte stream within a character budget; counts the rest."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.keep = 4 * max_chars  # bytes: enough for max_chars of any UTF-8 text
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    async def consume(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(READ_CHUNK):
            self.feed(chunk)

    def text(self) -> tuple[str, bool]:
        """The kept text (with a truncation marker when some was dropped) and whether it was."""
        if self.total == len(self.head) + len(self.tail):
            whole = (self.head + self.tail).decode(errors="replace")
            if len(whole) <= self.max_chars:
                return whole, False
            head, tail = whole, whole
        else:
            head = self.head.decode(errors="replace")
            # The tail may start inside a multi-byte character: skip continuation bytes.
            tail = bytes(self.tail).lstrip(bytes(range(0x80, 0xC0))).decode(errors="replace")
        n_head = self.max_chars // 2
        n_tail = self.max_chars - n_head
        shown_tail = tail[-n_tail:] if n_tail else ""
        marker = (f"\n[... output truncated: {self.total} bytes in all; showing the first "
                  f"{n_head} and the last {len(shown_tail)} characters ...]\n")
        return head[:n_head] + marker + shown_tail, True
