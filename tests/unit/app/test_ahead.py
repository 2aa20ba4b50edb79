"""Async rollouts' producer: how far it runs ahead of the updates, errors, stale batches."""

from __future__ import annotations

import asyncio

import pytest

from arft.app.ahead import Ahead, Generated, fresh
from arft.records import Rollout


def batch(step: int, version: int, n: int = 2) -> Generated[int]:
    return Generated(step, version, [Rollout(trace_id=f"r{i}", task_id=f"t{i}", messages=[]) for i in range(n)], 0.0, step)


async def run_ahead(bound: int, total: int = 4) -> list[tuple[str, int, int]]:
    """(event, step, version) in order: generation starts and updates, three ticks per update."""
    events: list[tuple[str, int, int]] = []

    async def generate(cursor: int, version: int) -> Generated[int]:
        events.append(("generate", cursor + 1, version))
        await asyncio.sleep(0)
        return batch(cursor + 1, version)

    async with Ahead(generate, 0, 0, total, bound, lambda c: c) as ahead:
        step = 0
        while step < total:
            got = await ahead.next()
            assert got.step == step + 1  # in step order
            events.append(("update", got.step, got.version))
            for _ in range(3):  # an update takes a while; the producer may run meanwhile
                await asyncio.sleep(0)
            step = got.step
            await ahead.advanced(step)
    return events


async def test_bound_zero_waits_for_every_update() -> None:
    events = await run_ahead(0)
    assert [e for e in events if e[0] == "generate"] == [("generate", s, s - 1) for s in (1, 2, 3, 4)]
    for s in (2, 3, 4):  # step s is generated only once update s-1 is done
        assert events.index(("update", s - 1, s - 2)) < events.index(("generate", s, s - 1))


@pytest.mark.parametrize("bound", [1, 2])
async def test_generation_runs_ahead_of_the_updates_within_the_bound(bound: int) -> None:
    events = await run_ahead(bound)
    generated = [e for e in events if e[0] == "generate"]
    assert [s for _, s, _ in generated] == [1, 2, 3, 4]
    for _, step, version in generated:
        assert step - 1 - version <= bound  # never older than the bound
    # the next step starts before the update of this one: generation overlaps the update
    assert events.index(("generate", 2, 0)) < events.index(("update", 1, 0))
    assert max(step - 1 - version for _, step, version in generated) == bound


async def test_a_producer_error_reaches_the_trainer() -> None:
    async def generate(cursor: int, version: int) -> Generated[int]:
        if cursor == 1:
            raise ValueError("the grader server is down")
        return batch(cursor + 1, version)

    async with Ahead(generate, 0, 0, 3, 1, lambda c: c) as ahead:
        assert (await ahead.next()).step == 1
        with pytest.raises(ValueError, match="grader server is down"):
            await ahead.next()


async def test_leaving_cancels_a_generation_under_way() -> None:
    started, cancelled = asyncio.Event(), []

    async def generate(cursor: int, version: int) -> Generated[int]:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(cursor)
            raise
        return batch(cursor + 1, version)

    async with Ahead(generate, 0, 0, 3, 1, lambda c: c):
        await started.wait()
    assert cancelled == [0]


def test_a_batch_older_than_the_bound_is_dropped_and_counted() -> None:
    assert fresh(batch(3, 1), 1) == (batch(3, 1).rollouts, 0)  # one step behind, bound 1
    kept, dropped = fresh(batch(4, 1, n=5), 1)  # two steps behind
    assert kept == [] and dropped == 5
    assert batch(4, 1).off_policy_steps() == 2
