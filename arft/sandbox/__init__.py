"""Isolation for shell tools and untrusted grader code: per-rollout workspaces and sandboxed runs.

See ``arft.sandbox.process`` for exactly what the sandbox does and does not stop.
"""

from arft.sandbox.process import (
    SandboxError,
    SandboxLimits,
    SandboxResult,
    probe_isolation,
    run_sandboxed,
)
from arft.sandbox.workspace import WorkspaceError, create_workspace, remove_workspace

__all__ = [
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "WorkspaceError",
    "create_workspace",
    "probe_isolation",
    "remove_workspace",
    "run_sandboxed",
]
