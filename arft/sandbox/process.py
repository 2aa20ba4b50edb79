"""Run an untrusted command in a sandbox: its own workspace, no network, CPU/memory/time limits.

``run_sandboxed`` is used by the shell tool (model-written commands) and by graders that run
untrusted code. It starts ``arft.sandbox.launcher`` (a tiny stdlib-only program; its command
line, config and report live in ``arft.sandbox.command``), which applies every isolation layer
the host allows and reports which ones it applied (``SandboxResult.isolation``);
a layer the kernel refuses is skipped, never fatal, unless the caller lists it in
``SandboxLimits.required_isolation``. Namespaces are made directly when we are root with
CAP_SYS_ADMIN, else inside an unprivileged user namespace (as root without CAP_SYS_ADMIN, e.g.
a default container, it first drops to nobody). Measured cost: about 40 ms per call. The suite
``bench/sandbox_escapes.py`` runs 59 escape attempts against it (all blocked on a host that grants
every layer).

What it stops (layer name in ``isolation`` in brackets):

* **Network** [netns]: a new, empty network namespace (not even a loopback interface): no
  TCP/UDP to anything, the host's 127.0.0.1 included, no DNS, no abstract Unix sockets.
* **Writes outside the workspace** [mountns, readonly_fs]: in a private mount namespace every
  mount except the workspace is remounted read-only (and nosuid). /tmp and /dev/shm are fresh
  private tmpfs [private_tmp, private_dev_shm] (size ``tmp_mb``; TMPDIR is /tmp), so the
  host's /tmp, and other workspaces in it, are not visible. Directories the sandbox uid may
  not enter that lie above the workspace (or a ``readable`` path) are replaced by an empty
  read-only tmpfs holding only that path, so the workspace keeps its real path inside.
  With ``workspace_tmpfs_mb`` the workspace itself is a private, size-bounded tmpfs
  [workspace_tmpfs], empty or (``workspace_tmpfs_copy``) a copy of the host folder
  [workspace_copy]: nothing written reaches the host disk.
* **Reading the trainer's files** [hidden_paths]: every top-level folder but the system ones
  (/usr, /etc, /lib, /bin, /dev, /proc, /sys, /tmp) is replaced by an empty read-only tmpfs:
  /home, /root, /opt, /var, /run, /srv, /mnt, the repository and the run directory (other
  rollouts' workspaces, checkpoints, job files, secrets) are not there, nor the Unix sockets in
  them (/run/docker.sock, the D-Bus system bus). The workspace and ``readable`` paths below them
  stay visible. Callers choose other folders with ``hidden`` (``()``: hide nothing).
* **Privileges** [userns, unprivileged_uid, no_new_privs]: as root the command runs as
  ``nobody`` (65534, no capabilities; the workspace tree is chowned to it first, never
  following links); otherwise as the caller's uid inside a user namespace, holding no
  capabilities after exec. setuid binaries cannot regain any. As root inside a user namespace
  that lacks uid 65534 it refuses to run (``error`` says so).
* **Other processes** [pidns, private_proc, ipcns, utsns]: its own pid namespace with a fresh
  /proc: it cannot see, signal or ptrace other processes (the sandbox's own init is
  non-dumpable); a new IPC namespace per run, so SysV IPC objects and POSIX message queues
  neither reach the host's nor outlive the run (and, where the host has a /dev/mqueue, a
  private one [private_mqueue]); the host name is its own.
* **Kernel attack surface** [seccomp]: a seccomp filter (``launcher.seccomp``, through
  libseccomp) makes the syscalls no command needs fail with EPERM: ptrace, process_vm_readv/
  writev, mount/umount, pivot_root, chroot, unshare, setns and clone with namespace flags,
  bpf, perf_event_open, userfaultfd, io_uring, keyctl/add_key/request_key, kexec,
  (f)init_module/delete_module, reboot, swapon/off, open_by_handle_at, time setting,
  TIOCSTI; syscalls through a second ABI (32-bit ``int 0x80``) kill the caller. Off with
  ``syscall_filter=False`` (gdb, strace). Without libseccomp the run goes on without it and
  reports ``seccomp_unavailable: <why>``; require it with ``required_isolation=("seccomp",)``.
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

* Reading world-readable files in the system folders (/etc, /usr: installed packages, system
  configuration); they are read-only, not hidden. Keep secrets out of them.
* Filling the disk through a host-folder workspace (the shell tool's): single files are capped
  (``max_file_mb``), and each call by its time limit, but not the workspace total. Workspaces
  in a tmpfs (python graders, ``tests_pass``) are bounded.
* Filesystem Unix sockets in the system folders whose permissions let the sandbox uid connect
  (/dev/log, where it is a socket).
* Kernel exploits through the syscalls the filter allows: there is no VM boundary. Run
  hostile code in a VM.
* Without the namespace layers (a host that forbids them: check ``isolation``) there is no
  network, filesystem or pid isolation, processes that call setsid survive the call, and
  ``readable`` paths under closed directories stay unreachable; uid drop (as root), rlimits,
  the seccomp filter, the clean environment, the process-group kill and the output limits
  still apply.
* ``max_processes`` counts all processes of the sandbox uid on the host, so concurrent
  sandboxes share it; RLIMIT_AS breaks runtimes that reserve huge virtual memory (Go, JVM,
  some BLAS thread pools): raise ``memory_mb`` for those.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from arft.sandbox.capture import READ_CHUNK, OutputCapture
from arft.sandbox.command import LaunchReport, kill_sandbox, read_report, sandbox_command, warn_if_degraded
from arft.sandbox.limits import SandboxError, SandboxLimits
from arft.sandbox.python_env import default_hidden

_DRAIN_GRACE_S = 2.0  # wait for pipes to close after the command ended


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


async def run_sandboxed(
    argv: list[str],
    workspace: Path,
    limits: SandboxLimits,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    *,
    merge_stderr: bool = False,
    readable: Sequence[Path] = (),
    hidden: Sequence[Path] | None = None,
) -> SandboxResult:
    """Run ``argv`` with cwd = ``workspace`` under ``limits``; see the module docstring.

    ``env`` is added to a clean environment (nothing of ours leaks). ``merge_stderr`` sends
    stderr into stdout (interleaved as a terminal shows it). ``readable`` are paths the command
    must be able to read even if a directory above them is closed to the sandbox uid (e.g. a
    Python installation under /root); they stay read-only. ``hidden`` are folders replaced by
    an empty read-only tmpfs inside the sandbox [hidden_paths] (the workspace and ``readable``
    paths below them stay visible); symlinks and missing folders are skipped. By default
    (None) every top-level folder but the system ones (``python_env.default_hidden``: /home,
    /root, /opt, /var, /run, /srv, /mnt, the project's own folder...); ``()`` hides nothing.
    """
    workspace = _checked_workspace(argv, workspace)
    hidden = default_hidden() if hidden is None else hidden
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
    out, err = OutputCapture(limits.max_output_chars), OutputCapture(limits.max_output_chars)
    try:
        timed_out = await _run_to_end(transport, protocol, proc, stdin, out, err,
                                      limits.timeout_s)
    finally:
        report = read_report(report_r)
        os.close(report_r)
    return _result(transport.get_returncode(), report, out, err, timed_out,
                   time.monotonic() - start)


def _checked_workspace(argv: list[str], workspace: Path) -> Path:
    """The resolved workspace; ``SandboxError`` for an empty command or a missing folder."""
    if not argv:
        raise SandboxError("run_sandboxed needs a command: argv is empty")
    workspace = Path(workspace).resolve()
    if not workspace.is_dir():
        raise SandboxError(f"workspace {workspace} is not a directory; create it first "
                           "(arft.sandbox.create_workspace)")
    return workspace


async def _run_to_end(transport: asyncio.SubprocessTransport, protocol: _ExitAwareProtocol,
                      proc: asyncio.subprocess.Process, stdin: str | None, out: OutputCapture,
                      err: OutputCapture, timeout_s: float) -> bool:
    """Feed stdin and capture the output until the launcher exits (killed at ``timeout_s``);
    True when it timed out. Cancelled, it kills the command before it lets go."""
    readers = [asyncio.ensure_future(out.consume(proc.stdout)),
               asyncio.ensure_future(err.consume(proc.stderr)),
               asyncio.ensure_future(_feed_stdin(proc, stdin))]
    try:
        timed_out = await _wait_exit(protocol, proc.pid, timeout_s)
    except BaseException:  # cancelled: never leave the command running
        kill_sandbox(proc.pid)
        await asyncio.shield(asyncio.ensure_future(_finish(transport, protocol, readers)))
        raise
    await _finish(transport, protocol, readers)
    return timed_out


def _result(returncode: int | None, report: LaunchReport, out: OutputCapture, err: OutputCapture,
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
    warn_if_degraded(report.get("isolation", ()))
    return SandboxResult(
        exit_code=exit_code, stdout=stdout, stderr=stderr, timed_out=timed_out,
        killed_reason=_killed_reason(exit_code, timed_out), truncated=t_out or t_err,
        duration_s=duration_s, isolation=tuple(report.get("isolation", ())),
        error=report.get("error"))


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
        super().__init__(limit=READ_CHUNK, loop=loop)
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
        kill_sandbox(pid)
        await protocol.exited
        return True


async def _finish(transport: asyncio.SubprocessTransport, protocol: _ExitAwareProtocol,
                  readers: Sequence[asyncio.Future[None]]) -> None:
    """After the launcher exited: let the readers reach end of file, then drop the pipes."""
    await protocol.exited
    # Every writer is dead by now (the group was killed), unless one escaped it: bound the wait.
    _, pending = await asyncio.wait(readers, timeout=_DRAIN_GRACE_S)
    for task in pending:
        task.cancel()
    transport.close()


async def probe_isolation(scratch: Path) -> tuple[str, ...]:
    """The isolation layers this host grants, found by running ``true`` in ``scratch``."""
    result = await run_sandboxed(["true"], scratch, SandboxLimits(timeout_s=30))
    return result.isolation
