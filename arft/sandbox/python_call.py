"""What a sandboxed Python call is and how it travels: the function to run
(``SandboxedFunction``), its limits (``CallLimits``), how it ended (``CallResult``), and the
messages both modes of ``arft.sandbox.pool`` exchange with the worker (``_grader_worker.py``).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

from arft.sandbox.limits import SandboxLimits
from arft.sandbox.python_env import PythonEnvironment

WORKER = Path(__file__).with_name("_grader_worker.py")
STDERR_TAIL_CHARS = 4000
"""How much of a dead worker's stderr an error result shows."""
_MAX_ANSWER_CHARS = 1_000_000
_ZYGOTE_HEADROOM_MB = 4096  # address space for the zygote's own imports, above the per-call cap

CallKind = Literal["ok", "exception", "timeout", "killed", "crashed", "bad_value", "bad_input",
                   "infra"]


@dataclass(frozen=True)
class CallLimits:
    """The limits of one call (the hosted python grader's defaults)."""

    timeout_s: float = 120.0
    memory_mb: int = 2048
    disk_mb: int = 1024
    """Size of the scratch folder, /tmp and /dev/shm (each) and of any one file written."""
    max_processes: int = 256
    """RLIMIT_NPROC of the sandbox uid (shared by every sandbox running as it): stops fork bombs."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "disk_mb", "max_processes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"CallLimits.{name} must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class SandboxedFunction:
    """What to run: ``function`` from ``source`` (``filename`` names it in tracebacks)."""

    source: str
    filename: str = "<grader>"
    function: str = "grade"
    limits: CallLimits = field(default_factory=CallLimits)
    preload: tuple[str, ...] | None = None
    """Modules the zygote imports before forking; None: every module the source imports."""


@dataclass(frozen=True)
class CallResult:
    """How one call ended: ``value`` (JSON) when ``kind == "ok"``, else ``error`` says why."""

    kind: CallKind
    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def imported_modules(source: str) -> tuple[str, ...]:
    """Absolute module names the source imports anywhere (for the zygote to pre-import)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return tuple(dict.fromkeys(names))


def hello_message(fn: SandboxedFunction, env: PythonEnvironment, isolation: Sequence[str],
                  preload: tuple[str, ...]) -> dict[str, Any]:
    """The worker's set-up message: the source, where to import from, what to pre-import, and
    which of the sandbox's namespaces are its own (``isolation``: the launcher's report) so it
    may sweep them clean after every call."""
    return {"source": fn.source, "filename": fn.filename, "function": fn.function,
            "sys_path": list(env.sys_path), "preload": list(preload),
            "own_pidns": "pidns" in isolation and "private_proc" in isolation,
            "own_ipcns": "ipcns" in isolation,
            "limits": {"timeout_s": fn.limits.timeout_s,
                       "memory_bytes": fn.limits.memory_mb << 20}}


def launcher_limits(limits: CallLimits, *, zygote: bool) -> SandboxLimits:
    """The launcher's limits: per call for a fresh process; for a zygote, caps its children
    cannot exceed (each child lowers them for its own call), and no POSIX message queues: the
    zygote's IPC namespace outlives a call, and queues (unlike SysV objects, which the worker
    removes after every call) cannot be listed there to be removed."""
    return SandboxLimits(
        timeout_s=limits.timeout_s,
        memory_mb=limits.memory_mb + (_ZYGOTE_HEADROOM_MB if zygote else 0),
        cpu_s=10 ** 8 if zygote else limits.timeout_s,
        max_output_chars=_MAX_ANSWER_CHARS, max_file_mb=limits.disk_mb,
        max_processes=limits.max_processes, tmp_mb=limits.disk_mb,
        workspace_tmpfs_mb=limits.disk_mb, posix_mqueues=not zygote)


def parse_answer(payload: bytes | str) -> CallResult:
    """A worker's JSON answer as a CallResult."""
    try:
        answer = json.loads(payload)
    except (json.JSONDecodeError, ValueError) as e:
        return CallResult("crashed", error=f"the sandboxed worker sent an unreadable answer ({e})")
    if "value" in answer:
        return CallResult("ok", value=answer["value"])
    return CallResult(answer.get("kind", "crashed"), error=answer.get("error", "no answer"))


def encode_args(args: tuple[object, ...]) -> bytes | CallResult:
    """The call's arguments as JSON, or the ``bad_input`` result when they are not JSON."""
    try:
        return json.dumps(list(args)).encode()
    except (TypeError, ValueError) as e:
        return CallResult("bad_input", error=f"the call's arguments are not JSON ({e}); pass "
                                             "plain dicts, lists, strings and numbers")
