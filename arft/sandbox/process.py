"""Run an untrusted command in a sandbox: its own workspace, no network, CPU/memory/time limits.

``run_sandboxed`` is used by the shell tool (model-written commands) and by graders that run
untrusted code. It starts ``_launch.py`` (a tiny stdlib-only launcher) which applies every
isolation layer the host allows and reports which ones it applied (``SandboxResult.isolation``);
a layer the kernel refuses is skipped, never fatal, unless the caller lists it in
``SandboxLimits.required_isolation``. Namespaces are made directly when we are root with
CAP_SYS_ADMIN, else inside an unprivileged user namespace (as root without CAP_SYS_ADMIN, e.g.
a default container, it first drops to nobody). Measured cost: about 40 ms per call.

What it stops (layer name in ``isolation`` in brackets):

* **Network** [netns]: a new, empty network namespace (not even a loopback interface): no
  TCP/UDP to anything, the host's 127.0.0.1 included, no DNS, no abstract Unix sockets.
* **Writes outside the workspace** [mountns, readonly_fs]: in a private mount namespace every
  mount except the workspace is remounted read-only (and nosuid). /tmp and /dev/shm are fresh
  private tmpfs [private_tmp, private_dev_shm] (size ``tmp_mb``; TMPDIR is /tmp), so the
  host's /tmp, and other workspaces in it, are not visible. Directories the sandbox uid may
  not enter that lie above the workspace (or a ``readable`` path) are replaced by an empty
  read-only tmpfs holding only that path, so the workspace keeps its real path inside.
  Folders the caller lists as ``hidden`` are replaced the same way [hidden_paths], and with
  ``workspace_tmpfs_mb`` the workspace itself is a private, size-bounded tmpfs [workspace_tmpfs].
* **Privileges** [userns, unprivileged_uid, no_new_privs]: as root the command runs as
  ``nobody`` (65534, no capabilities; the workspace tree is chowned to it first, never
  following links); otherwise as the caller's uid inside a user namespace, holding no
  capabilities after exec. setuid binaries cannot regain any. As root inside a user namespace
  that lacks uid 65534 it refuses to run (``error`` says so).
* **Other processes** [pidns, private_proc, ipcns, utsns]: its own pid namespace with a fresh
  /proc: it cannot see, signal or ptrace other processes (the sandbox's own init is
  non-dumpable); SysV IPC and the host name are its own.
* **Runaway processes** [session, pdeathsig, rlimits]: a new session; on a timeout, on
  cancellation, or as soon as the command exits, its whole process group is SIGKILLed, and
  with pidns every process it started (even ones that called setsid): nothing outlives the
  call. rlimits cap address space (``memory_mb``), CPU seconds, the size of any one file
  written (``max_file_mb``) and the processes of the sandbox uid (``max_processes``); no cores.
* **Output floods**: stdout/stderr are read incrementally and only the first and last part (at
  most ``max_output_chars``) are kept; the rest is counted and dropped.
* **Secrets in the environment**: the command gets a fresh environment (PATH, HOME = the
  workspace, TMPDIR, LANG, USER) plus exactly what the caller passes.

What it does not stop:

* Reading world-readable files outside the workspace (system files, the code of arft itself)
  unless the caller hides their folder (``hidden``); they are read-only, not hidden. Keep
  secrets out of world-readable places.
* Filling the disk: only single files are capped (``max_file_mb``), not the workspace total.
* Filesystem Unix sockets whose permissions let the sandbox uid connect.
* Kernel exploits: there is no seccomp filter or VM boundary. Run hostile code in a VM.
* Without the namespace layers (a host that forbids them: check ``isolation``) there is no
  network, filesystem or pid isolation, processes that call setsid survive the call, and
  ``readable`` paths under closed directories stay unreachable; uid drop (as root), rlimits,
  the clean environment, the process-group kill and the output limits still apply.
* ``max_processes`` counts all processes of the sandbox uid on the host, so concurrent
  sandboxes share it; RLIMIT_AS breaks runtimes that reserve huge virtual memory (Go, JVM,
  some BLAS thread pools): raise ``memory_mb`` for those.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

LAUNCHER = Path(__file__).with_name("_launch.py")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CHUNK = 1 << 16
_DRAIN_GRACE_S = 2.0  # wait for pipes to close after the command ended


class SandboxError(RuntimeError):
    """The sandbox could not be started at all (bad arguments, missing workspace)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed run."""

    timeout_s: float = 10.0
    """Wall-clock limit; the whole process tree is killed when it passes."""
    memory_mb: int = 512
    """Address-space limit (RLIMIT_AS) of each process."""
    cpu_s: float | None = None
    """CPU-seconds limit of each process (default: ``timeout_s``)."""
    max_output_chars: int = 10_000
    """Characters kept of stdout and of stderr each (head and tail; the middle is dropped)."""
    max_file_mb: int = 64
    """Largest file a process may write (RLIMIT_FSIZE)."""
    network: bool = False
    """Allow network access (no network namespace)."""
    max_processes: int = 256
    """RLIMIT_NPROC of the sandbox uid (stops fork bombs)."""
    tmp_mb: int = 64
    """Size of the private /tmp and /dev/shm."""
    required_isolation: tuple[str, ...] = ()
    """Layers that must be applied (e.g. ``("netns", "readonly_fs")``) or the command is not run."""
    workspace_tmpfs_mb: int | None = None
    """When set, the workspace is a fresh private tmpfs of this size at the workspace's path
    instead of the host folder [workspace_tmpfs]: nothing written there reaches the host disk and
    the total is bounded. The host folder is then only the mount point (it stays empty)."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "max_file_mb", "max_processes", "tmp_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)}")
        if self.max_output_chars < 0:
            raise ValueError("SandboxLimits.max_output_chars must be >= 0")
        if self.workspace_tmpfs_mb is not None and self.workspace_tmpfs_mb <= 0:
            raise ValueError("SandboxLimits.workspace_tmpfs_mb must be > 0 (or None for the host "
                             f"folder), got {self.workspace_tmpfs_mb}")


