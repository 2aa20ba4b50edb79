"""Run one function from untrusted Python source in the sandbox, fast: a warm fork-server pool.

A fresh sandboxed interpreter per call costs tens of milliseconds (namespaces, Python start-up,
imports). ``WarmPool`` keeps ``size`` long-lived sandboxed workers ("zygotes", started through
the sandbox launcher so each has its own namespaces, runs as nobody under rlimits) that have the
source compiled, its module run and its imports done. Each call is sent to an idle zygote, which
forks a fresh child for it: the child applies the per-call limits (address space = what the
zygote maps + ``memory_mb``, CPU seconds), calls the function and writes the answer; then the
zygote kills the child and everything it started (with a pid namespace: every process but
itself and the sandbox's init) and empties the scratch folders. Isolation therefore holds per
call: no global, file or process of one call is seen by the next. A zygote that dies is
restarted on the next call; the call it was serving gets an error result.

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
sockets) and the host's /tmp cannot be read. Not stopped: reading system files (/etc, /usr)
and the installed libraries; SysV IPC objects a call leaves in the zygote's IPC namespace are
not removed between calls; kernel exploits (no seccomp, no VM). Without a pid namespace (a host
that forbids it) a process a call starts with ``setsid`` survives until the zygote is stopped.

Zygotes exit when the pool is closed, when the event loop they were started in ends, and when
the trainer dies (their request pipe closes); call ``aclose()`` when done to free them at once.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import site
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from arft.sandbox.process import SandboxLimits, kill_sandbox, run_sandboxed, sandbox_command
from arft.sandbox.workspace import remove_workspace

WORKER = Path(__file__).with_name("_grader_worker.py")
_HEADER_BYTES = 4
_MAX_ANSWER_CHARS = 1_000_000
_ZYGOTE_HEADROOM_MB = 4096  # address space for the zygote's own imports, above the per-call cap
_GRACE_S = 15.0  # beyond the call's own time limit, before we give up on a zygote
_STDERR_TAIL = 4000
_SYSTEM_DIRS = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev",
                          "proc", "sys", "tmp"})
# One thread per numeric library: each call is one worker on one core.
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "NUMEXPR_MAX_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1"}

CallKind = Literal["ok", "exception", "timeout", "killed", "crashed", "bad_value", "bad_input",
                   "infra"]


@dataclass(frozen=True)
class CallLimits:
    """The limits of one call (the hosted python grader's defaults)."""

    timeout_s: float = 120.0
    memory_mb: int = 2048
    disk_mb: int = 1024
    """Size of the scratch folder, /tmp and /dev/shm (each) and of any one file written."""
    max_processes: int = 256
    """RLIMIT_NPROC of the sandbox uid (shared by every sandbox running as it): stops fork bombs."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "disk_mb", "max_processes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"CallLimits.{name} must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class SandboxedFunction:
    """What to run: ``function`` from ``source`` (``filename`` names it in tracebacks)."""

    source: str
    filename: str = "<grader>"
    function: str = "grade"
    limits: CallLimits = field(default_factory=CallLimits)
    preload: tuple[str, ...] | None = None
    """Modules the zygote imports before forking; None: every module the source imports."""


@dataclass(frozen=True)
class CallResult:
    """How one call ended: ``value`` (JSON) when ``kind == "ok"``, else ``error`` says why."""

    kind: CallKind
    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


@dataclass(frozen=True)
class PythonEnvironment:
    """How the sandbox runs this interpreter: the binary, what it may read, what it imports."""

    executable: str
    readable: tuple[Path, ...]
    sys_path: tuple[str, ...]
    hidden: tuple[Path, ...]
    variables: dict[str, str] = field(default_factory=dict)
    """Environment variables the sandboxed interpreter gets (besides the sandbox's clean ones)."""


def current_environment() -> PythonEnvironment:
    """This interpreter, its site-packages and the ``arft`` package, everything else hidden."""
    import arft  # the package itself: importable inside (built-in graders)

    package = Path(arft.__file__).resolve().parent
    sites = [p for p in dict.fromkeys([*site.getsitepackages(), *sys.path])
             if p and ("site-packages" in p or "dist-packages" in p) and os.path.isdir(p)]
    sys_path = [*sites]
    readable = [Path(sys.base_prefix).resolve(), *(Path(p).resolve() for p in sites)]
    if not any(package.is_relative_to(p) for p in readable):
        readable.append(package)
        sys_path.append(str(package.parent))
    # nltk looks in sys.prefix, which inside is the base interpreter's, not this venv's.
    nltk_data = [p for p in (Path(sys.prefix) / "nltk_data", Path.home() / "nltk_data")
                 if p.is_dir()]
    readable.extend(p.resolve() for p in nltk_data)
    variables = dict(_WORKER_ENV)
    if nltk_data:
        variables["NLTK_DATA"] = os.pathsep.join(str(p.resolve()) for p in nltk_data)
    return PythonEnvironment(os.path.realpath(sys.executable), tuple(readable),
                             tuple(sys_path), default_hidden(), variables)


def default_hidden() -> tuple[Path, ...]:
    """Every top-level folder except the system ones a Python program needs."""
    root = Path("/")
    return tuple(sorted(p for p in root.iterdir()
                        if p.name not in _SYSTEM_DIRS and p.is_dir() and not p.is_symlink()))


def imported_modules(source: str) -> tuple[str, ...]:
    """Absolute module names the source imports anywhere (for the zygote to pre-import)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return tuple(dict.fromkeys(names))


def _hello(fn: SandboxedFunction, env: PythonEnvironment, own_pidns: bool,
           preload: tuple[str, ...]) -> dict[str, Any]:
    return {"source": fn.source, "filename": fn.filename, "function": fn.function,
            "sys_path": list(env.sys_path), "preload": list(preload), "own_pidns": own_pidns,
            "limits": {"timeout_s": fn.limits.timeout_s,
                       "memory_bytes": fn.limits.memory_mb << 20}}


def _sandbox_limits(limits: CallLimits, *, zygote: bool) -> SandboxLimits:
    """The launcher's limits: per call for a fresh process; for a zygote, caps its children
    cannot exceed (each child lowers them for its own call)."""
    return SandboxLimits(
        timeout_s=limits.timeout_s,
        memory_mb=limits.memory_mb + (_ZYGOTE_HEADROOM_MB if zygote else 0),
        cpu_s=10 ** 8 if zygote else limits.timeout_s,
        max_output_chars=_MAX_ANSWER_CHARS, max_file_mb=limits.disk_mb,
        max_processes=limits.max_processes, tmp_mb=limits.disk_mb,
        workspace_tmpfs_mb=limits.disk_mb)


def _answer(payload: bytes | str) -> CallResult:
    """A worker's JSON answer as a CallResult."""
    try:
        answer = json.loads(payload)
    except (json.JSONDecodeError, ValueError) as e:
        return CallResult("crashed", error=f"the sandboxed worker sent an unreadable answer ({e})")
    if "value" in answer:
        return CallResult("ok", value=answer["value"])
    return CallResult(answer.get("kind", "crashed"), error=answer.get("error", "no answer"))


def _encode_args(args: tuple[Any, ...]) -> bytes | CallResult:
    try:
        return json.dumps(list(args)).encode()
    except (TypeError, ValueError) as e:
        return CallResult("bad_input", error=f"the call's arguments are not JSON ({e}); pass "
                                             "plain dicts, lists, strings and numbers")


async def run_fresh(fn: SandboxedFunction, *args: Any, scratch_root: Path | None = None,
                    env: PythonEnvironment | None = None) -> CallResult:
    """Call ``fn`` once in a new sandboxed interpreter (no warm state)."""
    encoded = _encode_args(args)
    if isinstance(encoded, CallResult):
        return encoded
    env = env or current_environment()
    ws = Path(tempfile.mkdtemp(prefix="arft-call-", dir=scratch_root))
    stdin = json.dumps({"hello": _hello(fn, env, False, ()), "args": json.loads(encoded)})
    try:
        result = await run_sandboxed(
            [env.executable, "-I", "-S", "-B", str(WORKER), "once"], ws,
            _sandbox_limits(fn.limits, zygote=False), stdin=stdin, env=env.variables,
            readable=env.readable, hidden=env.hidden)
    finally:
        remove_workspace(ws)
    if result.error:
        return CallResult("infra", error=f"the sandbox could not run the call: {result.error}")
    if result.timed_out:
        return CallResult("timeout", error=f"timed out after {fn.limits.timeout_s:g} s (killed)")
    if result.stdout.strip():
        return _answer(result.stdout)
    tail = result.stderr.strip()[-_STDERR_TAIL:]
    reason = result.killed_reason or f"exit status {result.exit_code}"
    hint = " (memory limit?)" if result.killed_reason == "signal SIGKILL" else ""
    return CallResult("killed" if result.killed_reason else "crashed",
                      error=f"the grading process ended without an answer: {reason}{hint}"
                            + (f"\n{tail}" if tail else ""))


class _StartFailed(Exception):
    """A zygote did not get ready; ``result`` is what the waiting call gets."""

    def __init__(self, result: CallResult) -> None:
        super().__init__(result.error)
        self.result = result


class _Zygote:
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
        """Launch the sandbox and wait for the zygote's ready answer; ``_StartFailed`` if not."""
        self._stderr.clear()
        self.workspace = Path(tempfile.mkdtemp(prefix="arft-zygote-", dir=self.scratch_root))
        report_r, report_w = os.pipe()
        cmd, launch_env = sandbox_command(
            [self.env.executable, "-I", "-S", "-B", str(WORKER), "serve"], self.workspace,
            _sandbox_limits(self.fn.limits, zygote=True), report_w, env=self.env.variables,
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
        self._drain = asyncio.ensure_future(self._keep_stderr_tail(self.proc))
        try:
            timeout = self.fn.limits.timeout_s + _GRACE_S
            with report_file:
                report = await asyncio.wait_for(_first_report(report_file), timeout)
            if report.get("error") or "isolation" not in report:
                raise _StartFailed(CallResult("infra", error="the sandbox could not start the "
                                              f"worker: {report.get('error', 'no report')}"))
            self.isolation = tuple(report["isolation"])
            own_pidns = "pidns" in self.isolation and "private_proc" in self.isolation
            await self._send(json.dumps(_hello(self.fn, self.env, own_pidns, self.preload)))
            ready = json.loads(await asyncio.wait_for(self._receive(), timeout))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError,
                ValueError) as e:
            await self.stop()
            raise _StartFailed(CallResult("infra", error=f"the sandboxed worker did not start "
                                          f"({type(e).__name__}){self._tail()}")) from None
        except BaseException:
            await self.stop()
            raise
        if not ready.get("ready"):
            await self.stop()
            # The user's module itself failed (its import, its top-level code): their error.
            raise _StartFailed(CallResult("exception", error="loading the source failed: "
                                          f"{ready.get('error')}"))

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
        return _answer(answer)

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
                del self._stderr[:-_STDERR_TAIL]
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


async def _first_report(pipe: Any) -> dict[str, Any]:
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
        self._zygotes: list[_Zygote] = []
        self._idle: asyncio.Queue[_Zygote] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def isolation(self) -> tuple[str, ...]:
        """The layers applied to the zygotes started so far (empty before the first call)."""
        return next((z.isolation for z in self._zygotes if z.isolation), ())

    def _queue(self) -> asyncio.Queue[_Zygote]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            for zygote in self._zygotes:  # their pipes belong to a loop that is gone
                zygote.kill_now()
            self._loop = loop
            self._zygotes = [_Zygote(self.fn, self.env, self.scratch_root, self._preload)
                             for _ in range(self.size)]
            self._idle = asyncio.Queue()
            for zygote in self._zygotes:
                self._idle.put_nowait(zygote)
        assert self._idle is not None
        return self._idle

    async def call(self, *args: Any) -> CallResult:
        """``fn(*args)`` in a fresh fork of a warm zygote; waits for an idle one."""
        if self._closed:
            raise RuntimeError("this WarmPool is closed; make a new one")
        encoded = _encode_args(args)
        if isinstance(encoded, CallResult):
            return encoded
        idle = self._queue()
        zygote = await idle.get()
        try:
            if not zygote.alive:
                try:
                    await zygote.start()
                except _StartFailed as failed:
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
