"""One OpenMP pool alive at a time: the calling thread's pool really ends, and ``to_thread`` /
``WorkerThread`` leave none behind in their worker (counted as OS threads of this process)."""

from __future__ import annotations

import contextvars
import os
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest
import torch

from arft.cpu import threads as cpu_threads

TASKS = Path("/proc/self/task")
needs_linux = pytest.mark.skipif(not TASKS.exists(), reason="counts threads in /proc (Linux)")
VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def os_threads() -> int:
    return len(os.listdir(TASKS))


def parallel_op() -> int:
    """Run an operator big enough to go parallel (this thread gets its pool); the OS threads now."""
    torch.ones(1 << 22).add_(1)
    return os_threads()


@pytest.fixture
def two_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Two intra-op threads (a pool of one worker; the suite otherwise runs with one), pools
    released whatever the environment says."""
    if cpu_threads._pause() is None:
        pytest.skip("no OpenMP runtime with omp_pause_resource_all in this torch build")
    monkeypatch.delenv(cpu_threads.KEEP_POOLS, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@needs_linux
def test_release_pool_ends_the_calling_threads_workers(two_threads: None) -> None:
    assert cpu_threads.release_pool()
    alone = os_threads()
    assert parallel_op() == alone + 1  # the pool's worker
    assert cpu_threads.release_pool()
    assert os_threads() == alone
    assert parallel_op() == alone + 1  # a new pool on the next parallel operator
    assert cpu_threads.release_pool()


@needs_linux
async def test_to_thread_leaves_no_pool_in_either_thread(two_threads: None) -> None:
    def work() -> tuple[int, int]:
        return os_threads(), parallel_op()

    for _ in range(3):  # nothing piles up (the executor may start another thread: counted in both)
        parallel_op()  # the caller's pool, as loading a model or an update leaves it
        before, inside = await cpu_threads.to_thread(work)
        cpu_threads.release_pool()  # nothing left to end if to_thread did
        no_pools = os_threads()
        assert before == no_pools  # the caller's pool had ended when the work began
        assert inside == no_pools + 1  # the worker's own pool: one worker, ended after


@needs_linux
async def test_worker_thread_is_one_thread_released_after_each_call(two_threads: None) -> None:
    worker = cpu_threads.WorkerThread("test-worker")
    idents = set()

    def work() -> int:
        idents.add(threading.get_ident())
        return parallel_op()

    counts = [await worker.run(work) for _ in range(3)]
    assert len(idents) == 1 and threading.get_ident() not in idents
    assert counts[0] == counts[1] == counts[2] == os_threads() + 1  # its pool's worker, gone after each
    worker.close()
    with pytest.raises(RuntimeError):
        await worker.run(work)


async def test_to_thread_returns_raises_and_keeps_context() -> None:
    VAR.set("caller's")
    assert await cpu_threads.to_thread(lambda a, b: (a + b, VAR.get()), 2, 3) == (5, "caller's")
    with pytest.raises(ZeroDivisionError):
        await cpu_threads.to_thread(lambda: 1 / 0)


@needs_linux
def test_keep_in_the_environment_keeps_the_pool(two_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_threads.KEEP_POOLS, "keep")
    with_pool = parallel_op()
    assert cpu_threads.release_pool() is False
    assert os_threads() == with_pool
    monkeypatch.delenv(cpu_threads.KEEP_POOLS)
    assert cpu_threads.release_pool() and os_threads() == with_pool - 1


def test_a_bad_setting_is_refused_with_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_threads.KEEP_POOLS, "keeep")
    with pytest.raises(ValueError, match="set it to 'keep'.*or 'release'"):
        cpu_threads.release_pool()
    with pytest.raises(ValueError, match="ARFT_OPENMP_POOLS is 'keeep'"):
        cpu_threads.WorkerThread("never-made")
    monkeypatch.setenv(cpu_threads.KEEP_POOLS, " Release ")
    assert cpu_threads.keeps_pools() is False
    monkeypatch.setenv(cpu_threads.KEEP_POOLS, "KEEP")
    assert cpu_threads.keeps_pools() is True


def test_without_torch_loaded_nothing_is_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch")
    assert cpu_threads._pause() is None
    assert cpu_threads.release_pool() is False
