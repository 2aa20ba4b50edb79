"""Async rollouts: the batches of later steps are generated while earlier steps update.

``Ahead`` runs one producer task that generates the batch of step ``s`` as soon as the engine's
weights are at least those of step ``s - 1 - max_off_policy_steps`` (the update of step ``s``
starts from the weights of step ``s - 1``), and hands the batches to the trainer in step order.
The trainer reports each new weights version (``advanced``) after it synced the engine. With a
bound of 0 the producer waits for every update, which is the synchronous loop.

The producer never runs further ahead than the bound, so a batch is stale only if the trainer
is handed one out of order; ``fresh`` still checks every batch against the bound and drops (and
counts) the rollouts older than it rather than learn from them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from arft.records import Rollout

T = TypeVar("T")


@dataclass
class Generated(Generic[T]):
    """One step's rollouts, the weights version they were sampled from, and how long it took."""

    step: int
    """The step whose update learns from these rollouts (1-based)."""
    version: int
    """The engine's weights when generation began: those after this many updates."""
    rollouts: list[Rollout]
    seconds: float
    cursor: T
    """The data cursor after this step's batch (what a checkpoint of this step saves)."""

    def off_policy_steps(self) -> int:
        """How many updates older than the update's starting weights the sampler was."""
        return self.step - 1 - self.version


def fresh(batch: Generated[T], bound: int) -> tuple[list[Rollout], int]:
    """The rollouts of ``batch`` within ``bound`` off-policy steps, and how many were dropped."""
    if batch.off_policy_steps() > bound:
        return [], len(batch.rollouts)
    return batch.rollouts, 0


class Ahead(Generic[T]):
    """Generates the batches of steps ``start.step + 1 .. total`` up to ``bound`` steps ahead.

    ``generate(cursor, version)`` makes the batch after ``cursor`` from weights ``version``.
    Use as an async context manager: leaving it cancels a generation under way.
    """

    def __init__(self, generate: Callable[[T, int], Awaitable[Generated[T]]], start: T,
                 start_step: int, total: int, bound: int, step_of: Callable[[T], int]) -> None:
        self._generate, self._step_of = generate, step_of
        self._cursor, self._total, self._bound = start, total, bound
        self.version = start_step
        self._changed = asyncio.Condition()
        self._ready: asyncio.Queue[Generated[T]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "Ahead[T]":
        self._task = asyncio.create_task(self._produce(), name="arft-rollouts-ahead")
        return self

    async def __aexit__(self, *exc: object) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif not task.cancelled():
            task.exception()  # already raised by next(), or the trainer stopped for its own error

    async def _produce(self) -> None:
        cursor = self._cursor
        while self._step_of(cursor) < self._total:
            step = self._step_of(cursor) + 1
            async with self._changed:  # the weights this step may be sampled from, at the oldest
                # awaited here, so the lambda sees this iteration's step
                await self._changed.wait_for(lambda: self.version >= step - 1 - self._bound)  # noqa: B023
                version = self.version
            batch = await self._generate(cursor, version)
            await self._ready.put(batch)
            cursor = batch.cursor

    async def next(self) -> Generated[T]:
        """The next step's batch (waits for it); the producer's error if it failed."""
        assert self._task is not None, "use Ahead as an async context manager"
        if self._ready.empty() and self._task.done():
            self._task.result()  # raises the producer's error
            raise RuntimeError("no batch left: every step's batch was taken already")
        get = asyncio.ensure_future(self._ready.get())
        try:
            await asyncio.wait({get, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not get.done():
                get.cancel()
        if get.done() and not get.cancelled():
            return get.result()
        self._task.result()
        raise RuntimeError("the rollout producer stopped without a batch for the next step")

    async def advanced(self, version: int) -> None:
        """The engine now samples from the weights after ``version`` updates."""
        async with self._changed:
            self.version = version
            self._changed.notify_all()
