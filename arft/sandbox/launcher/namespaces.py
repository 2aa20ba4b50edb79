"""Entering new namespaces (network, mount, pid, ipc, uts), through a user namespace when we
lack CAP_SYS_ADMIN; each one the kernel refuses is skipped and left out of the report."""

from __future__ import annotations

import os

from .credentials import NOBODY, become_nobody, give_workspace
from .report import Report, try_layer
from .syscalls import (CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER,
                       CLONE_NEWUTS, PR_SET_DUMPABLE, prctl, sethostname, unshare)


def enter_namespaces(cfg: dict, report: Report) -> bool:
    """Enter what namespaces we can; True when inside a new user namespace."""
    wanted = [(CLONE_NEWNS, "mountns"), (CLONE_NEWPID, "pidns"), (CLONE_NEWIPC, "ipcns"),
              (CLONE_NEWUTS, "utsns")]
    if not cfg["network"]:
        wanted.insert(0, (CLONE_NEWNET, "netns"))
    userns = False
    if os.geteuid() != 0 or not try_layer(report, wanted[0][1], unshare, wanted[0][0]):
        if os.geteuid() == 0:
            _root_becomes_nobody(report)
        userns = _enter_userns(report)
        if userns:
            try_layer(report, wanted[0][1], unshare, wanted[0][0])
    for flag, name in wanted[1:]:
        try_layer(report, name, unshare, flag)
    if "utsns" in report.layers:
        sethostname(b"sandbox")
    if userns:
        # We hold capabilities in the user namespace until exec, and the command will run as
        # our uid: non-dumpable, it cannot ptrace us (or our init) to borrow them. exec makes
        # the command itself dumpable again.
        prctl(PR_SET_DUMPABLE, 0)
    return userns


def _root_becomes_nobody(report: Report) -> None:
    """Root without CAP_SYS_ADMIN (e.g. a default container). A user namespace made by root could
    only map root to itself (full power over root's files), so first become nobody, then make
    one as nobody."""
    try:
        give_workspace(".", NOBODY, NOBODY)
    except OSError as e:
        report.fail(f"cannot hand the workspace to uid {NOBODY}: {e}")
    become_nobody(report)
    # setuid made us non-dumpable, which makes /proc/self/uid_map root's: undo that.
    try:
        prctl(PR_SET_DUMPABLE, 1)
    except OSError:
        pass  # then the user namespace below fails and is not reported


def _enter_userns(report: Report) -> bool:
    """A user namespace mapping only our own (unprivileged) uid: capabilities inside it, none
    outside; they are lost at exec since the uid inside is not 0."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        unshare(CLONE_NEWUSER)
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1\n")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1\n")
    except OSError:
        return False
    report.add("userns")
    return True
