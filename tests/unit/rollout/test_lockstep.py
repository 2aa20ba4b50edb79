"""Lockstep rollouts: rounds hold every seated rollout's call, in task order, whatever the tools'
timing; on the transformers engine (the varied tiny model) two runs whose tools take different
times sample the same tokens with the same logprobs, bit for bit."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, Sequence

import pytest
import torch

from arft.config import JobSpec
from arft.engines.base import GenerateCall, Generation, SamplingParams
from arft.engines.transformers.engine import TransformersEngine
from arft.rollout.lockstep import Lockstep
from tests.unit.engines.transformers.test_engine import varied_model


class RoundEngine:
    """Answers every call with one token (its prompt's length) and records each admission."""

    supports_constraints = False

    def __init__(self) -> None:
        self.tokenizer: Any = None
        self.rounds: list[list[tuple[int, ...]]] = []

    def submit_together(self, calls: Sequence[GenerateCall]) -> list[asyncio.Future[Generation]]:
        self.rounds.append([tuple(c.prompt_ids) for c in calls])
        loop = asyncio.get_running_loop()
        futures = []
        for c in calls:
            future: asyncio.Future[Generation] = loop.create_future()
            loop.call_later(0.001, future.set_result, Generation(
                token_ids=(len(c.prompt_ids),), logprobs=(0.0,), text="", finish_reason="stop"))
            futures.append(future)
        return futures

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        return await self.submit_together([GenerateCall(prompt_ids, params)])[0]

    async def aclose(self) -> None:
        pass


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)  # as the engine tests: a shared 2-core machine, no OpenMP spinning


PARAMS = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4)


async def rollout(lockstep: Lockstep, index: int, turns: int, delays: list[float]) -> list[int]:
    """A rollout of ``turns`` turns whose 'tools' take ``delays`` seconds; returns its token ids."""
    ids = [index]
    async with lockstep.seat(index) as engine:
        for turn in range(turns):
            await asyncio.sleep(delays[turn])
            ids += (await engine.generate(ids, PARAMS)).token_ids
    return ids


async def test_a_round_holds_every_seated_rollouts_call_in_task_order() -> None:
    engine = RoundEngine()
    lockstep = Lockstep(engine, seats=3, rollouts=3)  # type: ignore[arg-type]
    # rollout 2's tools answer first, rollout 0's last: the rounds do not care
    out = await asyncio.gather(*(rollout(lockstep, i, 2, [0.03 * (2 - i)] * 2) for i in range(3)))
    assert engine.rounds == [[(0,), (1,), (2,)], [(0, 1), (1, 1), (2, 1)]]
    assert out == [[0, 1, 2], [1, 1, 2], [2, 1, 2]] and lockstep.rounds == 2


async def test_an_ended_rollout_gives_its_seat_to_the_next_in_order() -> None:
    engine = RoundEngine()
    lockstep = Lockstep(engine, seats=2, rollouts=3)  # type: ignore[arg-type]
    turns = [1, 3, 2]
    await asyncio.gather(*(rollout(lockstep, i, turns[i], [0.01 * i] * 3) for i in range(3)))
    # round 1: rollouts 0 and 1; 0 ends, 2 sits down before round 2 can start without it
    assert engine.rounds == [[(0,), (1,)], [(1, 1), (2,)], [(1, 1, 2), (2, 1)]]


async def test_the_order_and_the_rounds_do_not_depend_on_the_tools_timing() -> None:
    seen = []
    for delay_seed in (1, 2):
        engine = RoundEngine()
        lockstep = Lockstep(engine, seats=3, rollouts=5)  # type: ignore[arg-type]
        rng = random.Random(delay_seed)
        turns = [3, 1, 2, 3, 2]
        await asyncio.gather(*(rollout(lockstep, i, turns[i], [rng.uniform(0, 0.02) for _ in range(3)])
                               for i in range(5)))
        seen.append(engine.rounds)
    assert seen[0] == seen[1]


async def test_a_rollout_cancelled_while_waiting_does_not_hold_the_round() -> None:
    engine = RoundEngine()
    lockstep = Lockstep(engine, seats=2, rollouts=2)  # type: ignore[arg-type]
    stuck = asyncio.ensure_future(rollout(lockstep, 0, 1, [0.0]))
    late = asyncio.ensure_future(rollout(lockstep, 1, 1, [10.0]))  # its tool never answers in time
    await asyncio.sleep(0.01)
    stuck.cancel()
    late.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck
    with pytest.raises(asyncio.CancelledError):
        await late
    assert engine.rounds == []  # the round never started without rollout 1, and nothing hangs


