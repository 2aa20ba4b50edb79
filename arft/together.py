"""Run awaitables at once, all or nothing: what ``asyncio.gather`` does, minus its leftovers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def together(*work: Awaitable[Any]) -> list[Any]:
    """The results of ``work``, run concurrently, in the order given.

    A ``TaskGroup``, not ``gather``: when one raises, the others are cancelled instead of running
    on (and writing to a store the caller is about to close). The caller sees that first error
    itself, as with ``gather``, not an ``ExceptionGroup``.
    """
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(_awaited(w)) for w in work]
    except BaseExceptionGroup as errors:
        raise errors.exceptions[0] from None
    return [task.result() for task in tasks]


async def _awaited(w: Awaitable[object]) -> Any:
    return await w
