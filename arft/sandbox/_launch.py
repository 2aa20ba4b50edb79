"""The sandbox launcher, run by ``process.py`` as ``python -I -S _launch.py CONFIG -- ARGV...``.

It is a separate, single-threaded, stdlib-only program on purpose: namespace, mount and
credential changes must not happen in the (threaded, possibly huge) trainer process, and
``-I -S`` keeps its start-up to a few milliseconds. It:

1. starts a new session (so the whole process group can be killed as one) and enters the
   workspace (the cwd follows us into the new mount namespace even if the sandbox uid could
   not walk the path);
2. enters new namespaces where the kernel allows it: directly when root with CAP_SYS_ADMIN,
   else inside a new user namespace (as root: after dropping to nobody); network (unless
   allowed), mount, pid, ipc, uts;
3. forks: the parent stays as a supervisor that waits, reports the exit status on the report
   pipe and then SIGKILLs its whole process group (so nothing the command started survives);
4. the child (pid 1 of the new pid namespace when there is one) makes a private /tmp and
   /dev/shm, hides the ``hidden`` folders behind empty tmpfs (optionally puts a private tmpfs
   on the workspace), makes every other mount read-only except the workspace, mounts a fresh /proc,
   hands the workspace to the sandbox uid, sets rlimits, drops to the unprivileged uid, sets
   no_new_privs and a parent-death SIGKILL, and reports the layers it applied;
5. it forks once more: the grandchild execs ARGV, the child stays as init (reaps orphans)
   and reports the command's exit status.

After the uid drop nothing may be imported (the interpreter's own files may be closed to the
sandbox uid). The config keys are written by ``process._launch_config``. Nothing here may
import arft.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import signal
import time
import stat
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 1 << 18, 1 << 21, 1 << 24
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
MNT_DETACH, PR_SET_DUMPABLE = 2, 4
NOBODY = 65534
# Per-mount flags that must be kept on a remount (the kernel refuses to clear locked ones).
KEEP_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
              "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}

LIBC = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(LIBC.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int,
          data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _check(LIBC.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(LIBC.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl")


class Report:
    """JSON lines on the report pipe: what was applied, errors, and the exit status."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.layers: list[str] = ["session"]

    def add(self, layer: str) -> None:
        if layer not in self.layers:
            self.layers.append(layer)

    def send(self, **fields: object) -> None:
        try:
            os.write(self.fd, (json.dumps(fields) + "\n").encode())
        except OSError:
            pass  # the parent is gone; nothing to tell

    def fail(self, message: str, code: int = 126) -> None:
        """Abort before exec: the command never runs."""
        self.send(error=message, isolation=self.layers)
        os.write(2, f"arft sandbox: {message}\n".encode(errors="replace"))
        os._exit(code)


def _try(report: Report, layer: str, fn: object, *args: object) -> bool:
    try:
        fn(*args)  # type: ignore[operator]
    except OSError:
        return False
    report.add(layer)
    return True


def enter_namespaces(cfg: dict, report: Report) -> bool:
    """Enter what namespaces we can; True when inside a new user namespace."""
    wanted = [(CLONE_NEWNS, "mountns"), (CLONE_NEWPID, "pidns"), (CLONE_NEWIPC, "ipcns"),
              (CLONE_NEWUTS, "utsns")]
    if not cfg["network"]:
        wanted.insert(0, (CLONE_NEWNET, "netns"))
    userns = False
    if os.geteuid() != 0 or not _try(report, wanted[0][1], unshare, wanted[0][0]):
        if os.geteuid() == 0:
            # Root without CAP_SYS_ADMIN (e.g. a default container). A user namespace made by
            # root could only map root to itself (full power over root's files), so first
            # become nobody, then make one as nobody.
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
        userns = _enter_userns(report)
        if userns:
            _try(report, wanted[0][1], unshare, wanted[0][0])
    for flag, name in wanted[1:]:
        _try(report, name, unshare, flag)
    if "utsns" in report.layers:
        name = b"sandbox"
        LIBC.sethostname(name, ctypes.c_size_t(len(name)))
    if userns:
        # We hold capabilities in the user namespace until exec, and the command will run as
        # our uid: non-dumpable, it cannot ptrace us (or our init) to borrow them. exec makes
        # the command itself dumpable again.
        prctl(PR_SET_DUMPABLE, 0)
    return userns


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
            report.add("workspace_tmpfs")
    except OSError:
        for point in reversed(mounted):  # leave the filesystem as the host sees it
            LIBC.umount2(point.encode(), ctypes.c_int(MNT_DETACH))
        raise
    for root in mounted:
        if roots.get(root) == 0o1777:
            report.add("private_" + root.strip("/").replace("/", "_"))
        if root in hidden:
            report.add("hidden_paths")


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


def fresh_proc(report: Report) -> None:
    """A /proc of the new pid namespace: the command cannot see (or signal) other processes."""
    _try(report, "private_proc", mount, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


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
    _try(report, "no_new_privs", prctl, PR_SET_NO_NEW_PRIVS, 1)
    # Set after the uid change: changing credentials clears the parent-death signal.
    _try(report, "pdeathsig", prctl, PR_SET_PDEATHSIG, signal.SIGKILL)


def run_child(cfg: dict, argv: list[str], report: Report, userns: bool) -> None:
    """Set up the filesystem, limits and uid, then exec the command (never returns)."""
    ws = cfg["workspace"]
    root_mode = os.geteuid() == 0
    uid, gid = (NOBODY, NOBODY) if root_mode else (os.geteuid(), os.getegid())
    fds = open_readable(cfg)
    if "mountns" in report.layers:
        try:
            private_mounts(cfg, report, uid, gid, fds)
            readonly_everything(cfg, report)
            if "pidns" in report.layers:
                fresh_proc(report)
        except OSError as e:
            report.add(f"mount_setup_failed: {e}")
    for fd in fds.values():
        os.close(fd)
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
    drop_privileges(userns, report)
    missing = [layer for layer in cfg["required"] if layer not in report.layers]
    if missing:
        report.fail(f"required isolation {missing} is not available here (applied: "
                    f"{report.layers}); run on a host that allows it or drop the requirement")
    report.send(isolation=report.layers)
    command = fork_retrying()
    if command == 0:
        exec_command(program, argv, env, report)
    wait_as_init(command, report)


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
    userns = enter_namespaces(cfg, report)
    child = os.fork()
    if child == 0:
        try:
            run_child(cfg, argv, report, userns)
        except BaseException as e:  # noqa: BLE001 - the child must never return into main()
            report.fail(f"sandbox setup failed: {e!r}")
    supervise(child, report)


if __name__ == "__main__":
    main()
