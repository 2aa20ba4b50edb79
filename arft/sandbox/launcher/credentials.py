"""Who the command runs as and what it may use: the sandbox uid (nobody when we are root), the
workspace handed to it, rlimits, no_new_privs and the parent-death signal."""

from __future__ import annotations

import os
import resource
import signal
import stat

from .report import Report, try_layer
from .syscalls import PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, prctl

NOBODY = 65534


def give_workspace(ws: str, uid: int, gid: int) -> None:
    """Hand the workspace tree to the sandbox uid; never follows links (a symlink or hard link
    planted by an earlier command must not make us chown a file outside the workspace)."""
    for _root, _dirs, files, rootfd in os.fwalk(ws, follow_symlinks=False):
        st = os.stat(rootfd)
        if st.st_uid != uid:
            os.chown(rootfd, uid, gid)
        for name in files:
            st = os.stat(name, dir_fd=rootfd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid != uid:
                os.chown(name, uid, gid, dir_fd=rootfd, follow_symlinks=False)


def set_limits(cfg: dict, report: Report) -> None:
    """rlimits: soft == hard so the command cannot raise them again (CPU: SIGXCPU, then SIGKILL)."""
    lim = resource.setrlimit
    lim(resource.RLIMIT_AS, (cfg["memory_bytes"], cfg["memory_bytes"]))
    lim(resource.RLIMIT_CPU, (cfg["cpu_s"], cfg["cpu_s"] + 1))
    lim(resource.RLIMIT_FSIZE, (cfg["fsize_bytes"], cfg["fsize_bytes"]))
    lim(resource.RLIMIT_NPROC, (cfg["nproc"], cfg["nproc"]))
    lim(resource.RLIMIT_CORE, (0, 0))
    report.add("rlimits")


def nobody_exists(report: Report) -> None:
    """As root, make sure uid nobody is mapped (it is not in e.g. `unshare -r`) before we start."""
    with open("/proc/self/uid_map") as f:
        ranges = [tuple(int(x) for x in line.split()) for line in f if line.strip()]
    if not any(inside <= NOBODY < inside + count for inside, _outside, count in ranges):
        report.fail(f"running as root in a user namespace without uid {NOBODY}: run arft as an "
                    f"ordinary user, or as a root that has uid {NOBODY}; refusing to run the "
                    "command as root")


def become_nobody(report: Report) -> None:
    """Drop from root to nobody for good; a failure aborts (never run the command as root)."""
    try:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    except OSError as e:
        report.fail(f"cannot drop to uid {NOBODY} ({e}): run arft as an ordinary user, or as a "
                    f"root that has uid {NOBODY}; refusing to run the command as root")
    if 0 in (os.getuid(), os.geteuid(), os.getgid(), os.getegid()):
        report.fail("still root after setuid; refusing to run the command")
    report.add("unprivileged_uid")


def drop_privileges(userns: bool, report: Report) -> None:
    """The last steps before exec: unprivileged uid, no_new_privs, parent-death signal."""
    if os.geteuid() == 0:
        become_nobody(report)
    elif userns:
        report.add("unprivileged_uid")  # not root inside it: capabilities are lost at exec
    try_layer(report, "no_new_privs", prctl, PR_SET_NO_NEW_PRIVS, 1)
    # Set after the uid change: changing credentials clears the parent-death signal.
    try_layer(report, "pdeathsig", prctl, PR_SET_PDEATHSIG, signal.SIGKILL)