@dataclass(frozen=True)
class SandboxResult:
    """How a sandboxed run ended."""

    exit_code: int
    """The exit status; negative: killed by that signal number."""
    stdout: str
    stderr: str
    timed_out: bool
    killed_reason: str | None
    """``timeout``, ``cpu_limit``, ``file_size_limit`` or ``signal SIGxxx``; None for a normal exit."""
    truncated: bool
    """Some stdout/stderr was dropped (a marker in the text says how much)."""
    duration_s: float
    isolation: tuple[str, ...] = ()
    """The isolation layers that were applied (see the module docstring)."""
    error: str | None = None
    """Why the command was not run at all (setup failure, missing required isolation)."""


class _Capture:
    """Keeps the head and tail of a byte stream within a character budget; counts the rest."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.keep = 4 * max_chars  # bytes: enough for max_chars of any UTF-8 text
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    async def consume(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(_CHUNK):
            self.feed(chunk)

    def text(self) -> tuple[str, bool]:
        """The kept text (with a truncation marker when some was dropped) and whether it was."""
        if self.total == len(self.head) + len(self.tail):
            whole = (self.head + self.tail).decode(errors="replace")
            if len(whole) <= self.max_chars:
                return whole, False
            head, tail = whole, whole
        else:
            head = self.head.decode(errors="replace")
            # The tail may start inside a multi-byte character: skip continuation bytes.
            tail = bytes(self.tail).lstrip(bytes(range(0x80, 0xC0))).decode(errors="replace")
        n_head = self.max_chars // 2
        n_tail = self.max_chars - n_head
        shown_tail = tail[-n_tail:] if n_tail else ""
        marker = (f"\n[... output truncated: {self.total} bytes in all; showing the first "
                  f"{n_head} and the last {len(shown_tail)} characters ...]\n")
        return head[:n_head] + marker + shown_tail, True


def _clean_env(workspace: Path, env: dict[str, str] | None) -> dict[str, str]:
    base = {"PATH": DEFAULT_PATH, "HOME": str(workspace), "TMPDIR": str(workspace),
            "LANG": "C.UTF-8", "USER": "sandbox", "LOGNAME": "sandbox"}
    return base | dict(env or {})


def _launch_config(workspace: Path, limits: SandboxLimits, report_fd: int,
                   readable: Sequence[Path], env: dict[str, str] | None,
                   hidden: Sequence[Path] = ()) -> dict[str, Any]:
    cpu = limits.cpu_s if limits.cpu_s is not None else limits.timeout_s
    return {
        "workspace": str(workspace), "report_fd": report_fd, "network": limits.network,
        "memory_bytes": limits.memory_mb << 20, "cpu_s": max(1, math.ceil(cpu)),
        "fsize_bytes": limits.max_file_mb << 20, "nproc": limits.max_processes,
        "tmp_mb": limits.tmp_mb, "required": list(limits.required_isolation),
        "readable": [str(Path(p).resolve()) for p in readable],
        "set_tmpdir": "TMPDIR" not in (env or {}),
        "hidden": [os.path.abspath(p) for p in hidden],
        "workspace_tmpfs_mb": limits.workspace_tmpfs_mb,
    }


def _kill_group(pid: int) -> None:
    """SIGKILL the launcher's process group (it called setsid, so pgid == pid)."""
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
            return
        except ProcessLookupError:
            continue  # not a group leader yet (or gone): try the process itself
        except PermissionError:
            return


