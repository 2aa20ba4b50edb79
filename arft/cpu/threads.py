"""One OpenMP thread pool alive at a time, as torch work moves between threads.

PyTorch's CPU operators run in parallel on OpenMP (GNU libgomp in the Linux wheels). Every thread
that runs a parallel operator gets a pool of worker threads of its own, and keeps it. arft hands
torch work between threads: the model is loaded and updated on the event loop's thread, the
engine decodes on a worker thread (so tools keep running meanwhile). With both pools alive, libgomp
counts more threads than cores, and on a machine with as many cores as one pool's threads it
stops letting idle workers wait spinning: every parallel operator then waits for sleeping workers
to wake. Measured on a 2-core machine, in the thread whose pool came second: a 279-element
``exp_`` took 65 us instead of 2.3 us, an add of ``[202, 576]`` bf16 75 us instead of 16, and
the engine's multi-turn benchmark ran 1.4x slower (``bench/engine_multiturn.py``).

``release_pool()`` ends the calling thread's pool (OpenMP 5.0's ``omp_pause_resource_all``); the
thread's next parallel operator starts a new one (a thread start per worker). ``to_thread(fn)``
is ``asyncio.to_thread`` that releases the calling thread's pool first and the worker's when ``fn``
returns: torch work handed back and forth keeps one pool alive at a time. ``WorkerThread`` does
the same on a thread of its own (the engine's decode loop), so a pool never outlives its call in
some other thread of a shared executor. Where the OpenMP runtime cannot be found (torch not
imported yet, another runtime without the call), or where ``ARFT_OPENMP_POOLS=keep`` is set, both
do nothing more than their plain counterparts.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import functools
import os
import sys
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

T = TypeVar("T")
_PAUSE_SOFT = 1
"""``omp_pause_soft``: end the pool's threads, keep the runtime's settings."""
_RUNTIMES = ("libgomp", "libiomp", "libomp")
KEEP_POOLS = "ARFT_OPENMP_POOLS"
"""Set to ``keep``: every thread keeps its pool, as torch does by itself (for comparisons, or an
OpenMP runtime that misbehaves when paused); ``release`` or unset: the default."""


def keeps_pools() -> bool:
    """Whether ``ARFT_OPENMP_POOLS`` asks every thread to keep its pool (``keep``; ``release`` or
    unset: one pool alive). Any other value is refused (``ValueError``)."""
    value = os.environ.get(KEEP_POOLS, "").strip().lower()
    if value not in ("", "keep", "release"):
        raise ValueError(f"{KEEP_POOLS} is {os.environ[KEEP_POOLS]!r}: set it to 'keep' (every thread keeps "
                         "its OpenMP pool) or 'release' (one pool alive, the default), or unset it")
    return value == "keep"


def release_pool() -> bool:
    """End the calling thread's OpenMP worker threads; ``True`` where the runtime did so (a thread
    without a pool counts as done). ``ARFT_OPENMP_POOLS=keep`` in the environment turns it off."""
    if keeps_pools():
        return False
    pause = _pause()
    return pause is not None and pause(_PAUSE_SOFT) == 0


async def to_thread(fn: Callable[..., T], *args: Any, executor: Executor | None = None) -> T:
    """``fn(*args)`` in a worker thread (``asyncio.to_thread``; of ``executor`` if given), with only
    that thread's OpenMP pool alive while it runs: the caller's is released before, the worker's
    after."""
    release_pool()
    context = contextvars.copy_context()

    def run() -> T:
        try:
            return context.run(fn, *args)
        finally:
            release_pool()

    return await asyncio.get_running_loop().run_in_executor(executor, run)


class WorkerThread:
    """A thread of its own for a component's torch work (``run``), its OpenMP pool released after
    each call: one OS thread, so no stale pool is left in a shared executor's other threads."""

    def __init__(self, name: str) -> None:
        keeps_pools()  # a bad ARFT_OPENMP_POOLS fails where the thread is made, not in a call
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``to_thread(fn, *args)`` on this thread (``RuntimeError`` once closed)."""
        return await to_thread(fn, *args, executor=self._executor)

    def close(self) -> None:
        """Let the thread end once its call under way returns."""
        self._executor.shutdown(wait=False)


def _pause() -> Callable[[int], int] | None:
    if "torch" not in sys.modules:  # no operator has run, so no pool; look again once it is loaded
        return None
    return _loaded_pause()


@functools.cache
def _loaded_pause() -> Callable[[int], int] | None:
    """``omp_pause_resource_all`` of the OpenMP runtime torch loaded, if it has one."""
    for library in [None, *_mapped_runtimes()]:  # None: the process's global symbols
        try:
            pause = ctypes.CDLL(library).omp_pause_resource_all
        except (OSError, AttributeError, TypeError):  # TypeError: no global namespace (Windows)
            continue
        pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
        return pause
    return None


def _mapped_runtimes() -> list[str]:
    """Paths of the OpenMP runtimes mapped into this process (Linux; elsewhere none)."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return []
    paths = {line.split()[-1] for line in maps.read_text().splitlines() if any(r in line for r in _RUNTIMES)}
    return sorted(p for p in paths if p.startswith("/"))
