"""What every HTTP client of arft shares (endpoint tools, the endpoint grader, OpenAI-compatible
engines and judges): one keep-alive client per event loop, the retry policy and its backoff."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

RETRYABLE_4XX = frozenset({408, 429})
"""Request timeout and rate limited mean "not now", not "bad request": retried like a 5xx."""


def backoff_delay(backoff_s: float, retry: int, cap_s: float = 30.0) -> float:
    """Seconds to wait before retry number ``retry`` (1-based): ``backoff_s`` doubling, capped."""
    return min(backoff_s * 2 ** (retry - 1), cap_s)


class LoopClient:
    """A pooled ``httpx.AsyncClient`` for the running event loop.

    Connections belong to the loop that opened them: on another loop (a second ``asyncio.run``)
    a fresh client is made and the old one is dropped, since it can be neither reused nor closed
    from there.
    """

    def __init__(self, **client_kwargs: Any) -> None:
        self._kwargs = client_kwargs
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            self._client, self._loop = httpx.AsyncClient(**self._kwargs), loop
        return self._client

    async def aclose(self) -> None:
        """Close the pooled connections (safe to call twice, and from another loop)."""
        client, loop, self._client, self._loop = self._client, self._loop, None, None
        if client is not None and not client.is_closed and loop is asyncio.get_running_loop():
            await client.aclose()
