"""The job's ``agent`` section: who drives a rollout.

* ``{type: arft}`` (the default): arft's own loop (``arft.rollout.loop``) over the job's tools.
* ``{type: python, entrypoint: "my_agent.py:run"}``: your agent program as a function, called once
  per rollout with the dataset row and the client settings (``base_url``, ``api_key``, ``model``,
  ``trace_id``); it returns the agent's final output (a string or a JSON value).
* ``{type: command, command: [...]}``: your agent program as a process per rollout, with
  ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_MODEL`` and ``ARFT_TRACE_ID`` in its
  environment and the row as JSON on stdin; it prints its final output on stdout.

A program's model calls go to arft's gateway (``arft.app.gateway``), which samples them from the
policy being trained and records the exact tokens (docs/agents.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator

from arft.config.base import Spec


class ArftAgentSpec(Spec):
    """arft's own agent loop over the job's tools (the default)."""

    type: Literal["arft"] = "arft"
    """``arft``: the rollout loop of ``arft.rollout.loop``."""


class ProgramSpec(Spec):
    """What every agent program shares: its limits."""

    timeout_s: float = Field(600.0, gt=0)
    """Wall-clock limit of one rollout; a program still running then is stopped, and the rollout
    is an infrastructure failure (no reward)."""
    concurrency: int | None = Field(None, ge=1)
    """Most programs running at once (default: ``rollout.concurrency``)."""

class PythonAgentSpec(ProgramSpec):
    """Your agent as a Python function, ``file.py:function`` (relative to the job file) or
    ``package.module:function``; sync functions run in a worker thread."""

    type: Literal["python"]
    """``python``: a function called once per rollout."""
    entrypoint: str
    """``path/to/agent.py:run`` or ``module.path:run``."""

    @field_validator("entrypoint")
    @classmethod
    def _has_function(cls, v: str) -> str:
        if ":" not in v or not v.rsplit(":", 1)[1].isidentifier():
            raise ValueError(f"entrypoint {v!r} must be 'file.py:function' or 'module:function'")
        return v


class CommandAgentSpec(ProgramSpec):
    """Your agent as a command run once per rollout (in the job file's folder, or ``cwd``)."""

    type: Literal["command"]
    """``command``: a process started once per rollout."""
    command: list[str] = Field(min_length=1)
    """The argv, e.g. ``["python", "agent.py"]``."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for the program (on top of this process's and the gateway's)."""
    cwd: str | None = None
    """Where it runs (relative to the job file; default: the job file's folder)."""
    stderr_max_chars: int = Field(4000, ge=0)
    """How much of a failed program's stderr is kept on its rollout."""
    sandbox: bool = False
    """Run each program in arft's sandbox, as shell tools run (docs/security.md): ``cwd`` copied
    into a private tmpfs it may write (nothing reaches the host), the home, project and run
    folders hidden, no new privileges, rlimits, a clean environment, its whole process tree
    killed at the end. The network stays open: the program must reach the gateway."""
    memory_mb: int = Field(4096, gt=0)
    """With ``sandbox``: the address-space limit of each of its processes."""
    workspace_mb: int = Field(256, gt=0)
    """With ``sandbox``: the size of the tmpfs holding the copy of ``cwd``."""


AgentSpec = Annotated[Union[ArftAgentSpec, PythonAgentSpec, CommandAgentSpec], Field(discriminator="type")]
"""The ``agent`` section, keyed by ``type``."""


def with_agent_type(raw: Any) -> Any:
    """An agent section without ``type`` is arft's own loop unless it names an entrypoint or a
    command."""
    if isinstance(raw, dict) and "type" not in raw:
        kind = "python" if "entrypoint" in raw else "command" if "command" in raw else "arft"
        return {"type": kind, **raw}
    return raw
