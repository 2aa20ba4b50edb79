"""Lockstep rollouts (``rollout.schedule: lockstep``): the turns of all rollouts in flight start
together, so what the engine computes does not depend on how long anything else took.

With continuous batching (the default) a rollout's next turn joins the engine's batch the moment
its tools answer, so which rows share a prefill or a decode step, and with them the last bits of
every logit, depend on tool latency and on the machine's load. A replayed run (a tool cassette
answers at once) then samples a near-tied token differently now and then, and training compounds
the difference. In lockstep the rollouts of one ``run_many`` move in rounds:

- a round starts when every rollout holding a seat waits for the engine (or has ended): their
  calls go to the engine as one admission, in the rollouts' order (task, then sample);
- the next round waits until every rollout of this one is back: its tools run, it is graded or
  it waits again;
- a rollout that ends gives its seat (``rollout.concurrency`` of them) to the next one in order at
  that moment, before any round can start without it.

Which calls share a round is then decided by the tokens and the tool outputs alone. On an engine
that takes a round as one admission (``SubmitsTogether``: the transformers engine) its forward
passes are the same in a live run and in its replay, bit for bit; on others (vLLM) the calls go
out in order, but the server batches them as they come.

The price: a round waits for its slowest tool call and grade, where continuous batching keeps
decoding meanwhile. Use it for runs that must be reproduced exactly.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Sequence

from arft.engines.base import GenerateCall, Generation, SamplingParams, SubmitsTogether, TokenEngine
from arft.engines.base import supports_constraints as engine_constrains


@dataclass
class _Seat:
    """A rollout holding a seat: busy (``call`` is None) or waiting for the next round."""

    index: int
    call: GenerateCall | None = None
    answer: asyncio.Future[asyncio.Future[Generation]] | None = None
    """Set when the round starts: the engine's future for ``call``."""


class Lockstep:
    """The rounds of one ``run_many``: ``rollouts`` rollouts, at most ``seats`` at once, each
    entering with ``seat(index)`` (index = its place in the task x sample order)."""

    def __init__(self, engine: TokenEngine, seats: int, rollouts: int) -> None:
        self.engine = engine
        self._seated: dict[int, _Seat] = {}
        self._admitted: dict[int, asyncio.Event] = {i: asyncio.Event() for i in range(rollouts)}
        self._queue = collections.deque(range(rollouts))
        self.rounds = 0
        """Rounds started so far (each one admission to the engine)."""
        for _ in range(min(seats, rollouts)):  # seated now, so no round starts before they wait
            self._admit_next()

    @asynccontextmanager
    async def seat(self, index: int) -> AsyncIterator[TokenEngine]:
        """Wait for rollout ``index``'s seat; yields the engine it generates with (its calls
        wait for their round). Leaving gives the seat to the next rollout in order."""
        try:
            await self._admitted[index].wait()
        except asyncio.CancelledError:
            self._leave(index)
            raise
        try:
            yield _SeatEngine(self, index)
        finally:
            self._leave(index)

    def _leave(self, index: int) -> None:
        if index in self._queue:  # cancelled before its seat came
            self._queue.remove(index)
            return
        self._seated.pop(index, None)
        self._admit_next()  # before any round can start without the newcomer
        self._start_round_if_ready()

    def _admit_next(self) -> None:
        if self._queue:
            index = self._queue.popleft()
            self._seated[index] = _Seat(index)
            self._admitted[index].set()

    async def generate(self, index: int, call: GenerateCall) -> Generation:
        """Rollout ``index``'s ``call``, sent to the engine with the next round (its seat engine's
        ``generate``)."""
        seat = self._seated[index]
        answer: asyncio.Future[asyncio.Future[Generation]] = asyncio.get_running_loop().create_future()
        seat.call, seat.answer = call, answer
        self._start_round_if_ready()
        try:
            pending = await answer
        except asyncio.CancelledError:  # gave up before its round: the round goes on without it
            seat.call = seat.answer = None
            self._start_round_if_ready()
            raise
        return await pending

    def _start_round_if_ready(self) -> None:
        seats = sorted(self._seated.values(), key=lambda s: s.index)
        if not seats or any(s.call is None for s in seats):
            return  # someone is still busy (or nobody is left)
        calls: list[GenerateCall] = []
        answers: list[asyncio.Future[asyncio.Future[Generation]]] = []
        for s in seats:
            if s.call is not None and s.answer is not None and not s.answer.done():  # not cancelled
                calls.append(s.call)
                answers.append(s.answer)
            s.call = s.answer = None
        if not calls:
            return
        self.rounds += 1
        try:
            futures = self._submit(calls)
        except Exception as e:  # noqa: BLE001 - every caller of the round gets the engine's error
            for answer in answers:
                if not answer.done():
                    answer.set_exception(e)
            return
        for answer, future in zip(answers, futures):
            if not answer.done():
                answer.set_result(future)

    def _submit(self, calls: Sequence[GenerateCall]) -> list[asyncio.Future[Generation]]:
        if isinstance(self.engine, SubmitsTogether):
            return self.engine.submit_together(calls)
        return [asyncio.ensure_future(self.engine.generate(c.prompt_ids, c.params)) for c in calls]


class _SeatEngine:
    """The engine as one seated rollout sees it: ``generate`` waits for the round."""

    def __init__(self, lockstep: Lockstep, index: int) -> None:
        self._lockstep, self._index = lockstep, index
        inner = lockstep.engine
        self.tokenizer: Any = inner.tokenizer
        self.supports_constraints = engine_constrains(inner)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        return await self._lockstep.generate(self._index, GenerateCall(prompt_ids, params))

    async def aclose(self) -> None:
        """Nothing: the engine belongs to the run, not to one rollout."""
