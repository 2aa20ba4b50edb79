"""The tool protocol: what the rollout loop needs from any tool (endpoint, python, shell, MCP)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from arft.errors import ArftError


# ValueError too: the doctor's baseline (arft.app.doctor.run) reports a ValueError from the run it
# starts as a tool that does not start; a python tool's bad reference is tested as ValueError.
class ToolSetupError(ArftError, ValueError):
    """A tool spec that cannot be turned into a tool (a bad reference, URL or schema, two tools
    with one name); the message says which and why."""


@dataclass(frozen=True)
class ToolContext:
    """Everything a tool may know about the call besides its arguments."""

    trace_id: str
    call_id: str
    item: dict[str, Any] = field(default_factory=dict)
    workspace: Path | None = None
    """The rollout's own workspace directory (a fresh copy of the job's template), if any."""
    turn: int = 0
    tool_name: str = ""
    """The name the model called the tool by: one entry may serve many names (``serves``)."""
    run_id: str = ""
    """The run the call belongs to (``train``, ``train:eval-000003``, an eval's folder name)."""
    step: int | None = None
    """The training step of the rollout (None outside training)."""
    task_id: str = ""
    sample_index: int = 0
    """Which sample of the task the rollout is (0..k-1)."""


@dataclass(frozen=True)
class ToolOutcome:
    """A tool's answer. ``status != "ok"`` always carries an ``error`` reason.

    * ``ok`` — ``output`` is the tool's answer.
    * ``tool_error`` — the tool ran and failed (exception, 4xx, non-zero exit, timeout of the
      tool's own work); ``output`` is the message the model sees.
    * ``infra_error`` — the tool could not be reached after retries (5xx, connection errors,
      garbage answers): the rollout is marked ``infra_failed`` and left out of the loss.
    """

    output: str
    status: Literal["ok", "tool_error", "infra_error"] = "ok"
    error: str | None = None
    http_status: int | None = None


def raised(e: Exception) -> ToolOutcome:
    """The outcome of a tool that raised: a tool bug must not kill the rollout, so the model sees
    the error (the rollout loop's answer, also what a cassette records for such a call)."""
    return ToolOutcome(output=f"Error: {type(e).__name__}: {e}", status="tool_error",
                       error=f"tool raised {type(e).__name__}: {e}")


@runtime_checkable
class Tool(Protocol):
    """A callable tool with a completions-format schema."""

    @property
    def name(self) -> str: ...

    @property
    def schema(self) -> dict[str, Any]:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        ...

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        """Run with ``arguments`` (a JSON object encoded as a string, already validated as JSON)."""
        ...

    async def aclose(self) -> None: ...


def function_tool_schema(name: str, description: str, parameters: dict[str, object] | None) -> dict[str, Any]:
    """A completions-format tool schema (``parameters`` default: an object with no properties)."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": parameters or {"type": "object", "properties": {}}}}
