"""The Ray driver resends a rollout whose worker is gone: a restarting worker (Ray's
``ActorUnavailableError``) is waited for, not counted as a death; ``max_restarts`` + 1 deaths stop
the run, as does a restart that never ends. Fake workers stand in for the actors (the timing of a
real restart cannot be held still); the exceptions are Ray's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ray.exceptions import ActorUnavailableError, RayActorError

from arft.app.cluster import driver
from arft.app.cluster.driver import ClusterError, ClusterRunner
from arft.config.sections import RaySpec
from arft.records import Message, Rollout, Task
from arft.tracing.store import RunStore

TASK = Task(id="t1", messages=(Message(role="user", content="hi"),))


class Worker:
    """Fails with each of ``errors`` in turn, then returns a rollout."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.run_one = self

    def remote(self, task: Task, k: int, *args: Any) -> Any:
        async def call() -> Rollout:
            if self.errors:
                raise self.errors.pop(0)
            return Rollout(trace_id=f"{task.id}-{k}", task_id=task.id, messages=task.messages)
        return call()


def restarting() -> ActorUnavailableError:
    return ActorUnavailableError("The actor is restarting.", None)


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []

    async def pause(s: float) -> None:
        slept.append(s)

    monkeypatch.setattr(driver, "_pause", pause)  # the driver's waits only, not asyncio's
    return slept


def runner(tmp_path: Path, errors: list[Exception], max_restarts: int = 2) -> ClusterRunner:
    return ClusterRunner(workers=[Worker(errors)], store=RunStore(tmp_path / "run.sqlite"),
                         spec=RaySpec(max_restarts=max_restarts))


async def test_a_restarting_worker_is_waited_for_however_many_tries_it_takes(tmp_path: Path,
                                                                               no_waiting: list[float]) -> None:
    r = runner(tmp_path, [restarting() for _ in range(6)], max_restarts=2)
    [rollout] = await r.run_many([TASK], 1)
    assert rollout.task_id == "t1" and r.resent == 6  # six restarts are not three deaths
    assert no_waiting == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]  # doubled, then capped


async def test_deaths_beyond_max_restarts_stop_the_run(tmp_path: Path) -> None:
    died = [RayActorError() for _ in range(3)]
    with pytest.raises(ClusterError, match="died 3 times .* resume with --resume"):
        await runner(tmp_path, died, max_restarts=2).run_many([TASK], 1)
    r = runner(tmp_path, [RayActorError(), restarting(), RayActorError()], max_restarts=2)
    assert len(await r.run_many([TASK], 1)) == 1  # two deaths and a restart: still within max_restarts


async def test_a_restart_that_never_ends_stops_the_run(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"stayed unavailable \(restarting\) for 1\d\d s"):
        await runner(tmp_path, [restarting() for _ in range(100)]).run_many([TASK], 1)
