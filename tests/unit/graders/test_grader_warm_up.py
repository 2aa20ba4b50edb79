"""A python grader's sandbox pool starts when the run opens, not on the first grades: the first
batch of an eval no longer waits for the sandboxes (what made a trivial grader cost ~0.6 s), and a
batch of 32 grades is served by the started workers alone (no process start per grade)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from arft.app.run import open_run
from arft.config import JobSpec
from arft.graders.base import warm_up_grader
from arft.graders.python_grader import PythonGrader, build
from arft.graders.registry import build_grader
from arft.sandbox.zygote import Zygote
from arft.tracing.run_dir import RunDir

SOURCE = "def grade(sample, item):\n    return 1.0 if sample['output_text'] == item['answer'] else 0.0\n"
SPEC = {"type": "python", "name": "py", "source": SOURCE, "timeout_s": 20}


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every zygote (sandboxed worker process) start."""
    counted: list[int] = []
    real = Zygote.start

    async def start(self: Zygote) -> None:
        counted.append(1)
        await real(self)

    monkeypatch.setattr(Zygote, "start", start)
    return counted


def alive(grader: PythonGrader) -> int:
    pool = grader._pool
    assert pool is not None
    return sum(z.alive for z in pool._zygotes)


async def test_warm_up_starts_every_worker_and_a_batch_of_32_starts_none(starts: list[int]) -> None:
    grader = build(SPEC, Path("."), pool_size=2)
    try:
        await warm_up_grader(grader)
        assert alive(grader) == 2 and len(starts) == 2
        scores = await asyncio.gather(*(grader.grade({"output_text": f"a{i % 2}"}, {"answer": "a0"})
                                        for i in range(32)))
        assert [s.score for s in scores] == [1.0, 0.0] * 16 and all(s.error is None for s in scores)
        assert len(starts) == 2  # the 32 grades forked the two warm workers; nothing started
        await warm_up_grader(grader)
        assert len(starts) == 2  # warming a warm pool starts nothing
    finally:
        await grader.aclose()


async def test_a_multi_grader_warms_its_python_children(starts: list[int]) -> None:
    multi = build_grader({"type": "multi", "name": "m", "calculate_output": "a + b",
                          "graders": {"a": SPEC, "b": {**SPEC, "name": "b"}}}, Path("."))
    try:
        await warm_up_grader(multi)
        assert len(starts) == 2 * len(multi.children["a"]._pool._zygotes)  # type: ignore[attr-defined]
    finally:
        await multi.aclose()  # type: ignore[attr-defined]


async def test_open_run_starts_the_graders_pool(tmp_path: Path, tokenizer: Any) -> None:
    from arft.engines.scripted import ScriptedEngine

    raw = {"training_file": "train.jsonl",
           "method": {"type": "reinforcement", "reinforcement": {"grader": SPEC}}}
    job = JobSpec.model_validate(raw).model_copy(update={"base_dir": tmp_path})
    grader = build(SPEC, tmp_path, pool_size=1)
    try:
        async with open_run(job, RunDir(tmp_path / "run"), grader=grader,
                            engine=ScriptedEngine(tokenizer, lambda _: "")):
            for _ in range(600):  # no grade is asked for: only the run's warm-up starts it
                if alive(grader):
                    break
                await asyncio.sleep(0.05)
            assert alive(grader) == 1
    finally:
        await grader.aclose()
