"""Run the user's agent program once per rollout: a Python function or a command.

The program gets the dataset row and the client settings of its rollout's gateway route and
returns (or prints) its final output. Whatever goes wrong on its side — it raises, exits non-zero,
runs past ``timeout_s`` — is a ``ProgramResult`` with ``error`` set: the rollout is an
infrastructure failure, never a reward of 0 (DESIGN rule 4).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from arft.config.agents import CommandAgentSpec, PythonAgentSpec
from arft.errors import ArftError
from arft.sandbox import SandboxLimits, run_sandboxed
from arft.sandbox.command import kill_sandbox
from arft.sandbox.python_env import interpreter_access
from arft.tools.python_fn import load_function


class AgentSetupError(ArftError):
    """The job's agent program cannot run here (a command not found, an engine or cluster it
    cannot use); the message says what to change."""


@dataclass(frozen=True)
class ClientSettings:
    """What an agent program needs to call the policy: an OpenAI client pointed here."""

    base_url: str
    """``http://127.0.0.1:PORT/rollouts/<trace_id>/v1``: this rollout's gateway route."""
    api_key: str
    model: str
    trace_id: str

    def env(self) -> dict[str, str]:
        """The environment variables the OpenAI clients (and arft) read."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": self.api_key,
                "OPENAI_MODEL": self.model, "ARFT_TRACE_ID": self.trace_id}


@dataclass(frozen=True)
class ProgramResult:
    """How one run of the agent program ended."""

    output: str | None = None
    """Its final output (a JSON value as JSON text); None when it failed."""
    error: str | None = None
    """Why it failed (the exception, the exit status and stderr's tail, the timeout)."""
    timed_out: bool = False


class AgentProgram(Protocol):
    """One agent program, run once per rollout."""

    async def run(self, row: dict[str, Any], client: ClientSettings) -> ProgramResult: ...

    def close(self) -> None: ...


def as_output(value: Any) -> str:
    """A program's return value as the rollout's output: a string as it is, else JSON text."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@dataclass
class PythonProgram:
    """``agent: {type: python, entrypoint: ...}``: ``fn(row, client)`` per rollout; a sync
    function runs on a pool of its own (``concurrency`` threads), so it never waits behind the
    default executor's few threads or blocks the event loop that serves the gateway."""

    fn: Callable[..., Any]
    timeout_s: float
    threads: int
    _pool: ThreadPoolExecutor | None = field(default=None, repr=False)

    @classmethod
    def from_spec(cls, spec: PythonAgentSpec, base_dir: Path, concurrency: int) -> PythonProgram:
        """Raises ``ToolSetupError`` naming the entrypoint when it cannot be loaded. A file's folder
        goes on ``sys.path`` first, as ``python agent.py`` would put it: an agent imports its own
        modules."""
        target = spec.entrypoint.rpartition(":")[0]
        if target.endswith(".py"):
            folder = str((base_dir / target).resolve().parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)
        fn = load_function(spec.entrypoint, base_dir, what="agent entrypoint")
        return cls(fn, spec.timeout_s, spec.concurrency or concurrency)

    async def run(self, row: dict[str, Any], client: ClientSettings) -> ProgramResult:
        try:
            value = await asyncio.wait_for(self._call(row, client), timeout=self.timeout_s)
        except asyncio.TimeoutError:
            return ProgramResult(error=f"the agent did not finish within {self.timeout_s:g}s (agent.timeout_s)",
                                 timed_out=True)
        except Exception as e:  # the program's own failure: kept, never a reward
            tb = "".join(traceback.format_exception(e, limit=-4))
            return ProgramResult(error=f"the agent raised {type(e).__name__}: {e}\n{tb}")
        return ProgramResult(output=as_output(value))

    async def _call(self, row: dict[str, Any], client: ClientSettings) -> Any:
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(row, client)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="arft-agent")
        value = await asyncio.get_running_loop().run_in_executor(self._pool, self.fn, row, client)
        return await value if inspect.isawaitable(value) else value

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


