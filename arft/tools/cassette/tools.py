"""The job's tools with a cassette in front: ``open_tools`` is what a run opens instead of
``open_toolbox`` (``arft.app.run.open_run``).

* ``off``: the plain toolbox.
* ``record``: the real tools, every call recorded (``Cassette``).
* ``replay``: with ``miss: fail``, no tool is built or started (no MCP server, no HTTP client):
  the model sees the tools the cassette's ``tools`` lines list, with their recorded schemas,
  and every call is answered from the recording. With ``miss: live`` the real tools are opened
  too, for the misses.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arft.config.cassette import CASSETTE_FILE
from arft.tools.base import Tool, ToolContext, ToolOutcome
from arft.tools.cassette.cassette import Cassette, CassetteCounts
from arft.tools.cassette.format import (CassetteError, CassetteWriter, Listing, Recording, ServerEntry,
                                        cassette_file, read_cassette)
from arft.tools.registry import Toolbox, open_toolbox
from arft.tools.served import ToolMap, ToolServer

if TYPE_CHECKING:
    from arft.config import JobSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CassetteTool:
    """A tool whose every call goes through the cassette (``inner``: the real or recorded tool)."""

    name: str
    inner: Tool
    cassette: Cassette

    @property
    def schema(self) -> dict[str, Any]:
        return self.inner.schema

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        return await self.cassette.call(self.inner, self.name, arguments, ctx)

    async def aclose(self) -> None:
        """Nothing of its own: the inner tool closes with the toolbox."""


class CassetteTools(ToolMap):
    """The toolbox's lookup (``ToolMap``) with every tool it finds wrapped in the cassette."""

    def __init__(self, declared: Mapping[str, Tool], servers: Sequence[ToolServer], cassette: Cassette) -> None:
        super().__init__(declared, servers)
        self._cassette = cassette
        self._wrapped: dict[str, CassetteTool] = {}

    def __getitem__(self, name: str) -> Tool:
        if name not in self._wrapped:
            self._wrapped[name] = CassetteTool(name, super().__getitem__(name), self._cassette)
        return self._wrapped[name]


@dataclass(frozen=True)
class RecordedTool:
    """A tool known only from a cassette's listing: its name and schema. Never called: the
    cassette answers (a miss without ``miss: live`` never reaches a tool)."""

    name: str
    schema: dict[str, Any]

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome(output=f"Error: tool '{self.name}' is not running (replay)", status="infra_error",
                           error="replay: the tool is known from the cassette only")

    async def aclose(self) -> None:
        """Nothing was started."""


@dataclass(frozen=True)
class RecordedServer(RecordedTool):
    """A ``serves`` entry known from a cassette: answers the names its pattern matches."""

    serves: str = "*"


@dataclass(frozen=True)
class CassetteHook:
    """What ``Toolbox.cassette`` holds: makes the lookup and closes the cassette."""

    cassette: Cassette

    def tool_map(self, declared: Mapping[str, Tool], servers: Sequence[ToolServer]) -> ToolMap:
        return CassetteTools(declared, servers, self.cassette)

    async def aclose(self) -> None:
        await self.cassette.aclose()


def cassette_counts(box: Toolbox) -> CassetteCounts | None:
    """What the toolbox's cassette did so far (None: the run has none)."""
    return box.cassette.cassette.counts if isinstance(box.cassette, CassetteHook) else None


def listing_of(box: Toolbox) -> Listing:
    return Listing(tools=[{"name": n, "schema": t.schema} for n, t in box.tools.items()],
                   servers=[ServerEntry(name=s.name, serves=s.serves) for s in box.servers],
                   needs_workspace=box.needs_workspace)


def recorded_toolbox(rec: Recording) -> Toolbox:
    """The tools a cassette lists, as stand-ins that start nothing."""
    if not rec.tools and not rec.servers:
        raise CassetteError(f"{rec.path} lists no tools (no 'tools' line): it was not written by "
                            "`rollout.tool_cassette: record`; record the run again")
    box = Toolbox(needs_workspace=rec.needs_workspace)
    for name, schema in rec.tools.items():
        box.add(RecordedTool(name, schema))
    box.servers.extend(RecordedServer(s.name, {}, s.serves) for s in rec.servers.values())
    return box


async def open_tools(job: "JobSpec", run_dir: Path, secrets: frozenset[str] = frozenset()) -> Toolbox:
    """The job's toolbox as ``rollout.tool_cassette`` wants it (see the module doc); close it with
    ``Toolbox.aclose`` (which closes the cassette's file too)."""
    spec = job.rollout.tool_cassette
    if spec.mode == "off":
        return await open_toolbox(job.rl.tools, job.base_dir)
    recording = None
    if spec.mode == "replay":
        assert spec.path is not None, "the config refuses replay without a path"
        recording = read_cassette(cassette_file(spec.path, job.base_dir))
    target = (spec.record_path if spec.mode == "replay" else spec.path)
    writer_path = (cassette_file(target, job.base_dir) if target else
                   run_dir / CASSETTE_FILE if spec.mode == "record" else None)
    live = spec.mode == "record" or spec.miss == "live"
    box = await open_toolbox(job.rl.tools, job.base_dir) if live else recorded_toolbox(recording)  # type: ignore[arg-type]
    try:
        writer = CassetteWriter(writer_path) if writer_path is not None else None
    except BaseException:
        await box.aclose()
        raise
    cassette = Cassette(writer=writer, recording=recording, miss=spec.miss, latency=spec.latency,
                        max_file_bytes=spec.max_file_bytes, secrets=secrets)
    cassette.write_listing(listing_of(box))
    box.cassette = CassetteHook(cassette)
    log.info("tool cassette: %s%s", spec.mode, f" -> {writer_path}" if writer_path else "")
    return box
