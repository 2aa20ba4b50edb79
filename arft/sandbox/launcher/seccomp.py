"""The syscall filter: a seccomp deny-list, built with libseccomp (``libseccomp.so.2``, through
ctypes) and loaded as the launcher's last step before the command is forked and exec'd.

The calls a shell command or a grader never needs fail with EPERM (``DENIED``): tracing and
reading other processes, mounting, new namespaces (``unshare``, ``setns``, ``clone`` with a
``CLONE_NEW*`` flag), kernel modules, keyrings, BPF, perf events, kexec, reboot, swap, time
setting, io_uring, userfaultfd, handle-based opens, and the TIOCSTI/TIOCLINUX terminal ioctls.
``clone3`` answers ENOSYS: its flags sit in memory a filter cannot read, and ENOSYS makes the C
library fall back to ``clone``, whose flags we check. Syscalls of another ABI than the native
one (32-bit ``int 0x80`` on x86_64, say) kill the caller (libseccomp's default), so the list
cannot be dodged through a second syscall table. With the config's ``deny_mqueue`` (the warm
pool's workers, whose IPC namespace outlives a call) ``mq_open`` is denied too.

Why libseccomp rather than a hand-written BPF program: it knows every architecture's syscall
numbers, ABIs and quirks (x32, multiplexed socketcall), which a hand-written table would get
wrong somewhere. It is present on nearly every Linux (apt, systemd and container runtimes
depend on it); where it is missing the sandbox runs without the filter and says so in its
report (``seccomp_unavailable: <why>`` instead of ``seccomp``), and a caller that cannot live
without it lists ``seccomp`` in ``required_isolation``.
"""

from __future__ import annotations

import ctypes
import errno

from .report import Report
from .syscalls import (CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER,
                       CLONE_NEWUTS)

DENIED = (
    # other processes: trace them, read or write their memory, compare or steal their fds
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # the filesystem tree and namespaces: set up once by the launcher, never again
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    # kernel attack surface a command has no use for
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "add_key", "request_key", "open_by_handle_at",
    "name_to_handle_at", "lookup_dcookie", "fanotify_init",
    # the machine itself
    "kexec_load", "kexec_file_load", "reboot", "init_module", "finit_module", "delete_module",
    "create_module", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog",
    "vhangup", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
    "setdomainname", "iopl", "ioperm", "nfsservctl", "uselib", "_sysctl",
)
NAMESPACE_FLAGS = (CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                   CLONE_NEWNET, 0x02000000, 0x00000080)  # + CLONE_NEWCGROUP, CLONE_NEWTIME
TERMINAL_IOCTLS = (0x5412, 0x541C)  # TIOCSTI (type into a terminal), TIOCLINUX
# The kernel reads an ioctl request as 32 bits: compare only those (0x1_0000_5412 is TIOCSTI too).
IOCTL_MASK = 0xFFFFFFFF

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7
LIBRARIES = ("libseccomp.so.2", "libseccomp.so")


def scmp_act_errno(code: int) -> int:
    """libseccomp's SCMP_ACT_ERRNO(code): fail the call with ``code``."""
    return 0x00050000 | (code & 0xFFFF)


class ArgCmp(ctypes.Structure):
    """``struct scmp_arg_cmp``: compare syscall argument ``arg`` with ``op``."""

    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def open_libseccomp(names: tuple[str, ...] = LIBRARIES) -> ctypes.CDLL | str:
    """The library (the first of ``names`` that loads), or why it cannot be used. Call it
    early: after the uid drop the sandbox uid may not be allowed to open it."""
    problems = []
    for name in names:
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            break
        except OSError as e:
            problems.append(str(e))
    else:
        return (f"libseccomp is not installed ({problems[0]}); install it (Debian/Ubuntu: "
                "apt-get install libseccomp2, Fedora: dnf install libseccomp) to filter syscalls")
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(ArgCmp)]
    return lib


def _rule(lib: ctypes.CDLL, ctx: int, action: int, name: str,
          cmp: tuple[int, int, int, int] | None = None) -> None:
    """Add one rule; a syscall this architecture lacks is skipped (nothing to deny)."""
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr < 0:
        return
    args = (ArgCmp * 1)(ArgCmp(*cmp)) if cmp else None
    ret = lib.seccomp_rule_add_array(ctx, action, nr, 1 if cmp else 0, args)
    if ret < 0:
        raise OSError(-ret, f"seccomp rule for {name}: {errno.errorcode.get(-ret, ret)}")


def build_filter(lib: ctypes.CDLL, deny_mqueue: bool = False) -> int:
    """A libseccomp context holding the deny-list (not loaded yet); release it after loading.
    ``deny_mqueue``: POSIX message queues too (``mq_open``)."""
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise OSError(errno.ENOMEM, "seccomp_init failed")
    try:
        eperm = scmp_act_errno(errno.EPERM)
        for name in DENIED + (("mq_open",) if deny_mqueue else ()):
            _rule(lib, ctx, eperm, name)
        for flag in NAMESPACE_FLAGS:  # (flags & flag) == flag: a new namespace asked for
            _rule(lib, ctx, eperm, "clone", (0, SCMP_CMP_MASKED_EQ, flag, flag))
        for request in TERMINAL_IOCTLS:
            _rule(lib, ctx, eperm, "ioctl", (1, SCMP_CMP_MASKED_EQ, IOCTL_MASK, request))
        _rule(lib, ctx, scmp_act_errno(errno.ENOSYS), "clone3")
    except BaseException:
        lib.seccomp_release(ctx)
        raise
    return ctx


def prepare(lib: ctypes.CDLL | str, cfg: dict, report: Report) -> int | None:
    """Build the filter while we may still read everything; None when ``cfg`` turns it off or
    it cannot be built (then reported)."""
    if not cfg.get("seccomp", True):
        return None
    if isinstance(lib, str):
        report.add(f"seccomp_unavailable: {lib}")
        return None
    try:
        return build_filter(lib, bool(cfg.get("deny_mqueue")))
    except OSError as e:
        report.add(f"seccomp_unavailable: {e}")
        return None


def install(lib: ctypes.CDLL | str, ctx: int | None, report: Report) -> None:
    """Load the filter into this process (inherited by everything it forks and execs).

    Needs no_new_privs (or CAP_SYS_ADMIN); a failure is reported, not fatal."""
    if ctx is None or isinstance(lib, str):
        return
    try:
        ret = lib.seccomp_load(ctx)
    finally:
        lib.seccomp_release(ctx)
    if ret < 0:
        report.add(f"seccomp_unavailable: seccomp_load failed ({errno.errorcode.get(-ret, ret)})")
    else:
        report.add("seccomp")