async def timed_rollouts(engine: TransformersEngine, tokenizer: Any, delay_seed: int) -> list[Any]:
    """Five rollouts of 1-3 turns in four seats; before each turn a 'tool' sleeps a random time."""
    lockstep = Lockstep(engine, seats=4, rollouts=5)
    rng = random.Random(delay_seed)

    async def one(i: int) -> list[Any]:
        ids = tokenizer.encode(f"Question {i}: " + "why? " * (i + 1))
        out: list[Any] = []
        async with lockstep.seat(i) as seat:
            for turn in range(1 + i % 3):
                await asyncio.sleep(rng.uniform(0, 0.03))
                params = PARAMS.model_copy(update={"max_new_tokens": 3 + 2 * i + turn, "seed": 100 * i + turn})
                gen = await seat.generate(ids, params)
                out.append((gen.token_ids, gen.logprobs))
                ids = ids + list(gen.token_ids) + tokenizer.encode(f" tool says {turn}")
        return out

    return await asyncio.gather(*(one(i) for i in range(5)))


async def test_on_the_transformers_engine_tool_timing_changes_no_bit(tokenizer: Any) -> None:
    """Seeded sampling; the 'tools' sleep for random times, another pattern in each run. The tokens
    and the logprobs are the same, bit for bit (continuous batching changes their last bits)."""
    model = varied_model(tokenizer, seed=3)
    runs = []
    for delay_seed in (1, 2):
        engine = TransformersEngine(model, tokenizer, max_batch_size=8)
        try:
            runs.append(await timed_rollouts(engine, tokenizer, delay_seed))
        finally:
            await engine.aclose()
    assert runs[0] == runs[1]
    assert sum(len(turns) for turns in runs[0]) == 1 + 2 + 3 + 1 + 2


def test_lockstep_refuses_what_it_cannot_order() -> None:
    base = {"training_file": "t.jsonl", "rollout": {"schedule": "lockstep"},
            "method": {"type": "reinforcement", "reinforcement": {"grader": {
                "type": "string_check", "name": "g", "input": "x", "reference": "x", "operation": "eq"}}}}
    JobSpec.model_validate(base)
    with pytest.raises(ValueError, match="max_off_policy_steps"):
        JobSpec.model_validate({**base, "training": {"max_off_policy_steps": 1}})
    with pytest.raises(ValueError, match="cluster.ray"):
        JobSpec.model_validate({**base, "cluster": {"ray": {}}})


def slow_lookup(delay_seed: int) -> Any:
    """A python tool whose answers take a random time (the pattern set by ``delay_seed``)."""
    from arft.tools.python_fn import PythonTool

    rng = random.Random(delay_seed)

    async def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: What to look up.
        """
        await asyncio.sleep(rng.uniform(0, 0.03))
        return f"value of {key[:8]}"

    return PythonTool.from_function(lookup)


async def test_run_many_in_lockstep_replays_bit_for_bit_whatever_the_tools_latency(tmp_path: Path,
                                                                                   tokenizer: Any) -> None:
    """The runner's wiring: six seeded rollouts of the tiny model, each forced to call a python tool
    whose latency is random (another pattern per run), three seats: the same tokens and logprobs."""
    from arft.rollout.runner import RolloutRunner
    from arft.tools.registry import Toolbox
    from tests.unit.rollout.test_runner import RecordingGrader, job, tasks

    model = varied_model(tokenizer, seed=3)
    spec = job(tmp_path, concurrency=3, schedule="lockstep", tool_choice="required", max_turns=3)
    spec = spec.model_copy(update={"sampling": spec.sampling.model_copy(update={"max_new_tokens": 24})})
    runs = []
    for delay_seed in (1, 2):
        box = Toolbox()
        box.add(slow_lookup(delay_seed))
        engine = TransformersEngine(model, tokenizer, max_batch_size=8)
        try:
            runner = RolloutRunner.from_job(spec, engine, box, RecordingGrader())
            runs.append(await runner.run_many(tasks(3), 2, seed=7))
        finally:
            await engine.aclose()
    assert all(r.tool_calls for r in runs[0])  # every rollout waited on its tool at least once
    assert [r.token_ids for r in runs[0]] == [r.token_ids for r in runs[1]]
    assert [r.logprobs for r in runs[0]] == [r.logprobs for r in runs[1]]


async def test_the_runner_refuses_lockstep_for_an_agent_program(tmp_path: Path, tokenizer: Any) -> None:
    """An agent program sends its own requests, which rounds cannot hold: a clear error, before any rollout."""
    from arft.config import JobError
    from arft.engines.scripted import ScriptedEngine
    from arft.rollout.runner import RolloutRunner
    from arft.tools.registry import Toolbox
    from tests.unit.rollout.test_runner import RecordingGrader, job, tasks

    runner = RolloutRunner.from_job(job(tmp_path, schedule="lockstep"), ScriptedEngine(tokenizer, lambda ids: "hi"),
                                    Toolbox(), RecordingGrader())
    runner.driver = object()  # type: ignore[assignment]
    with pytest.raises(JobError, match="schedule: continuous"):
        await runner.run_many(tasks(1), 1)
