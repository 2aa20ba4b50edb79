"""Cleaning up after one call of the sandboxed grader worker (``_grader_worker.py``).

Loaded by the worker from its own folder by file path (never through ``sys.path``, which belongs
to the user's code): it imports only the standard library. After every call the worker kills what
the call left running (``kill_leftovers``), empties the scratch folders (``wipe``) and removes
the SysV IPC objects the call made in the worker's own IPC namespace (``remove_sysv_ipc``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import time

IPC_RMID = 0
SYSV_KINDS = ("shm", "sem", "msg")


def kill_leftovers(child: int, own_pidns: bool) -> int:
    """Kill the child's process group (and, in our own pid namespace, every process but us and
    init); reap the child. Its wait status."""
    for kill in (os.killpg, os.kill):
        try:
            kill(child, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            status = 0
            break
    if own_pidns:
        # Processes that left the group (setsid) are still in our pid namespace: kill(-1)
        # signals all of them except init and us. Repeat until none is left (a fork bomb may
        # fork between two sweeps); init reaps them.
        for _ in range(10_000):
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.001)
    return status


def wipe(folder: str, keep: str) -> None:
    """Delete everything in ``folder`` except the path to ``keep``; chmod what the call locked."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        path = entry.path
        if keep == path or keep.startswith(path + "/"):
            if keep != path:
                wipe(path, keep)
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path, onerror=_unlock_and_retry)
            else:
                os.unlink(path)
        except OSError:
            pass


def _unlock_and_retry(func, path: str, _exc: object) -> None:  # noqa: ANN001
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, ignore_errors=True)
        else:
            func(path)
    except OSError:
        pass


def sysv_ids(kind: str) -> list[int]:
    """The ids of the SysV IPC objects of ``kind`` (shm, sem, msg) in our IPC namespace."""
    try:
        with open(f"/proc/sysvipc/{kind}") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return []
    return [int(row.split()[1]) for row in rows if row.strip()]


def remove_sysv_ipc(wait_s: float = 2.0) -> bool:
    """Remove every SysV shared memory segment, semaphore set and message queue of our own IPC
    namespace (only the sandbox lives there); True once none is left. A segment goes when its
    last user has exited, so a just-killed call may hold one for a moment: wait for it."""
    libc = ctypes.CDLL(None, use_errno=True)
    deadline = time.monotonic() + wait_s
    while True:
        left = 0
        for kind in SYSV_KINDS:
            for ident in sysv_ids(kind):
                left += 1
                if kind == "sem":
                    libc.semctl(ctypes.c_int(ident), ctypes.c_int(0), ctypes.c_int(IPC_RMID))
                else:
                    getattr(libc, f"{kind}ctl")(ctypes.c_int(ident), ctypes.c_int(IPC_RMID), None)
        if not left:
            return True
        if time.monotonic() >= deadline:
            return not any(sysv_ids(kind) for kind in SYSV_KINDS)
        time.sleep(0.01)