def _read_report(fd: int) -> dict[str, Any]:
    """Merge the launcher's JSON lines (isolation, error, exit/signal) into one dict."""
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    merged: dict[str, Any] = {}
    for line in data.decode(errors="replace").splitlines():
        try:
            merged.update(json.loads(line))
        except json.JSONDecodeError:
            continue
    return merged


def _killed_reason(exit_code: int, timed_out: bool) -> str | None:
    if timed_out:
        return "timeout"
    if exit_code >= 0:
        return None
    sig = -exit_code
    if sig == signal.SIGXCPU:
        return "cpu_limit"
    if sig == signal.SIGXFSZ:
        return "file_size_limit"
    try:
        return f"signal {signal.Signals(sig).name}"
    except ValueError:
        return f"signal {sig}"


async def _feed_stdin(proc: asyncio.subprocess.Process, data: str | None) -> None:
    if proc.stdin is None:
        return
    try:
        if data:
            proc.stdin.write(data.encode())
            await proc.stdin.drain()
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command did not read all of its input; that is its business


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's stream protocol plus a future set as soon as the process exits.

    ``Process.wait()`` also waits for every pipe to close, which a process that escaped the
    kill (possible without a pid namespace) could hold open for ever.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=_CHUNK, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


async def _spawn(cmd: list[str], with_stdin: bool, merge_stderr: bool, env: dict[str, str],
                 report_w: int) -> tuple[Any, _ExitAwareProtocol, asyncio.subprocess.Process]:
    loop = asyncio.get_running_loop()
    pipe = asyncio.subprocess.PIPE
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitAwareProtocol(loop), *cmd,
        stdin=pipe if with_stdin else asyncio.subprocess.DEVNULL, stdout=pipe,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else pipe,
        env=env, cwd="/", pass_fds=(report_w,))
    return transport, protocol, asyncio.subprocess.Process(transport, protocol, loop)


async def _wait_exit(protocol: _ExitAwareProtocol, pid: int, timeout_s: float) -> bool:
    """Wait for the launcher to exit; on timeout kill its group. True when it timed out."""
    try:
        await asyncio.wait_for(asyncio.shield(protocol.exited), timeout_s)
        return False
    except asyncio.TimeoutError:
        _kill_group(pid)
        await protocol.exited
        return True


async def _finish(transport: Any, protocol: _ExitAwareProtocol,
                  readers: list[asyncio.Future[None]]) -> None:
    """After the launcher exited: let the readers reach end of file, then drop the pipes."""
    await protocol.exited
    # Every writer is dead by now (the group was killed), unless one escaped it: bound the wait.
    _, pending = await asyncio.wait(readers, timeout=_DRAIN_GRACE_S)
    for task in pending:
        task.cancel()
    transport.close()


