"""What a sandboxed run may use (``SandboxLimits``) and the error for a run that cannot start."""

from __future__ import annotations

from dataclasses import dataclass

from arft.errors import ArftError


class SandboxError(ArftError):
    """The sandbox could not be started at all (bad arguments, missing workspace)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed run."""

    timeout_s: float = 10.0
    """Wall-clock limit; the whole process tree is killed when it passes."""
    memory_mb: int = 512
    """Address-space limit (RLIMIT_AS) of each process."""
    cpu_s: float | None = None
    """CPU-seconds limit of each process (default: ``timeout_s``)."""
    max_output_chars: int = 10_000
    """Characters kept of stdout and of stderr each (head and tail; the middle is dropped)."""
    max_file_mb: int = 64
    """Largest file a process may write (RLIMIT_FSIZE)."""
    network: bool = False
    """Allow network access (no network namespace)."""
    max_processes: int = 256
    """RLIMIT_NPROC of the sandbox uid (stops fork bombs)."""
    tmp_mb: int = 64
    """Size of the private /tmp and /dev/shm."""
    required_isolation: tuple[str, ...] = ()
    """Layers that must be applied (e.g. ``("netns", "readonly_fs")``) or the command is not run."""
    syscall_filter: bool = True
    """Load the seccomp deny-list [seccomp] (``arft.sandbox.launcher.seccomp``): ptrace, mount,
    bpf, keyctl, new namespaces and the like fail with EPERM. Turn it off only for trusted
    commands that need one of them (gdb and strace use ptrace)."""
    posix_mqueues: bool = True
    """Allow POSIX message queues (``mq_open``). With the syscall filter, False makes
    ``mq_open`` fail with EPERM (the warm pool's workers: see ``python_call.launcher_limits``)."""
    workspace_tmpfs_mb: int | None = None
    """When set, the workspace is a fresh private tmpfs of this size at the workspace's path
    instead of the host folder [workspace_tmpfs]: nothing written there reaches the host disk and
    the total is bounded. The host folder is then only the mount point (left as it was)."""
    workspace_tmpfs_copy: bool = False
    """With ``workspace_tmpfs_mb``: the tmpfs starts as a copy of the host folder (links copied
    as links) [workspace_copy] instead of empty; nothing is copied back. For commands that
    read the workspace and may write anything, such as a test run: the host disk stays out of
    reach. A workspace larger than the tmpfs is an ``error``."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "max_file_mb", "max_processes", "tmp_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)}")
        if self.max_output_chars < 0:
            raise ValueError("SandboxLimits.max_output_chars must be >= 0")
        if self.workspace_tmpfs_mb is not None and self.workspace_tmpfs_mb <= 0:
            raise ValueError("SandboxLimits.workspace_tmpfs_mb must be > 0 (or None for the host "
                             f"folder), got {self.workspace_tmpfs_mb}")
        if self.workspace_tmpfs_copy and self.workspace_tmpfs_mb is None:
            raise ValueError("SandboxLimits.workspace_tmpfs_copy needs workspace_tmpfs_mb (the "
                             "size of the tmpfs to copy the workspace into)")
