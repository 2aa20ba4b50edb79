"""Rows that bring their own tools: one job entry (``serves: "*"``) answers every tool a dataset
row names that the job does not declare.

A real dataset (a function-calling benchmark, logged traffic) carries its tools in its rows, often
hundreds of distinct ones. Declaring each in the job would be hundreds of identical entries; instead
a python or endpoint tool with ``serves`` is a *server*: for a name no declared tool has, the first
server whose pattern matches answers the call, told the name it was called as. The row's own
schema is what the model sees and what the grammar enforces (``arft.rollout.loop
.task_tool_schemas`` takes the row's ``tools``); the server adds only the handler.

``ToolMap`` is the lookup the rollout loop and the dataset check use: declared tools by name,
then the servers. Iterating it gives the declared tools only (a server has no fixed name set).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any, Protocol

from arft.tools.base import Tool, ToolContext, ToolOutcome, function_tool_schema


class ToolServer(Protocol):
    """A tool entry with ``serves``: answers calls under any name its pattern matches."""

    @property
    def name(self) -> str:
        """The entry's label (errors, logs); the model never sees it."""
        ...

    @property
    def serves(self) -> str:
        """The shell-style pattern of the names it answers (``*``: all)."""
        ...

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        """Answer one call; ``ctx.tool_name`` is the name the model called."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class ServedTool:
    """One name answered by a ``ToolServer``: a ``Tool`` whose calls carry that name."""

    name: str
    server: ToolServer

    @property
    def schema(self) -> dict[str, Any]:
        """A placeholder: the schema shown and enforced is the row's own (see the module doc)."""
        return function_tool_schema(self.name, "", None)

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        return await self.server.call(arguments, replace(ctx, tool_name=self.name))

    async def aclose(self) -> None:
        """Nothing of its own: the server closes with the toolbox."""


class ToolMap(Mapping[str, Tool]):
    """The declared tools by name, then the servers for any other name a pattern matches.

    ``len`` and iteration cover the declared tools; ``name in tools`` and ``tools[name]`` also
    find a served name. A served binding is made once per name and kept (a dataset may name
    thousands; a pattern is matched once per name, not once per call).
    """

    def __init__(self, declared: Mapping[str, Tool], servers: Sequence[ToolServer]) -> None:
        self._declared = declared
        self._servers = servers
        self._served: dict[str, ServedTool] = {}

    def __getitem__(self, name: str) -> Tool:
        if name in self._declared:
            return self._declared[name]
        if name in self._served:
            return self._served[name]
        server = next((s for s in self._servers if fnmatchcase(name, s.serves)), None)
        if server is None:
            raise KeyError(name)
        bound = self._served[name] = ServedTool(name, server)
        return bound

    def __iter__(self) -> Iterator[str]:
        return iter(self._declared)

    def __len__(self) -> int:
        return len(self._declared)

    def describe(self) -> str:
        """The declared names and the servers' patterns, for an error listing what exists."""
        names = sorted(self._declared) + [f"any name matching {s.serves!r} (served by "
                                          f"{s.name!r})" for s in self._servers]
        return ", ".join(names)
