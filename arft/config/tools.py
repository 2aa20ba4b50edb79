"""The tools a job gives the model (``method.reinforcement.tools``): one spec per kind of tool."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field

from arft.config.base import Spec


class EndpointToolSpec(Spec):
    """A tool served over HTTP with the hosted contract (POST function_call -> function_call_output)."""

    type: Literal["endpoint"] = "endpoint"
    """The tool kind; a tool without ``type`` (the hosted shape) is an endpoint."""
    name: str
    """The function name the model calls."""
    server_url: str
    """The http(s) URL every call is POSTed to."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Sent with every call (e.g. ``Authorization: Bearer ${TOOL_TOKEN}``): ``${ENV_VAR}``
    references are resolved at start; the run stores the references, and a literal value as
    ``***`` (see ``arft.secrets``)."""
    signing_secret: str | None = None
    """When set (best as ``${ENV_VAR}``), every call carries an ``arft-signature`` header:
    HMAC-SHA256 of the timestamp and the body, which the server checks with
    ``arft.signing.verify`` (default: unsigned)."""
    description: str | None = None
    """Shown to the model; when absent, the dataset row's schema for this tool is used."""
    parameters: dict[str, Any] | None = None
    """JSON schema of the arguments; when absent, the dataset row's schema is used."""
    timeout_s: float = 30.0
    """Seconds one call may take before it counts as a timeout (and is retried)."""
    max_retries: int = 3
    """Retries after a 5xx, a timeout or a garbage answer before the rollout is infra-failed."""
    serves: str | None = None
    """A pattern (``"*"``: all; shell-style globs such as ``"weather_*"``) of the tools a dataset
    row brings in its ``tools`` that the job does not declare by name: this one endpoint answers
    them all. The row's schema is what the model sees and what constrained calls enforce; the
    request body's ``name`` is the tool the model called; ``name`` above only labels the entry in
    errors (default: serve only ``name``). See docs/tools.md, "Rows that bring their own tools"."""


class PythonToolSpec(Spec):
    """A Python function as a tool: ``module:attr`` or ``path/to/file.py:attr``."""

    type: Literal["python"]
    """The tool kind."""
    function: str
    """``module:attr`` or ``path/to/file.py:attr`` (a path relative to the job file's folder);
    the schema comes from the signature and the docstring."""
    name: str | None = None
    """Defaults to the function's name."""
    description: str | None = None
    """Defaults to the docstring's first paragraph."""
    parameters: dict[str, Any] | None = None
    """JSON schema of the arguments, shown to the model and held to on a constrained call
    (e.g. to add ``maxLength`` or an ``enum`` in one job without changing the function); when
    absent, built from the signature. Its properties must be parameters of the function, and it
    must require every parameter without a default."""
    timeout_s: float = 30.0
    """Seconds one call may run; a call past it is an error the model sees."""
    serves: str | None = None
    """A pattern (``"*"``: all; shell-style globs such as ``"weather_*"``) of the tools a dataset
    row brings in its ``tools`` that the job does not declare by name: this one function answers
    them all, told the name it was called as (a ``tool_name`` parameter, or ``ctx.tool_name``).
    The row's schema is what the model sees and what constrained calls enforce (``parameters``
    does not apply). Default: the function is one tool (see docs/tools.md)."""


class ShellToolSpec(Spec):
    """A shell command runner in the rollout's own sandboxed workspace."""

    type: Literal["shell"]
    """The tool kind."""
    name: str = "shell"
    """The function name the model calls."""
    description: str | None = None
    """Shown to the model (default: a description of the sandboxed shell)."""
    timeout_s: float = 10.0
    """Seconds one command may run (wall clock and CPU) before it is killed."""
    memory_mb: int = 512
    """Memory (address space, MiB) one command may allocate."""
    max_output_chars: int = 4000
    """Characters of output kept for the model (head and tail; the middle is dropped)."""


class McpToolSpec(Spec):
    """Every tool of an MCP server started over stdio."""

    type: Literal["mcp"]
    """The tool kind."""
    command: list[str]
    """The server's command line, e.g. ``["python", "server.py"]``."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for the server; ``${ENV_VAR}`` references are resolved at
    start (a secret-looking literal, e.g. under ``*_TOKEN``, is stored as ``***``)."""
    include: list[str] | None = None
    """Only these of the server's tools (default: all)."""
    name_prefix: str = ""
    """Put before every tool name the server offers (keeps two servers' names apart)."""
    timeout_s: float = 30.0
    """Seconds one call may take."""


ToolSpec = Annotated[
    Union[EndpointToolSpec, PythonToolSpec, ShellToolSpec, McpToolSpec], Field(discriminator="type")
]


def with_tool_type(raw: Any) -> Any:
    """The hosted shape has no ``type`` on its (endpoint) tools: a tool without one is an endpoint."""
    if isinstance(raw, dict) and "type" not in raw:
        return {"type": "endpoint", **raw}
    return raw
