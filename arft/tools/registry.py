"""Turn the job's tool specs into live tools, and close them all at the end.

An entry with ``serves`` (a python or endpoint tool) is a server for the tools dataset rows
bring (``arft.tools.served``); ``Toolbox.lookup`` finds declared and served tools alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from arft.config import EndpointToolSpec, McpToolSpec, PythonToolSpec, ShellToolSpec
from arft.tools.base import Tool, ToolSetupError
from arft.tools.endpoint import EndpointTool
from arft.tools.mcp import open_mcp_server
from arft.tools.python_fn import PythonTool
from arft.tools.served import ToolMap, ToolServer
from arft.tools.shell import ShellTool


class CallHook(Protocol):
    """What stands between the rollout loop and the tools (a tool cassette,
    ``arft.tools.cassette``): it makes the lookup every call goes through."""

    def tool_map(self, declared: Mapping[str, Tool], servers: Sequence[ToolServer]) -> ToolMap: ...

    async def aclose(self) -> None: ...


@dataclass
class Toolbox:
    """The job's tools by name, plus whatever must be closed with them (MCP servers)."""

    tools: dict[str, Tool] = field(default_factory=dict)
    needs_workspace: bool = False
    """True when a tool runs inside the rollout's workspace (shell tools)."""
    servers: list[ToolServer] = field(default_factory=list)
    """Entries with ``serves``: they answer the undeclared tools rows bring, in this order."""
    cassette: CallHook | None = None
    """Records or replays every call (``rollout.tool_cassette``); None: calls go to the tools."""
    _closers: list[Any] = field(default_factory=list)
    _lookup: ToolMap | None = None

    @property
    def lookup(self) -> ToolMap:
        """Every tool a call may name: the declared ones, then the servers' (see ``ToolMap``)."""
        if self._lookup is None:
            self._lookup = (ToolMap(self.tools, self.servers) if self.cassette is None
                            else self.cassette.tool_map(self.tools, self.servers))
        return self._lookup

    def add(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise ToolSetupError(f"two tools are named '{tool.name}': give one a different name")
        self.tools[tool.name] = tool

    async def aclose(self) -> None:
        for tool in self.tools.values():
            await tool.aclose()
        for server in self.servers:
            await server.aclose()
        for closer in self._closers:
            await closer.aclose()
        if self.cassette is not None:
            await self.cassette.aclose()


async def open_toolbox(specs: Sequence[object], base_dir: Path) -> Toolbox:
    """Build every tool of the job (starting MCP servers); close with ``Toolbox.aclose``."""
    box = Toolbox()
    try:
        for spec in specs:
            await _add_spec(box, spec, base_dir)
    except BaseException:
        await box.aclose()
        raise
    return box


async def _add_spec(box: Toolbox, spec: object, base_dir: Path) -> None:
    if isinstance(spec, EndpointToolSpec):
        _add_entry(box, EndpointTool(spec), spec.serves)
    elif isinstance(spec, PythonToolSpec):
        _add_entry(box, PythonTool(spec, base_dir), spec.serves)
    elif isinstance(spec, ShellToolSpec):
        box.add(ShellTool(spec))
        box.needs_workspace = True
    elif isinstance(spec, McpToolSpec):
        server = await open_mcp_server(spec)
        box._closers.append(server)
        for tool in server.tools:
            box.add(tool)
    else:  # the config's discriminated union makes this a programming error
        raise ToolSetupError(f"unsupported tool spec {spec!r}")


def _add_entry(box: Toolbox, tool: EndpointTool | PythonTool, serves: str | None) -> None:
    """A tool under its own name, or (``serves``) a server of the names rows bring."""
    if serves:
        box.servers.append(tool)
    else:
        box.add(tool)
