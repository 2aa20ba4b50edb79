"""Filling the workspace's private tmpfs with a copy of the host folder it covers (the config's
``workspace_seed``), so a command that only needs to read and scratch, such as a test run, works
on the files it expects while whatever it writes stays inside a size-bounded tmpfs and never
reaches the host disk. Nothing is copied back.

The copy goes by file descriptors opened without following links: a symlink is copied as a
link, never as what it points at, and fifos, sockets and devices are left out.
"""

from __future__ import annotations

import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


def copy_tree(src_fd: int, dst_fd: int) -> None:
    """Copy the folder open as ``src_fd`` into the (empty) folder open as ``dst_fd``."""
    with os.scandir(src_fd) as entries:
        for entry in entries:
            _copy_entry(entry, src_fd, dst_fd)


def _copy_entry(entry: os.DirEntry, src_fd: int, dst_fd: int) -> None:
    """Copy one entry: a link as a link, a folder recursively, a regular file by content."""
    name = entry.name
    st = entry.stat(follow_symlinks=False)
    mode = stat.S_IMODE(st.st_mode) & 0o777  # no setuid/setgid/sticky bits
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=src_fd), name, dir_fd=dst_fd)
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(name, 0o700, dir_fd=dst_fd)
        sub_src = os.open(name, _DIR_FLAGS, dir_fd=src_fd)
        sub_dst = os.open(name, _DIR_FLAGS, dir_fd=dst_fd)
        try:
            copy_tree(sub_src, sub_dst)
            os.chmod(sub_dst, mode | 0o700)  # we must still be able to enter it
        finally:
            os.close(sub_src)
            os.close(sub_dst)
    elif stat.S_ISREG(st.st_mode):
        _copy_file(src_fd, dst_fd, name, mode)


def _copy_file(src_fd: int, dst_fd: int, name: str, mode: int) -> None:
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_fd)
    try:
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      mode | 0o600, dir_fd=dst_fd)
        try:
            while chunk := os.read(src, _CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst, view):]
        finally:
            os.close(dst)
    finally:
        os.close(src)


def seed_workspace(original_fd: int, workspace: str) -> None:
    """Copy the host folder (open as ``original_fd``, taken before the tmpfs covered it) into
    the tmpfs now mounted at ``workspace``; ``OSError`` (ENOSPC: it does not fit) if it fails."""
    dst = os.open(workspace, _DIR_FLAGS)
    try:
        copy_tree(original_fd, dst)
    finally:
        os.close(dst)
