"""Isolation for shell tools and untrusted grader code: per-rollout workspaces and sandboxed runs.

See ``arft.sandbox.process`` for exactly what the sandbox does and does not stop, and
``arft.sandbox.pool`` for calling a function from untrusted Python source (fresh or warm).
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
