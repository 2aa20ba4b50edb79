"""MCP servers as tools: start a server over stdio once per job and expose each of its tools.

``open_mcp_server(spec)`` starts ``spec.command``, lists its tools and returns an ``McpServer``
whose ``tools`` follow the Tool protocol (name = ``spec.name_prefix`` + the server's name,
filtered by ``spec.include``). One session is shared by every rollout; calls may run
concurrently. Close it with ``await server.aclose()`` (the tools' own ``aclose`` does nothing,
so closing one tool never cuts the others off).

How results map to outcomes: the text of the result's content blocks joined by newlines is the
output; ``isError`` -> ``tool_error``; a protocol error (unknown tool, bad params) or a
timeout -> ``tool_error``; a server that has exited or closed its pipes -> ``infra_error``.

Written against the ``mcp`` 2.x client (``mcp.Client``). The server is the user's own
configured program and is not sandboxed.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING, Any

from arft.config import McpToolSpec
from arft.errors import ArftError
from arft.secrets import resolve_map
from arft.records import json_object
from arft.tools.base import ToolContext, ToolOutcome

if TYPE_CHECKING:  # mcp imports lazily
    from mcp import Client
    from mcp_types import CallToolResult, Tool

_NAME_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_MAX_PAGES = 100  # a server whose tools/list never ends must not hang the job


class McpServerError(ArftError):
    """The MCP server could not be started or listed; the message says what to check."""


class McpServer:
    """A running MCP server and its tools. Use ``open_mcp_server`` to make one.

    The client session lives in a task of its own, so the tasks of many rollouts can share it
    and it is entered and left in the same task (as anyio requires).
    """

    def __init__(self, spec: McpToolSpec) -> None:
        """Raises ``SecretError`` when a ``${ENV_VAR}`` that ``spec.env`` names is unset."""
        self.spec = spec
        self.env = resolve_map(spec.env, f"MCP server `{' '.join(spec.command)}`: env")
        """``spec.env`` with its ``${ENV_VAR}`` references resolved."""
        self.tools: list[McpTool] = []
        self._client: Any = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._dead: str | None = None

    @property
    def label(self) -> str:
        return " ".join(self.spec.command)

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[list[Tool]] = loop.create_future()
        self._task = asyncio.create_task(self._serve(ready), name=f"mcp:{self.label}")
        try:
            listing = await asyncio.wait_for(asyncio.shield(ready), self.spec.timeout_s)
            self.tools = _make_tools(self, listing)
        except asyncio.TimeoutError:
            await self.aclose()
            raise McpServerError(
                f"MCP server `{self.label}` did not answer within {self.spec.timeout_s:g}s; check "
                "that the command starts an MCP server on stdio, or raise `timeout_s`") from None
        except BaseException:
            await self.aclose()
            raise

    async def _serve(self, ready: "asyncio.Future[list[Tool]]") -> None:
        """Own the session: open it, list the tools, then wait until ``aclose``."""
        from mcp import Client, StdioServerParameters

        params = StdioServerParameters(command=self.spec.command[0], args=self.spec.command[1:],
                                       env=dict(self.env))
        try:
            async with Client(params, read_timeout_seconds=self.spec.timeout_s) as client:
                listing = await _list_tools(client)
                self._client = client
                ready.set_result(listing)
                await self._stop.wait()
        except asyncio.CancelledError:
            self._dead = "stopped before it answered"
            ready.cancel()
            raise
        except BaseException as e:  # noqa: BLE001 - reported to the caller, not lost
            self._dead = _describe(e)
            if not ready.done():
                ready.set_exception(McpServerError(
                    f"MCP server `{self.label}` failed to start: {self._dead}; check `command` "
                    "and `env` of the job's mcp tool (try running the command by hand)"))
        finally:
            self._client = None
            self._dead = self._dead or "closed"

    async def call_tool(self, remote_name: str, arguments: dict[str, object],
                        trace_id: str | None = None) -> ToolOutcome:
        """Call one of the server's tools by its own (unprefixed) name.

        The rollout's ``trace_id`` travels in the request's ``_meta`` (``{"trace_id": ...}``),
        so an MCP server can tie every call to its rollout as the endpoint contract does.
        """
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        client = self._client
        if client is None:
            return self._infra(self._dead or "not started")
        try:
            result = await client.call_tool(remote_name, arguments,
                                            read_timeout_seconds=self.spec.timeout_s,
                                            meta={"trace_id": trace_id} if trace_id else None)
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                return self._infra(e.message)
            if e.code == REQUEST_TIMEOUT:
                return self._timeout()
            return ToolOutcome(output=f"error from tool {remote_name}: {e.message}",
                               status="tool_error", error=f"mcp error {e.code}: {e.message}")
        except TimeoutError:
            return self._timeout()
        except Exception as e:  # noqa: BLE001 - broken pipes, garbage answers
            return self._infra(_describe(e))
        text = content_text(result)
        if result.is_error:
            return ToolOutcome(output=text or f"tool {remote_name} failed", status="tool_error",
                               error="mcp tool reported isError")
        return ToolOutcome(output=text)

    def _infra(self, why: str) -> ToolOutcome:
        return ToolOutcome(
            output="the tool is unavailable (its server stopped)", status="infra_error",
            error=f"MCP server `{self.label}` is not answering ({why}); see its stderr, fix it "
                  "and rerun the job")

    def _timeout(self) -> ToolOutcome:
        return ToolOutcome(output=f"the tool timed out after {self.spec.timeout_s:g}s",
                           status="tool_error", error="timeout")

    async def aclose(self) -> None:
        """Stop the session and the server process (idempotent)."""
        self._stop.set()
        task, self._task = self._task, None
        if task is None:
            return
        if self._client is None:
            task.cancel()  # still starting (or failed): nothing to shut down politely
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=10)
        except asyncio.TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        except BaseException:  # noqa: BLE001 - its failure was recorded in _serve
            pass


class McpTool:
    """One tool of an MCP server (the Tool protocol)."""

    def __init__(self, server: McpServer, remote_name: str, schema: dict[str, object]) -> None:
        self._server = server
        self.remote_name = remote_name
        self._schema = schema

    @property
    def name(self) -> str:
        return str(json_object(self._schema["function"])["name"])

    @property
    def schema(self) -> dict[str, Any]:
        return self._schema

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            return ToolOutcome(output=f"the arguments of {self.name} must be a JSON object",
                               status="tool_error", error="bad_arguments")
        return await self._server.call_tool(self.remote_name, args, ctx.trace_id)

    async def aclose(self) -> None:
        """Nothing: the session belongs to the server (``McpServer.aclose``)."""


async def open_mcp_server(spec: McpToolSpec) -> McpServer:
    """Start the server, list its tools and keep the session open until ``aclose``.

    Raises ``McpServerError`` when it does not start or ``spec.include`` names a tool it lacks.
    """
    if not spec.command:
        raise McpServerError("an mcp tool needs `command`, e.g. [python, my_server.py]")
    server = McpServer(spec)
    await server._start()
    return server


async def _list_tools(client: "Client") -> "list[Tool]":
    tools: list[Tool] = []
    cursor = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _make_tools(server: McpServer, listing: "list[Tool]") -> list[McpTool]:
    spec = server.spec
    offered = [t.name for t in listing]
    if spec.include is not None:
        missing = sorted(set(spec.include) - set(offered))
        if missing:
            raise McpServerError(
                f"MCP server `{server.label}` has no tool(s) {missing}; it offers {offered}: "
                "fix `include` in the job's mcp tool")
    tools, seen = [], set()
    for tool in listing:
        if spec.include is not None and tool.name not in spec.include:
            continue
        schema = to_completions_schema(tool, spec.name_prefix)
        name = schema["function"]["name"]
        if name in seen:
            raise McpServerError(f"two tools of `{server.label}` become '{name}' once made a "
                                 "valid function name; set `include` to pick one")
        seen.add(name)
        tools.append(McpTool(server, tool.name, schema))
    return tools


def to_completions_schema(tool: "Tool", prefix: str = "") -> dict[str, Any]:
    """An MCP tool (name, description, inputSchema) as a completions function schema."""
    name = _NAME_BAD_CHARS.sub("_", prefix + tool.name)[:64]
    params = {k: v for k, v in dict(tool.input_schema or {}).items() if k not in ("$schema", "title")}
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    description = tool.description or getattr(tool, "title", None) or ""
    return {"type": "function",
            "function": {"name": name, "description": description, "parameters": params}}


def content_text(result: "CallToolResult") -> str:
    """The text of a CallToolResult: text blocks joined; other blocks as short placeholders."""
    from mcp_types import AudioContent, EmbeddedResource, ImageContent, ResourceLink, TextContent

    parts = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}]")
        elif isinstance(block, EmbeddedResource):
            text = getattr(block.resource, "text", None)
            parts.append(text if text is not None else f"[resource {block.resource.uri}]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource link {block.uri}]")
        else:  # a block type newer than this code
            parts.append(f"[{getattr(block, 'type', '') or 'unknown'} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)


def _describe(e: BaseException) -> str:
    """A one-line reason, unwrapping the exception groups anyio raises."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
