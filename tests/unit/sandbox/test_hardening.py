"""The harder layers of the sandbox: the seccomp filter, IPC that does not survive a run or a
grade, host folders hidden by default, and a workspace copied into a bounded tmpfs.

As in ``test_process``, each test first checks that the host granted the layer it relies on, and
a control run with the layer off shows the same probe succeeds without it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from arft.sandbox import (CallLimits, SandboxedFunction, SandboxLimits, WarmPool, create_workspace,
                          run_sandboxed)
from arft.sandbox.command import warn_if_degraded
from arft.sandbox.launcher.report import Report
from arft.sandbox.launcher.seccomp import LIBRARIES, open_libseccomp, prepare

from .helpers import need

FAST = SandboxLimits(timeout_s=20)
SYSCALLS = '''
import ctypes, errno, os, threading, subprocess, time
libc = ctypes.CDLL(None, use_errno=True)
def call(fn, *args):
    ctypes.set_errno(0)
    ret = fn(*args)
    return errno.errorcode.get(ctypes.get_errno(), "ok") if ret < 0 else "ok"
threading.Thread(target=lambda: None).start()  # pthread_create: clone3 falls back to clone
child = os.fork()
if child == 0:
    os.execv("/bin/sleep", ["sleep", "5"])
print("ptrace", call(libc.ptrace, 16, child, 0, 0))  # PTRACE_ATTACH to our own child
os.kill(child, 9)
print("unshare", call(libc.unshare, 0x10000000))
print("mount", call(libc.mount, b"none", b"/tmp", b"tmpfs", 0, None))
print("keyctl", call(libc.syscall, 250, 0, -3, 0))
print("clone3", call(libc.syscall, 435, None, 0))
print("child", subprocess.run(["true"]).returncode)
'''


def python(code: str) -> tuple[list[str], list[Path]]:
    """This test's own interpreter in the sandbox (its install may sit under /root)."""
    return [os.path.realpath(sys.executable), "-S", "-c", code], [Path(sys.base_prefix)]


def outcomes(stdout: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)


async def test_the_filter_denies_what_a_command_never_needs(ws: Path,
                                                            layers: tuple[str, ...]) -> None:
    need(layers, "seccomp")
    if os.uname().machine != "x86_64":
        pytest.skip("the raw syscall numbers below are x86_64's")
    argv, readable = python(SYSCALLS)
    result = await run_sandboxed(argv, ws, FAST, readable=readable)
    assert result.exit_code == 0, result
    assert outcomes(result.stdout) == {"ptrace": "EPERM", "unshare": "EPERM", "mount": "EPERM",
                                       "keyctl": "EPERM", "clone3": "ENOSYS", "child": "0"}
    # Control: without the filter these calls get as far as the kernel's own checks.
    off = await run_sandboxed(argv, ws, SandboxLimits(timeout_s=20, syscall_filter=False),
                              readable=readable)
    assert "seccomp" not in off.isolation
    assert outcomes(off.stdout)["ptrace"] == "ok" and outcomes(off.stdout)["clone3"] != "ENOSYS"


def test_a_missing_libseccomp_is_reported_never_silent() -> None:
    assert LIBRARIES[0] == "libseccomp.so.2"
    report = Report(-1)
    why = open_libseccomp(("libseccomp-missing.so.9",))
    assert isinstance(why, str) and "apt-get install libseccomp2" in why
    assert prepare(why, {}, report) is None
    assert [x for x in report.layers if x.startswith("seccomp_unavailable: ")] == [
        f"seccomp_unavailable: {why}"]
    assert prepare(why, {"seccomp": False}, Report(-1)) is None  # turned off: nothing to say
    with pytest.warns(RuntimeWarning, match="without the seccomp syscall filter"):
        warn_if_degraded(tuple(report.layers))


async def test_sysv_ipc_does_not_survive_a_run(ws: Path, layers: tuple[str, ...]) -> None:
    need(layers, "ipcns")
    make = 'import ctypes; print(ctypes.CDLL(None).shmget(0x41524656, 4096, 0o1600))'
    look = 'import ctypes; print(ctypes.CDLL(None).shmget(0x41524656, 0, 0))'
    made = await run_sandboxed(python(make)[0], ws, FAST, readable=python(make)[1])
    assert made.stdout.strip() not in ("", "-1"), made  # the segment was made...
    with open("/proc/sysvipc/shm") as f:  # ...in the sandbox's own namespace, not the host's
        assert str(0x41524656) not in [line.split()[0] for line in f.readlines()[1:]]
    seen = await run_sandboxed(python(look)[0], ws, FAST, readable=python(look)[1])
    assert seen.stdout.strip() == "-1", seen


