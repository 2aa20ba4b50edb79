"""The Linux calls the standard library lacks (unshare, mount, prctl), through libc.

Each raises ``OSError`` with the kernel's errno, like the ``os`` functions do.
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 1 << 18, 1 << 21, 1 << 24
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
MNT_DETACH, PR_SET_DUMPABLE = 2, 4

LIBC = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(LIBC.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int,
          data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return s.encode() if s is not None else None

    _check(LIBC.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def umount_detached(target: str) -> None:
    """Lazy unmount (MNT_DETACH), errors ignored: used only to undo a failed setup."""
    LIBC.umount2(target.encode(), ctypes.c_int(MNT_DETACH))


def prctl(option: int, arg: int) -> None:
    _check(LIBC.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl")


def sethostname(name: bytes) -> None:
    """Set the host name (of the new UTS namespace); errors ignored as before."""
    LIBC.sethostname(name, ctypes.c_size_t(len(name)))
