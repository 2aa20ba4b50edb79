"""Isolation for shell tools and untrusted grader code: per-rollout workspaces and sandboxed runs.

See ``arft.sandbox.process`` for exactly what the sandbox does and does not stop, and
``arft.sandbox.pool`` for calling a function from untrusted Python source (fresh or warm).
``bench/sandbox_escapes.py`` attacks it (network, secrets, other processes, bombs, IPC,
denied syscalls, link and pytest tricks) and must report 0 escapes.

Why our own launcher (``arft.sandbox.launcher``) and not bubblewrap: bubblewrap is a well-kept
tool that sets up the same namespaces and mounts, but it is a system package (not on PyPI, not
installable by ``make setup`` without root, absent from most CI images and containers), and a
missing bwrap would leave the sandbox with nothing. bwrap also fails outright where user
namespaces are refused, while the launcher degrades layer by layer and reports each one; it
applies no rlimits, knows nothing of our report pipe, of running the warm pool's workers, or of
dropping root to nobody in a container without CAP_SYS_ADMIN; and its ``--seccomp`` takes an
already compiled BPF program, so the filter would still be built here. The launcher is a small
stdlib-only program (a few hundred lines, every step tested); the syscall filter comes from a
well-kept library instead of hand-written BPF: libseccomp, loaded through ctypes (present
wherever apt, systemd or a container runtime is; reported as ``seccomp_unavailable`` where not).
"""

from arft.sandbox.limits import SandboxError, SandboxLimits
from arft.sandbox.pool import WarmPool, run_fresh
from arft.sandbox.process import SandboxResult, probe_isolation, run_sandboxed
from arft.sandbox.python_call import CallLimits, CallResult, SandboxedFunction
from arft.sandbox.workspace import WorkspaceError, create_workspace, remove_workspace

__all__ = [
    "CallLimits",
    "CallResult",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxedFunction",
    "WarmPool",
    "WorkspaceError",
    "create_workspace",
    "probe_isolation",
    "remove_workspace",
    "run_fresh",
    "run_sandboxed",
]