IPC_GRADER = '''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
KEY = 0x41524657

def grade(step):
    flags = 0o1600 if step == "make" else 0
    ids = [libc.shmget(KEY, 4096 if flags else 0, flags), libc.semget(KEY, int(bool(flags)), flags),
           libc.msgget(KEY, flags)]
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    mq = rt.mq_open(b"/arft-test", os.O_RDWR | (os.O_CREAT if flags else 0), 0o600, None)
    return {"ids": ids, "again": libc.shmget(KEY, 0, 0), "mq": [mq, ctypes.get_errno()]}
'''


async def test_ipc_does_not_survive_a_grade_on_a_warm_worker(tmp_path: Path,
                                                            layers: tuple[str, ...]) -> None:
    need(layers, "ipcns", "seccomp")
    fn = SandboxedFunction(IPC_GRADER, limits=CallLimits(timeout_s=10, memory_mb=256, disk_mb=8))
    async with WarmPool(fn, 1, scratch_root=tmp_path) as pool:
        made = await pool.call("make")
        looked = await pool.call("look")
    assert made.ok and looked.ok, (made, looked)
    assert min(made.value["ids"]) >= 0 and made.value["again"] >= 0  # made, and findable
    assert made.value["mq"] == [-1, 1]  # POSIX queues cannot be listed to be removed: EPERM
    assert looked.value["ids"] == [-1, -1, -1], looked.value  # gone before the next grade


async def test_host_folders_are_hidden_by_default(layers: tuple[str, ...]) -> None:
    need(layers, "hidden_paths")
    if not os.path.isdir("/var/tmp"):
        pytest.skip("no /var/tmp here")
    folder = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="arft-hidden-test-"))
    try:
        folder.chmod(0o755)
        token = uuid.uuid4().hex
        (folder / "secret").write_text(token)
        (folder / "secret").chmod(0o644)
        ws = create_workspace(folder / "workspaces", None, "trace_" + token)
        probe = ["cat", str(folder / "secret")]
        hidden = await run_sandboxed(probe, ws, FAST)  # /var is not a system folder
        assert token not in hidden.stdout and hidden.exit_code != 0
        assert "hidden_paths" in hidden.isolation
        shown = await run_sandboxed(probe, ws, FAST, hidden=())  # control
        assert shown.stdout == token
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def test_workspace_copy_in_a_bounded_tmpfs(ws: Path, layers: tuple[str, ...]) -> None:
    need(layers, "mountns")
    (ws / "sub").mkdir()
    (ws / "sub" / "data.txt").write_text("from the host\n")
    (ws / "link").symlink_to("/etc/hostname")
    limits = SandboxLimits(timeout_s=20, workspace_tmpfs_mb=8, workspace_tmpfs_copy=True)
    result = await run_sandboxed(
        ["bash", "-c", "cat sub/data.txt; readlink link; echo new > sub/new; "
                       "head -c 20M /dev/zero > big; echo rc=$?"], ws, limits)
    assert "workspace_copy" in result.isolation and "workspace_tmpfs" in result.isolation
    assert result.stdout.splitlines()[:2] == ["from the host", "/etc/hostname"]
    assert result.stdout.strip().endswith("rc=1")  # 20 MiB do not fit in 8
    assert sorted(p.name for p in ws.rglob("*")) == ["data.txt", "link", "sub"]  # not copied back
    (ws / "sub" / "data.txt").write_bytes(b"x" * (2 << 20))
    too_big = await run_sandboxed(["true"], ws, SandboxLimits(
        timeout_s=20, workspace_tmpfs_mb=1, workspace_tmpfs_copy=True))
    assert too_big.error is not None and "1 MiB tmpfs" in too_big.error, too_big
    with pytest.raises(ValueError, match="workspace_tmpfs_copy"):
        SandboxLimits(workspace_tmpfs_copy=True)
