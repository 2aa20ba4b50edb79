"""Run one function from untrusted Python source in the sandbox, fast: a warm fork-server pool.

A fresh sandboxed interpreter per call costs tens of milliseconds (namespaces, Python start-up,
imports). ``WarmPool`` keeps ``size`` long-lived sandboxed workers ("zygotes", started through
the sandbox launcher so each has its own namespaces, runs as nobody under rlimits) that have the
source compiled, its module run and its imports done. Each call is sent to an idle zygote, which
forks a fresh child for it: the child applies the per-call limits (address space = what the
zygote maps + ``memory_mb``, CPU seconds), calls the function and writes the answer; then the
zygote kills the child and everything it started (with a pid namespace: every process but
itself and the sandbox's init), empties the scratch folders and removes every SysV shared memory
segment, semaphore set and message queue of its IPC namespace (POSIX message queues, which
cannot be listed there, are denied to zygotes by the syscall filter). Isolation therefore holds
per call: no global, file, process or IPC object of one call is seen by the next. A zygote that
dies is restarted on the next call; the call it was serving gets an error result.

``run_fresh`` is the simple mode: one new sandboxed interpreter per call (the benchmark
baseline, and the fallback when a zygote cannot be started for reasons other than the user's
code). Both return a ``CallResult``; neither raises for anything the user's code does.

What the sandbox gives each call (see ``arft.sandbox.process`` for the layers): no network
namespace access at all; a clean environment (none of the trainer's variables); every mount
read-only except the scratch folder (the cwd and HOME: a private tmpfs of ``disk_mb``) and the
private /tmp and /dev/shm (tmpfs of ``disk_mb`` each), files capped at ``disk_mb``; every
top-level folder outside the system ones (``/usr``, ``/etc``, ``/lib``...) hidden behind an
empty tmpfs, except the interpreter, its site-packages and the ``arft`` package, which are
visible read-only: the run directory, the repository, home folders, /var, /run (and their Unix
sockets) and the host's /tmp cannot be read; the seccomp filter denies ptrace, mount, bpf,
keyctl, new namespaces and the like. Not stopped: reading system files (/etc, /usr) and the
installed libraries; kernel exploits through the syscalls still allowed (no VM). Without a pid
namespace (a host that forbids it) a process a call starts with ``setsid`` survives until the
zygote is stopped; without an IPC namespace SysV objects are not swept (they are the host's).

Zygotes exit when the pool is closed, when the event loop they were started in ends, and when
the trainer dies (their request pipe closes); call ``aclose()`` when done to free them at once.

The pieces: ``python_call`` (what a call is, its limits and result, the worker's messages),
``python_env`` (what of this interpreter the sandbox shows), ``zygote`` (one fork server).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from arft.sandbox.process import run_sandboxed
from arft.sandbox.python_call import (STDERR_TAIL_CHARS, WORKER, CallResult, SandboxedFunction,
                                      encode_args, hello_message, imported_modules,
                                      launcher_limits, parse_answer)
from arft.sandbox.python_env import PythonEnvironment, current_environment
from arft.sandbox.workspace import remove_workspace
from arft.sandbox.zygote import Zygote, ZygoteStartFailed


async def run_fresh(fn: SandboxedFunction, *args: Any, scratch_root: Path | None = None,
                    env: PythonEnvironment | None = None) -> CallResult:
    """Call ``fn`` once in a new sandboxed interpreter (no warm state)."""
    encoded = encode_args(args)
    if isinstance(encoded, CallResult):
        return encoded
    env = env or current_environment()
    ws = Path(tempfile.mkdtemp(prefix="arft-call-", dir=scratch_root))
    stdin = json.dumps({"hello": hello_message(fn, env, (), ()), "args": json.loads(encoded)})
    try:
        result = await run_sandboxed(
            [env.executable, "-I", "-S", "-B", str(WORKER), "once"], ws,
            launcher_limits(fn.limits, zygote=False), stdin=stdin, env=env.variables,
            readable=env.readable, hidden=env.hidden)
    finally:
        remove_workspace(ws)
    if result.error:
        return CallResult("infra", error=f"the sandbox could not run the call: {result.error}")
    if result.timed_out:
        return CallResult("timeout", error=f"timed out after {fn.limits.timeout_s:g} s (killed)")
    if result.stdout.strip():
        return parse_answer(result.stdout)
    tail = result.stderr.strip()[-STDERR_TAIL_CHARS:]
    reason = result.killed_reason or f"exit status {result.exit_code}"
    hint = " (memory limit?)" if result.killed_reason == "signal SIGKILL" else ""
    return CallResult("killed" if result.killed_reason else "crashed",
                      error=f"the grading process ended without an answer: {reason}{hint}"
                            + (f"\n{tail}" if tail else ""))


class WarmPool:
    """``size`` zygotes (default: the CPUs we may use) behind a queue; see the module docstring.

    Zygotes start on demand (the first ``size`` concurrent calls start them in parallel). Use
    ``async with WarmPool(...)`` or call ``aclose()``: it kills every zygote. A pool moved to a
    new event loop (``asyncio.run`` called again) restarts its zygotes there.
    """

    def __init__(self, fn: SandboxedFunction, size: int | None = None, *,
                 scratch_root: Path | None = None, env: PythonEnvironment | None = None,
                 fallback_fresh: bool = True) -> None:
        self.fn = fn
        self.size = size or len(os.sched_getaffinity(0))
        if self.size <= 0:
            raise ValueError(f"WarmPool size must be > 0, got {size}")
        self.scratch_root = scratch_root
        self.env = env or current_environment()
        self.fallback_fresh = fallback_fresh
        self._preload = fn.preload if fn.preload is not None else imported_modules(fn.source)
        self._zygotes: list[Zygote] = []
        self._idle: asyncio.Queue[Zygote] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def isolation(self) -> tuple[str, ...]:
        """The layers applied to the zygotes started so far (empty before the first call)."""
        return next((z.isolation for z in self._zygotes if z.isolation), ())

    def _queue(self) -> asyncio.Queue[Zygote]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            for zygote in self._zygotes:  # their pipes belong to a loop that is gone
                zygote.kill_now()
            self._loop = loop
            self._zygotes = [Zygote(self.fn, self.env, self.scratch_root, self._preload)
                             for _ in range(self.size)]
            self._idle = asyncio.Queue()
            for zygote in self._zygotes:
                self._idle.put_nowait(zygote)
        assert self._idle is not None
        return self._idle

    async def start(self) -> None:
        """Start every zygote now, concurrently, instead of on the first calls: a run calls it
        when it opens (``arft.graders.base.warm_up_grader``), so its first batch of grades does
        not wait for ``size`` sandboxes to start (~0.2-0.5 s, most of an eval's grading time).
        A zygote that fails to start is left for the next call to retry (and report)."""
        if self._closed:
            raise RuntimeError("this WarmPool is closed; make a new one")
        idle = self._queue()

        async def one() -> None:
            zygote = await idle.get()  # held out of the queue while it starts: no call meets it half-up
            try:
                if not zygote.alive:
                    await zygote.start()
            except ZygoteStartFailed:
                pass  # the next call on it tries again and returns the reason
            finally:
                idle.put_nowait(zygote)

        await asyncio.gather(*(one() for _ in range(self.size)))

    async def call(self, *args: Any) -> CallResult:
        """``fn(*args)`` in a fresh fork of a warm zygote; waits for an idle one."""
        if self._closed:
            raise RuntimeError("this WarmPool is closed; make a new one")
        encoded = encode_args(args)
        if isinstance(encoded, CallResult):
            return encoded
        idle = self._queue()
        zygote = await idle.get()
        try:
            if not zygote.alive:
                try:
                    await zygote.start()
                except ZygoteStartFailed as failed:
                    if failed.result.kind == "infra" and self.fallback_fresh:
                        return await run_fresh(self.fn, *args, scratch_root=self.scratch_root,
                                               env=self.env)
                    return failed.result
            return await zygote.call(encoded)
        finally:
            idle.put_nowait(zygote)

    async def aclose(self) -> None:
        """Kill every zygote and remove their scratch folders; the pool cannot be used again."""
        self._closed = True
        if self._loop is asyncio.get_running_loop():
            await asyncio.gather(*(z.stop() for z in self._zygotes))
        else:
            for zygote in self._zygotes:
                zygote.kill_now()
        self._zygotes = []

    async def __aenter__(self) -> WarmPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
