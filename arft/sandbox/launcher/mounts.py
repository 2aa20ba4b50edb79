"""The sandbox's view of the filesystem, set up inside the new mount namespace: a private /tmp
and /dev/shm, ``hidden`` folders and closed ancestors behind empty tmpfs, the workspace (and the
``readable`` paths) bound in place, every other mount read-only, a fresh /proc and, where the host
has one, a private /dev/mqueue."""

from __future__ import annotations

import os
import re
import stat

from .report import Report, try_layer
from .seed import seed_workspace
from .syscalls import (MS_BIND, MS_NOATIME, MS_NODEV, MS_NODIRATIME, MS_NOEXEC, MS_NOSUID,
                       MS_PRIVATE, MS_RDONLY, MS_REC, MS_RELATIME, MS_REMOUNT, MS_STRICTATIME,
                       mount, umount_detached)

# Per-mount flags that must be kept on a remount (the kernel refuses to clear locked ones).
KEEP_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
              "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}


def _traversable(path: str, uid: int, gid: int) -> bool:
    if os.geteuid() == uid:
        # We are the sandbox uid (in a user namespace, where unmapped owners look like nobody):
        # ask the kernel. access() drops our namespace capabilities for the check.
        return os.access(path, os.X_OK)
    st = os.stat(path)  # root asking on behalf of nobody
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _closed_ancestor(path: str, uid: int, gid: int) -> str | None:
    """The highest ancestor of ``path`` the sandbox uid cannot enter (None when all are open)."""
    parts = path.strip("/").split("/")[:-1]
    current = ""
    for part in parts:
        current += "/" + part
        if not _traversable(current, uid, gid):
            return current
    return None


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _bind_into(target: str, source: str, root: str) -> None:
    """Recreate ``target``'s path below the fresh tmpfs at ``root`` and bind ``source`` there."""
    rel = target[len(root.rstrip("/")) + 1:].split("/")
    current = root.rstrip("/")
    for part in rel[:-1]:
        current += "/" + part
        os.makedirs(current, mode=0o755, exist_ok=True)
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC)


def open_readable(cfg: dict) -> dict[str, int]:
    """O_PATH handles on the readable paths we can reach (taken inside the new mount namespace:
    a mount can only be bound from a handle of the same namespace)."""
    fds = {}
    for path in cfg["readable"]:
        try:
            fds[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # missing, or closed to us: nothing to show
    return fds


def private_mounts(cfg: dict, report: Report, uid: int, gid: int, fds: dict[str, int]) -> None:
    """Fresh /tmp and /dev/shm; hide closed ancestors of the workspace and readable paths.

    The workspace is bound from the current directory, which ``main`` set to it before any
    uid change (the path itself may be closed to us by then)."""
    ws = cfg["workspace"]
    sources = {ws: ".", **{t: f"/proc/self/fd/{fd}" for t, fd in fds.items() if t != ws}}
    targets = list(sources)
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # first: nothing may propagate to the host
    roots = {"/tmp": 0o1777, "/dev/shm": 0o1777}
    for t in targets:
        closed = _closed_ancestor(t, uid, gid)
        if closed and closed != "/" and not any(_under(closed, r) for r in roots):
            roots[closed] = 0o755
    hidden = _hidden_roots(cfg, roots)
    roots.update(dict.fromkeys(hidden, 0o755))
    mounted: list[str] = []
    try:
        for root in sorted(roots, key=len):
            if (not os.path.isdir(root) or any(_under(root, t) for t in targets)
                    or any(_under(root, m) for m in mounted)):
                continue  # missing, holds a target, or already inside a fresh tmpfs
            mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV,
                  f"size={cfg['tmp_mb']}m,mode={roots[root]:o}")
            mounted.append(root)
            for t in targets:
                if _under(t, root) and t != root:
                    _bind_into(t, sources[t], root)
        if not any(_under(ws, m) for m in mounted):
            mount(".", ws, None, MS_BIND | MS_REC)  # its own mount, so that it stays writable
            mounted.append(ws)
        if cfg.get("workspace_tmpfs_mb"):
            # Over the bind: the command's cwd (entered after the mounts) is this fresh tmpfs.
            mount("tmpfs", ws, "tmpfs", MS_NOSUID | MS_NODEV,
                  f"size={cfg['workspace_tmpfs_mb']}m,mode=700,uid={uid},gid={gid}")
            mounted.append(ws)
            if cfg.get("workspace_seed"):
                _seed(ws, cfg["workspace_tmpfs_mb"], report)
            report.add("workspace_tmpfs")
    except OSError:
        for point in reversed(mounted):  # leave the filesystem as the host sees it
            umount_detached(point)
        raise
    for root in mounted:
        if roots.get(root) == 0o1777:
            report.add("private_" + root.strip("/").replace("/", "_"))
        if root in hidden:
            report.add("hidden_paths")


def _seed(ws: str, size_mb: int, report: Report) -> None:
    """Copy the host folder (still our cwd, under the tmpfs) into the tmpfs; a failure aborts:
    the command must not run on an empty or half-copied workspace."""
    try:
        original = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            seed_workspace(original, ws)
        finally:
            os.close(original)
    except OSError as e:
        hint = (f": the workspace is larger than its {size_mb} MiB tmpfs" if e.errno == 28
                else "")
        report.fail(f"cannot copy the workspace into its private tmpfs ({e}){hint}")
    report.add("workspace_copy")


def _hidden_roots(cfg: dict, roots: dict[str, int]) -> list[str]:
    """The folders of ``cfg["hidden"]`` to cover with an empty tmpfs: real directories only
    (never a symlink: the mount would land on its target), not "/", not inside another root."""
    found = []
    for path in cfg.get("hidden", ()):
        if (path != "/" and os.path.isdir(path) and not os.path.islink(path)
                and not any(_under(path, r) for r in roots)):
            found.append(path)
    return found


def _mount_table() -> list[tuple[str, int]]:
    """(mount point, flags to keep) for every mount we can see, parents first."""
    table = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            # The kernel escapes space, tab, newline and backslash as \ooo octal.
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            keep = sum(KEEP_FLAGS.get(o, 0) for o in fields[5].split(","))
            table.append((point, keep))
    return table


def readonly_everything(cfg: dict, report: Report) -> None:
    """Remount every mount read-only (and nosuid) except the workspace and the private tmpfs."""
    writable = {cfg["workspace"], "/tmp", "/dev/shm"}
    failed = []
    for point, keep in _mount_table():
        if point in writable:
            continue
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | keep)
        except OSError as e:
            # ENOENT/EINVAL: a mount hidden under one of our fresh tmpfs, not reachable anyway.
            if e.errno not in (2, 22):
                failed.append(point)
    report.add("readonly_fs" if not failed else "readonly_fs_partial")


def private_mqueue(report: Report) -> None:
    """Over the host's /dev/mqueue (where there is one), the message queues of the sandbox's own
    IPC namespace: the host's queues can no longer be listed, or read through their files."""
    if os.path.isdir("/dev/mqueue") and not os.path.islink("/dev/mqueue"):
        try_layer(report, "private_mqueue", mount, "mqueue", "/dev/mqueue", "mqueue",
                  MS_NOSUID | MS_NODEV | MS_NOEXEC)


def fresh_proc(report: Report) -> None:
    """A /proc of the new pid namespace: the command cannot see (or signal) other processes."""
    try_layer(report, "private_proc", mount, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
