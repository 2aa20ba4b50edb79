"""One warm sandboxed fork server ("zygote") of ``arft.sandbox.pool.WarmPool``.

A ``Zygote`` starts ``_grader_worker.py serve`` under the sandbox launcher, waits for the
launcher's isolation report and the worker's ready answer, then serves one call at a time over
length-prefixed JSON on the worker's stdin/stdout. A dead, stuck or cancelled zygote is stopped
(its whole sandbox killed, its scratch folder removed) and started again on the next call.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from arft.sandbox.command import kill_sandbox, sandbox_command, warn_if_degraded
from arft.sandbox.python_call import (STDERR_TAIL_CHARS, WORKER, CallResult, SandboxedFunction,
                                      hello_message, launcher_limits, parse_answer)
from arft.sandbox.python_env import PythonEnvironment
from arft.sandbox.workspace import remove_workspace

_HEADER_BYTES = 4
_GRACE_S = 15.0  # beyond the call's own time limit, before we give up on a zygote


class ZygoteStartFailed(Exception):
    """A zygote did not get ready; ``result`` is what the waiting call gets."""

    def __init__(self, result: CallResult) -> None:
        super().__init__(result.error)
        self.result = result


class Zygote:
    """One sandboxed fork server: started on demand, serves one call at a time."""

    def __init__(self, fn: SandboxedFunction, env: PythonEnvironment, scratch_root: Path | None,
                 preload: tuple[str, ...]) -> None:
        self.fn, self.env, self.scratch_root, self.preload = fn, env, scratch_root, preload
        self.proc: asyncio.subprocess.Process | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        self.workspace: Path | None = None
        self.isolation: tuple[str, ...] = ()
        self._stderr = bytearray()
        self._drain: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        """Launch the sandbox and wait for the zygote's ready answer; ``ZygoteStartFailed`` if
        not."""
        report_file = await self._launch()
        self._drain = asyncio.ensure_future(self._keep_stderr_tail(self.proc))
        try:
            ready = await self._handshake(report_file)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError,
                ValueError) as e:
            await self.stop()
            raise ZygoteStartFailed(CallResult(
                "infra", error=f"the sandboxed worker did not start "
                               f"({type(e).__name__}){self._tail()}")) from None
        except BaseException:
            await self.stop()
            raise
        if not ready.get("ready"):
            await self.stop()
            # The user's module itself failed (its import, its top-level code): their error.
            raise ZygoteStartFailed(CallResult(
                "exception", error=f"loading the source failed: {ready.get('error')}"))

    async def _launch(self) -> Any:
        """Start the worker under the sandbox launcher; the launcher's report pipe, to read."""
        self._stderr.clear()
        self.workspace = Path(tempfile.mkdtemp(prefix="arft-zygote-", dir=self.scratch_root))
        report_r, report_w = os.pipe()
        cmd, launch_env = sandbox_command(
            [self.env.executable, "-I", "-S", "-B", str(WORKER), "serve"], self.workspace,
            launcher_limits(self.fn.limits, zygote=True), report_w, env=self.env.variables,
            readable=self.env.readable, hidden=self.env.hidden)
        report_file = os.fdopen(report_r, "rb", buffering=0)
        try:
            await self._spawn(cmd, launch_env, report_w)
        except BaseException:
            report_file.close()
            await self.stop()
            raise
        finally:
            os.close(report_w)
        return report_file

    async def _handshake(self, report_file: BinaryIO) -> dict[str, Any]:
        """Read the launcher's isolation report (closing the pipe), send the worker its hello,
        and return the worker's answer (``{"ready": true}`` or the error loading the source)."""
        timeout = self.fn.limits.timeout_s + _GRACE_S
        with report_file:
            report = await asyncio.wait_for(_first_report(report_file), timeout)
        if report.get("error") or "isolation" not in report:
            raise ZygoteStartFailed(CallResult(
                "infra", error="the sandbox could not start the worker: "
                               f"{report.get('error', 'no report')}"))
        self.isolation = tuple(report["isolation"])
        warn_if_degraded(self.isolation)
        await self._send(json.dumps(hello_message(self.fn, self.env, self.isolation,
                                                  self.preload)))
        return json.loads(await asyncio.wait_for(self._receive(), timeout))

    async def call(self, payload: bytes) -> CallResult:
        """One call on this (started) zygote; a dead or stuck zygote is stopped."""
        try:
            await self._send(payload)
            answer = await asyncio.wait_for(self._receive(),
                                            self.fn.limits.timeout_s + _GRACE_S)
        except (asyncio.IncompleteReadError, ConnectionError):
            await self.stop()
            return CallResult("crashed", error="the sandboxed worker died during the call "
                                               f"(killed from inside?){self._tail()}")
        except asyncio.TimeoutError:
            await self.stop()
            return CallResult("timeout", error=f"timed out after {self.fn.limits.timeout_s:g} s; "
                                               "the sandboxed worker was killed")
        except BaseException:  # cancelled: the zygote is mid-call, start a new one next time
            await asyncio.shield(self.stop())
            raise
        return parse_answer(answer)

    async def _spawn(self, cmd: list[str], env: dict[str, str], report_w: int) -> None:
        loop = asyncio.get_running_loop()
        pipe = asyncio.subprocess.PIPE
        self._transport, protocol = await loop.subprocess_exec(
            lambda: asyncio.subprocess.SubprocessStreamProtocol(1 << 16, loop), *cmd,
            stdin=pipe, stdout=pipe, stderr=pipe, env=env, cwd="/", pass_fds=(report_w,))
        self.proc = asyncio.subprocess.Process(self._transport, protocol, loop)

    async def _send(self, payload: bytes | str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        data = payload.encode() if isinstance(payload, str) else payload
        self.proc.stdin.write(len(data).to_bytes(_HEADER_BYTES, "big") + data)
        await self.proc.stdin.drain()

    async def _receive(self) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        head = await self.proc.stdout.readexactly(_HEADER_BYTES)
        return await self.proc.stdout.readexactly(int.from_bytes(head, "big"))

    async def _keep_stderr_tail(self, proc: asyncio.subprocess.Process | None) -> None:
        """Keep the end of the zygote's stderr; this task also lives as long as the zygote, so
        when its event loop shuts down (``asyncio.run`` cancels every task) the zygote dies
        with it instead of outliving the loop its pipes belong to."""
        assert proc is not None and proc.stderr is not None
        try:
            while chunk := await proc.stderr.read(1 << 16):
                self._stderr += chunk
                del self._stderr[:-STDERR_TAIL_CHARS]
        except asyncio.CancelledError:
            if self.proc is proc:  # not stopped (and maybe restarted) on purpose
                await self.stop()
            raise

    def _tail(self) -> str:
        text = self._stderr.decode(errors="replace").strip()
        return f"; its last output:\n{text}" if text else ""

    def kill_now(self) -> None:
        """Synchronous kill, without waiting (when the event loop is ending or gone)."""
        if self.proc is not None and self.proc.returncode is None:
            kill_sandbox(self.proc.pid)
        self.proc = None
        transport, self._transport = self._transport, None
        if transport is not None:
            try:
                transport.close()
            except RuntimeError:
                pass  # its loop is closed already
        if self.workspace is not None:
            remove_workspace(self.workspace)
            self.workspace = None

    async def stop(self) -> None:
        """Kill the whole sandbox, wait for it, drop its pipes and its workspace."""
        proc, self.proc = self.proc, None
        transport, self._transport = self._transport, None
        drain, self._drain = self._drain, None
        if proc is not None:
            if proc.returncode is None:
                kill_sandbox(proc.pid)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except asyncio.TimeoutError:
                pass
        if transport is not None:
            transport.close()
        if drain is not None and drain is not asyncio.current_task():
            drain.cancel()
        if self.workspace is not None:
            remove_workspace(self.workspace)
            self.workspace = None


async def _first_report(pipe: BinaryIO) -> dict[str, Any]:
    """The launcher's first report line (isolation, or the error that stopped it)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                pipe)
    try:
        line = await reader.readline()
    finally:
        transport.close()  # later lines (exit statuses) are not needed: the launcher ignores EPIPE
    try:
        return json.loads(line) if line.strip() else {}
    except json.JSONDecodeError:
        return {}
