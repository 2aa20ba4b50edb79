"""The ``shell`` tool: the model's command runs with bash in the rollout's own sandboxed workspace.

Each call is a fresh ``bash -c <command>`` under ``arft.sandbox.run_sandboxed`` (no network,
read-only everything but the workspace, time/memory limits; see ``arft.sandbox.process``).
Files persist between calls of one rollout because they live in its workspace; processes and
shell state (variables, ``cd``) do not. The model sees stdout and stderr interleaved, cut to
``max_output_chars``, and the exit code when it is not 0.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from arft.config import ShellToolSpec
from arft.sandbox import SandboxError, SandboxLimits, run_sandboxed
from arft.tools.base import ToolContext, ToolOutcome, function_tool_schema

DEFAULT_DESCRIPTION = (
    "Run a bash command in your own working directory (a private copy of the task's files) and "
    "return its output. No network access. Files you write stay for your later commands; "
    "shell variables and `cd` do not."
)


class ShellTool:
    """Runs ``bash -c <command>`` in ``ctx.workspace`` under the sandbox (the Tool protocol)."""

    def __init__(self, spec: ShellToolSpec) -> None:
        self._spec = spec
        # Resolved here, in the trainer's environment: the sandbox's PATH is a fixed default.
        self._shell = shutil.which("bash") or shutil.which("sh") or "/bin/sh"
        self._limits = SandboxLimits(
            timeout_s=spec.timeout_s,
            memory_mb=spec.memory_mb,
            cpu_s=spec.timeout_s,
            max_output_chars=spec.max_output_chars,
        )

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def schema(self) -> dict[str, Any]:
        return function_tool_schema(self._spec.name, self._spec.description or DEFAULT_DESCRIPTION, {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command line to run."}},
            "required": ["command"]})

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        command, problem = _command(arguments, self._spec.name)
        if problem:
            return ToolOutcome(output=problem, status="tool_error", error="bad_arguments")
        if ctx.workspace is None:
            message = (f"the '{self._spec.name}' tool has no workspace to run in: the job needs "
                       "`rollout.workspace` (a template folder), or the rollout did not create one")
            return ToolOutcome(output=message, status="tool_error", error="no_workspace")
        try:
            result = await run_sandboxed([self._shell, "-c", command], ctx.workspace,
                                         self._limits, merge_stderr=True)
        except SandboxError as e:
            return ToolOutcome(output=f"the shell could not start: {e}", status="infra_error",
                               error=str(e))
        if result.error is not None:  # the sandbox itself failed: not the model's doing
            return ToolOutcome(output=f"the shell could not start: {result.error}",
                               status="infra_error", error=result.error)
        output = result.stdout
        if result.timed_out:
            head = f"command timed out after {self._spec.timeout_s:g}s (killed)"
            return ToolOutcome(output=head + ("\n" + output if output else ""),
                               status="tool_error", error="timeout")
        if result.exit_code != 0:
            why = result.killed_reason or f"exit code {result.exit_code}"
            return ToolOutcome(output=f"{output}\n[{why}]" if output else f"[{why}]",
                               status="tool_error", error=why)
        return ToolOutcome(output=output or "(no output)")

    async def aclose(self) -> None:
        """Nothing to release: every call is its own process."""


def _command(arguments: str, tool: str) -> tuple[str, str | None]:
    """The ``command`` argument, or ('', a message for the model) when it is missing or bad."""
    usage = f'call {tool} with a JSON object like {{"command": "ls -la"}}'
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return "", f"the arguments are not valid JSON; {usage}"
    if not isinstance(args, dict) or not isinstance(args.get("command"), str):
        return "", f"missing the string argument 'command'; {usage}"
    if not args["command"].strip():
        return "", f"the command is empty; {usage}"
    return args["command"], None
