"""The host side of the sandbox launcher (``arft.sandbox.launcher``): the command line and clean
environment that run a program under it, the report it writes back, and the kill that ends it.

``run_sandboxed`` (``arft.sandbox.process``) uses these for one-shot commands, the warm pool
(``arft.sandbox.zygote``) for long-lived workers that talk over their own pipes.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence, TypedDict, cast

from arft.sandbox.limits import SandboxLimits

LAUNCHER = Path(__file__).with_name("launcher")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REPORT_CHUNK = 1 << 16


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


def _clean_env(workspace: Path, env: dict[str, str] | None) -> dict[str, str]:
    base = {"PATH": DEFAULT_PATH, "HOME": str(workspace), "TMPDIR": str(workspace),
            "LANG": "C.UTF-8", "USER": "sandbox", "LOGNAME": "sandbox"}
    return base | dict(env or {})


def _launch_config(workspace: Path, limits: SandboxLimits, report_fd: int,
                   readable: Sequence[Path], env: dict[str, str] | None,
                   hidden: Sequence[Path] = ()) -> dict[str, Any]:
    """The launcher's CONFIG argument (the keys ``arft.sandbox.launcher`` reads)."""
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
        "workspace_seed": limits.workspace_tmpfs_copy, "seccomp": limits.syscall_filter,
        "deny_mqueue": not limits.posix_mqueues,
    }


def kill_sandbox(pid: int) -> None:
    """SIGKILL a sandbox started from ``sandbox_command`` (``pid``: the launcher's): the launcher,
    the sandbox's init and, with a pid namespace, every process inside it.

    The launcher called setsid, so its process group id is its pid."""
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
            return
        except ProcessLookupError:
            continue  # not a group leader yet (or gone): try the process itself
        except PermissionError:
            return


def warn_if_degraded(isolation: Sequence[str]) -> None:
    """A ``RuntimeWarning`` (shown once per reason) when the launcher ran without its syscall
    filter: the run's ``isolation`` says so too, but nobody may be reading it."""
    for layer in isolation:
        if layer.startswith("seccomp_unavailable: "):
            warnings.warn(f"arft sandbox: commands run without the seccomp syscall filter "
                          f"({layer.split(': ', 1)[1]})", RuntimeWarning, stacklevel=3)


class LaunchReport(TypedDict, total=False):
    """The launcher's report lines merged (``launcher/report.py`` and ``process_tree`` send them)."""

    isolation: list[str]
    error: str
    exit: int
    signal: int
    command_exit: int
    command_signal: int


def read_report(fd: int) -> LaunchReport:
    """Merge the launcher's JSON lines (isolation, error, exit/signal) into one dict."""
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, _REPORT_CHUNK)
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
    return cast(LaunchReport, merged)  # the keys the launcher sends
