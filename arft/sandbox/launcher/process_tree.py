"""The launcher's processes and the order of the steps: the supervisor (reports how the sandbox
ended, then kills its whole process group), the sandbox's init (sets up the filesystem, limits
and uid, then reaps orphans) and the command it execs."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

from .credentials import NOBODY, drop_privileges, give_workspace, nobody_exists, set_limits
from .mounts import fresh_proc, open_readable, private_mounts, private_mqueue, readonly_everything
from .namespaces import enter_namespaces
from .report import Report
from .seccomp import install, open_libseccomp, prepare
from .syscalls import PR_SET_PDEATHSIG, prctl

if TYPE_CHECKING:
    import ctypes


def supervise(child: int, report: Report) -> None:
    """Wait for the command, report how it ended, then kill everything left in our group."""
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        report.send(signal=os.WTERMSIG(status))
    else:
        report.send(exit=os.WEXITSTATUS(status))
    os.killpg(0, signal.SIGKILL)


def run_child(cfg: dict, argv: list[str], report: Report, userns: bool, seccomp_lib: "ctypes.CDLL | str") -> None:
    """Set up the filesystem, limits, uid and syscall filter, then exec the command (never
    returns). ``seccomp_lib``: ``seccomp.open_libseccomp()``'s answer, taken before any uid change."""
    ws = cfg["workspace"]
    root_mode = os.geteuid() == 0
    uid, gid = (NOBODY, NOBODY) if root_mode else (os.geteuid(), os.getegid())
    _isolate_filesystem(cfg, report, uid, gid)
    env = dict(os.environ)
    if cfg["set_tmpdir"] and "private_tmp" in report.layers:
        env["TMPDIR"] = "/tmp"
    try:
        os.chdir(ws)  # after the mounts: the cwd must be the writable bind mount
    except OSError:
        pass  # no mounts, and the path is closed to us: the old cwd is the same folder
    try:
        if root_mode:
            give_workspace(".", uid, gid)
        set_limits(cfg, report)
    except OSError as e:
        report.fail(f"cannot prepare the workspace {ws}: {e}")
    program = find_program(argv[0], env.get("PATH", os.defpath))
    syscall_filter = prepare(seccomp_lib, cfg, report)
    drop_privileges(userns, report)
    # Last: the filter also denies calls the steps above make (unshare, mount). It needs
    # no_new_privs, set by drop_privileges.
    install(seccomp_lib, syscall_filter, report)
    missing = [layer for layer in cfg["required"] if layer not in report.layers]
    if missing:
        report.fail(f"required isolation {missing} is not available here (applied: "
                    f"{report.layers}); run on a host that allows it or drop the requirement")
    report.send(isolation=report.layers)
    command = fork_retrying()
    if command == 0:
        exec_command(program, argv, env, report)
    wait_as_init(command, report)


def _isolate_filesystem(cfg: dict, report: Report, uid: int, gid: int) -> None:
    """The mount steps (only inside a new mount namespace); a failure is reported, not fatal."""
    fds = open_readable(cfg)
    if "mountns" in report.layers:
        try:
            private_mounts(cfg, report, uid, gid, fds)
            readonly_everything(cfg, report)
            if "ipcns" in report.layers:
                private_mqueue(report)
            if "pidns" in report.layers:
                fresh_proc(report)
        except OSError as e:
            report.add(f"mount_setup_failed: {e}")
    for fd in fds.values():
        os.close(fd)


def fork_retrying(attempts: int = 40, wait_s: float = 0.05) -> int:
    """``os.fork`` as the sandbox uid, waiting out EAGAIN for up to ~2 s.

    RLIMIT_NPROC counts every process of the sandbox uid on the host, so the processes of a
    sandbox that is still being torn down (a killed fork bomb, say) can briefly use up the
    limit of the next one: wait for them to go rather than fail the call.
    """
    for _ in range(attempts - 1):
        try:
            return os.fork()
        except BlockingIOError:
            time.sleep(wait_s)
    return os.fork()


def exec_command(program: str, argv: list[str], env: dict[str, str], report: Report) -> None:
    """Exec the command with default signal dispositions (never returns)."""
    # Python ignores SIGPIPE and SIGXFSZ, and ignored signals survive exec: restore them so
    # `yes | head` ends quietly and an oversized file write kills the writer.
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # cleared by fork: set it again
    except OSError:
        pass
    try:
        os.execve(program, argv, env)
    except OSError as e:
        report.fail(f"cannot run {argv[0]!r}: {e.strerror}", code=127)


def wait_as_init(command: int, report: Report) -> None:
    """Stay as the sandbox's pid 1: reap orphans until the command ends, then report its status.

    The command must not be pid 1 itself: the kernel shields a namespace's init from signals
    it has no handler for, so SIGXCPU, SIGXFSZ and `kill` from inside would not stop it.
    """
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(0)
        if pid == command:
            break
    if os.WIFSIGNALED(status):
        report.send(command_signal=os.WTERMSIG(status))
        os._exit(128 + os.WTERMSIG(status))
    report.send(command_exit=os.WEXITSTATUS(status))
    os._exit(os.WEXITSTATUS(status))


def find_program(name: str, path: str) -> str:
    """``name`` looked up on ``path`` now: after the uid drop nothing may be imported or searched
    lazily (the interpreter's own files may be closed to the sandbox uid)."""
    if "/" in name:
        return name
    for folder in path.split(":"):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return name  # execve reports "No such file or directory"


def main() -> None:
    """``CONFIG -- ARGV...`` from the command line: run ARGV sandboxed as CONFIG says."""
    cfg = json.loads(sys.argv[1])
    argv = sys.argv[3:]
    report = Report(cfg["report_fd"])
    os.set_inheritable(report.fd, False)  # the command must not hold the report pipe
    os.setsid()
    if os.geteuid() == 0:
        nobody_exists(report)
    try:
        # Before any uid or namespace change: the cwd follows us into the new mount namespace
        # even where the sandbox uid could not walk the path (see private_mounts).
        os.chdir(cfg["workspace"])
    except OSError as e:
        report.fail(f"cannot enter the workspace {cfg['workspace']}: {e}")
    seccomp_lib = open_libseccomp()  # before any uid change: it may be closed to nobody
    userns = enter_namespaces(cfg, report)
    child = os.fork()
    if child == 0:
        try:
            run_child(cfg, argv, report, userns, seccomp_lib)
        except BaseException as e:  # noqa: BLE001 - the child must never return into main()
            report.fail(f"sandbox setup failed: {e!r}")
    supervise(child, report)