@dataclass
class CommandProgram:
    """``agent: {type: command, command: [...]}``: a process per rollout, the row as JSON on its
    stdin, the client settings in its environment, its final output on stdout (a JSON value is
    kept as written; surrounding whitespace is dropped)."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    timeout_s: float
    stderr_max_chars: int
    sandbox: SandboxLimits | None = None
    """Run in arft's sandbox under these limits (``agent.sandbox``); None: a plain process."""

    @classmethod
    def from_spec(cls, spec: CommandAgentSpec, base_dir: Path) -> CommandProgram:
        cwd = base_dir if spec.cwd is None else (base_dir / spec.cwd).resolve()
        if not cwd.is_dir():
            raise AgentSetupError(f"agent.cwd {cwd} is not a directory; point it at the agent's folder")
        program = spec.command[0]  # a name with a slash runs from cwd; a bare name is looked up on PATH
        found = (cwd / program).is_file() if "/" in program else shutil.which(program) is not None
        if not found:
            where = f"in {cwd}" if "/" in program else "on PATH"
            raise AgentSetupError(f"agent.command {program!r} is not found ({where}); give the program's "
                                  "path (./agent.py runs from agent.cwd)")
        limits = None if not spec.sandbox else SandboxLimits(
            timeout_s=spec.timeout_s, memory_mb=spec.memory_mb, network=True,
            max_output_chars=max(spec.stderr_max_chars, 100_000), workspace_tmpfs_mb=spec.workspace_mb,
            workspace_tmpfs_copy=True)
        return cls(list(spec.command), cwd, dict(spec.env), spec.timeout_s, spec.stderr_max_chars, limits)

    async def run(self, row: dict[str, Any], client: ClientSettings) -> ProgramResult:
        if self.sandbox is not None:
            return await self._sandboxed(row, client, self.sandbox)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv, cwd=self.cwd, env={**os.environ, **self.env, **client.env()},
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)  # its own process group: a timeout stops its children too
        except OSError as e:
            return ProgramResult(error=f"the agent command {self.argv} could not start ({e}); check agent.command")
        try:
            out, err = await asyncio.wait_for(proc.communicate(json.dumps(row).encode()), timeout=self.timeout_s)
        except asyncio.TimeoutError:
            kill_sandbox(proc.pid)
            await proc.wait()
            return ProgramResult(error=f"the agent did not finish within {self.timeout_s:g}s (agent.timeout_s)",
                                 timed_out=True)
        finally:
            if proc.returncode is None:  # cancelled: never leave the program running
                kill_sandbox(proc.pid)
        if proc.returncode != 0:
            tail = err.decode(errors="replace")[-self.stderr_max_chars:]
            return ProgramResult(error=f"the agent exited with status {proc.returncode}; its stderr ends:\n{tail}")
        return ProgramResult(output=out.decode(errors="replace").strip())

    async def _sandboxed(self, row: dict[str, Any], client: ClientSettings, limits: SandboxLimits) -> ProgramResult:
        path, readable = interpreter_access()
        env = {"PATH": path, "PYTHONNOUSERSITE": "1", **self.env, **client.env()}
        result = await run_sandboxed(self.argv, self.cwd, limits, stdin=json.dumps(row), env=env,
                                     readable=readable)
        if result.error is not None:
            return ProgramResult(error=f"the sandbox could not run the agent: {result.error}")
        if result.timed_out:
            return ProgramResult(error=f"the agent did not finish within {self.timeout_s:g}s (agent.timeout_s)",
                                 timed_out=True)
        if result.exit_code != 0:
            tail = result.stderr[-self.stderr_max_chars:]
            why = f" ({result.killed_reason})" if result.killed_reason else ""
            return ProgramResult(
                error=f"the agent exited with status {result.exit_code}{why}; its stderr ends:\n{tail}")
        return ProgramResult(output=result.stdout.strip())

    def close(self) -> None:
        return None