async def run_sandboxed(
    argv: list[str],
    workspace: Path,
    limits: SandboxLimits,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    *,
    merge_stderr: bool = False,
    readable: Sequence[Path] = (),
    hidden: Sequence[Path] = (),
) -> SandboxResult:
    """Run ``argv`` with cwd = ``workspace`` under ``limits``; see the module docstring.

    ``env`` is added to a clean environment (nothing of ours leaks). ``merge_stderr`` sends
    stderr into stdout (interleaved as a terminal shows it). ``readable`` are paths the command
    must be able to read even if a directory above them is closed to the sandbox uid (e.g. a
    Python installation under /root); they stay read-only. ``hidden`` are folders replaced by
    an empty read-only tmpfs inside the sandbox [hidden_paths] (the workspace and ``readable``
    paths below them stay visible); symlinks and missing folders are skipped.
    """
    if not argv:
        raise SandboxError("run_sandboxed needs a command: argv is empty")
    workspace = Path(workspace).resolve()
    if not workspace.is_dir():
        raise SandboxError(f"workspace {workspace} is not a directory; create it first "
                           "(arft.sandbox.create_workspace)")
    report_r, report_w = os.pipe()
    cmd, launch_env = sandbox_command(argv, workspace, limits, report_w, env=env,
                                      readable=readable, hidden=hidden)
    start = time.monotonic()
    try:
        transport, protocol, proc = await _spawn(cmd, stdin is not None, merge_stderr,
                                                 launch_env, report_w)
    except BaseException:
        os.close(report_r)
        raise
    finally:
        os.close(report_w)
    out, err = _Capture(limits.max_output_chars), _Capture(limits.max_output_chars)
    readers = [asyncio.ensure_future(out.consume(proc.stdout)),
               asyncio.ensure_future(err.consume(proc.stderr)),
               asyncio.ensure_future(_feed_stdin(proc, stdin))]
    try:
        timed_out = await _wait_exit(protocol, proc.pid, limits.timeout_s)
    except BaseException:  # cancelled: never leave the command running
        _kill_group(proc.pid)
        await asyncio.shield(asyncio.ensure_future(_finish(transport, protocol, readers)))
        raise
    else:
        await _finish(transport, protocol, readers)
    finally:
        report = _read_report(report_r)
        os.close(report_r)
    return _result(transport.get_returncode(), report, out, err, timed_out,
                   time.monotonic() - start)


def _result(returncode: int | None, report: dict[str, Any], out: _Capture, err: _Capture,
            timed_out: bool, duration_s: float) -> SandboxResult:
    # The command's own status (from the sandbox's init) wins over the launcher's.
    if timed_out:
        exit_code = -signal.SIGKILL
    elif "command_exit" in report or "command_signal" in report:
        exit_code = int(report.get("command_exit", -report.get("command_signal", 0)))
    elif "exit" in report or "signal" in report:
        exit_code = int(report.get("exit", -report.get("signal", 0)))
    else:
        exit_code = returncode if returncode is not None else -signal.SIGKILL
    stdout, t_out = out.text()
    stderr, t_err = err.text()
    return SandboxResult(
        exit_code=exit_code, stdout=stdout, stderr=stderr, timed_out=timed_out,
        killed_reason=_killed_reason(exit_code, timed_out), truncated=t_out or t_err,
        duration_s=duration_s, isolation=tuple(report.get("isolation", ())),
        error=report.get("error"))


def sandbox_command(argv: list[str], workspace: Path, limits: SandboxLimits, report_fd: int, *,
                    env: dict[str, str] | None = None, readable: Sequence[Path] = (),
                    hidden: Sequence[Path] = ()) -> tuple[list[str], dict[str, str]]:
    """The launcher command line and environment that run ``argv`` sandboxed in ``workspace``.

    ``run_sandboxed`` is the one-shot form; this is for a long-lived sandboxed worker that talks
    over its own pipes (its stdin/stdout/stderr are the command's). Start the command with
    ``cwd="/"``, the returned environment and ``pass_fds=(report_fd,)``; the launcher writes JSON
    lines on ``report_fd`` (``{"isolation": [...]}`` before the command starts, ``{"error"}`` when
    it cannot start it). ``limits.timeout_s`` is not enforced here: stop the worker with
    ``kill_sandbox(pid)``.
    """
    workspace = Path(workspace).resolve()
    config = _launch_config(workspace, limits, report_fd, readable, env, hidden)
    cmd = [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(config), "--", *argv]
    return cmd, _clean_env(workspace, env)


def kill_sandbox(pid: int) -> None:
    """SIGKILL a sandbox started from ``sandbox_command`` (``pid``: the launcher's): the launcher,
    the sandbox's init and, with a pid namespace, every process inside it."""
    _kill_group(pid)


async def probe_isolation(scratch: Path) -> tuple[str, ...]:
    """The isolation layers this host grants, found by running ``true`` in ``scratch``."""
    result = await run_sandboxed(["true"], scratch, SandboxLimits(timeout_s=30))
    return result.isolation
