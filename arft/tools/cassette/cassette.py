"""The cassette between the rollout loop and the tools: records each call, or answers it.

Every tool call of a rollout goes through ``Toolbox.lookup``; with a cassette that lookup is a
``CassetteTools`` (``arft.tools.cassette.tools``), whose tools hand each call to
``Cassette.call``. One mechanism therefore covers endpoint, python, shell and MCP tools and the
``serves`` servers alike.

Replay matches a call to a recording in this order (the first that has one left wins):

a. the same ``trace_id``, tool and canonical arguments (a rollout replayed under its own id);
b. the same place in the run (``scope`` of the run id, step, task id, sample index), tool and
   arguments: the n-th such call takes the n-th such recording;
c. the same tool and arguments anywhere in the cassette: the n-th occurrence, then the last one.

A call with none is a ``cassette miss``: an ``infra_error`` (its rollout is infra-failed, never
scored 0) that names the tool and arguments, or, with ``miss: live``, a call to the real tool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from arft.secrets import scrub
from arft.tools.base import Tool, ToolContext, ToolOutcome, raised
from arft.tools.cassette import files
from arft.tools.cassette.format import (CallRecord, CassetteWriter, Listing, Recording, canonical,
                                        parsed_args, scope)

log = logging.getLogger(__name__)


@dataclass
class CassetteCounts:
    """What the cassette did in this run; shown in the summary and written as ``cassette/*``."""

    recorded: int = 0
    replayed: int = 0
    misses: int = 0
    live: int = 0
    """Replay misses answered by the real tool (``miss: live``)."""

    def metrics(self) -> dict[str, float]:
        return {f"cassette/{k}": float(v) for k, v in vars(self).items()}


class _Index:
    """The recorded calls by the three keys of the matching rule, with how many each key gave."""

    def __init__(self, calls: Iterable[CallRecord]) -> None:
        self.by: dict[str, dict[Hashable, list[CallRecord]]] = {
            "trace": defaultdict(list), "place": defaultdict(list), "args": defaultdict(list)}
        for c in calls:
            for level, key in self.keys(c.tool, c.key, c.trace_id, scope(c.run_id), c.step, c.task_id,
                                        c.sample_index).items():
                self.by[level][key].append(c)
        self.used: dict[str, Counter[Hashable]] = {level: Counter() for level in self.by}

    @staticmethod
    def keys(tool: str, args: str, trace_id: str, where: str, step: int | None, task_id: str,
             sample: int) -> dict[str, Hashable]:
        return {"trace": (trace_id, tool, args), "place": (where, step, task_id, sample, tool, args),
                "args": (tool, args)}

    def find(self, tool: str, args: str, ctx: ToolContext) -> CallRecord | None:
        keys = self.keys(tool, args, ctx.trace_id, scope(ctx.run_id), ctx.step, ctx.task_id, ctx.sample_index)
        for level in ("trace", "place", "args"):
            found = self.by[level].get(keys[level])
            n = self.used[level][keys[level]]
            if found and (n < len(found) or level == "args"):
                self.used[level][keys[level]] += 1
                return found[min(n, len(found) - 1)]
        return None


@dataclass
class Cassette:
    """Records every call to ``writer``, and (``recording`` given) replays from ``recording``."""

    writer: CassetteWriter | None = None
    recording: Recording | None = None
    miss: Literal["fail", "live"] = "fail"
    latency: Literal["zero", "recorded"] = "zero"
    max_file_bytes: int = 1_000_000
    secrets: frozenset[str] = frozenset()
    counts: CassetteCounts = field(default_factory=CassetteCounts)
    _index: _Index | None = None
    _calls: Counter[str] = field(default_factory=Counter)
    _locks: dict[Path, asyncio.Lock] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.recording is not None:
            self._index = _Index(self.recording.calls)

    def write_listing(self, listing: Listing) -> None:
        if self.writer is not None:
            self.writer.write(listing)

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.close()

    async def call(self, tool: Tool, name: str, arguments: str, ctx: ToolContext) -> ToolOutcome:
        """Answer the call from the recording, or run ``tool`` (recording it when writing)."""
        args = parsed_args(arguments, self.secrets)
        index = self._calls[ctx.trace_id]
        self._calls[ctx.trace_id] += 1
        if self._index is not None:
            found = self._index.find(name, canonical(args), ctx)
            if found is not None and found.files_error is None:
                return await self._replay(found, ctx)
            if self.miss == "fail":
                self.counts.misses += 1
                return self._missed(name, args, found)
            self.counts.live += 1
        return await self._live(tool, name, arguments, args, ctx, index)

    async def _replay(self, found: CallRecord, ctx: ToolContext) -> ToolOutcome:
        if self.latency == "recorded":
            await asyncio.sleep(found.latency_s)
        if found.files and ctx.workspace is not None:
            await asyncio.to_thread(files.apply, ctx.workspace, found.files)
        self.counts.replayed += 1
        return ToolOutcome(output=found.output, status=found.status, error=found.error,
                           http_status=found.http_status)

    def _missed(self, name: str, args: object, found: CallRecord | None) -> ToolOutcome:
        where = self.recording.path if self.recording is not None else "the cassette"
        shown = canonical(args)
        shown = shown if len(shown) <= 300 else shown[:300] + "..."
        if found is not None:  # matched, but its workspace changes could not be recorded
            why = (f"cassette miss: the recorded call of tool '{name}' with arguments {shown} in "
                   f"{where} lacks workspace files ({found.files_error}); raise "
                   "rollout.tool_cassette.max_file_bytes and record again")
        else:
            why = (f"cassette miss: tool '{name}' was never called with arguments {shown} in {where}; "
                   "record the run again (--record DIR), or let misses call the real tool "
                   "(--replay-miss live, with the tool up)")
        return ToolOutcome(output=f"Error: tool '{name}' has no recorded answer (cassette miss)",
                           status="infra_error", error=why)

    async def _live(self, tool: Tool, name: str, arguments: str, args: object, ctx: ToolContext,
                    index: int) -> ToolOutcome:
        if self.writer is None:
            return await _run(tool, arguments, ctx)
        if ctx.workspace is None:
            start = time.perf_counter()
            outcome = await _run(tool, arguments, ctx)
            self._record(name, args, outcome, time.perf_counter() - start, ctx, index, None)
            return outcome
        # One call at a time per workspace while recording: each call's file changes are then its own.
        async with self._locks.setdefault(ctx.workspace, asyncio.Lock()):
            before = await asyncio.to_thread(files.snapshot, ctx.workspace)
            start = time.perf_counter()
            outcome = await _run(tool, arguments, ctx)
            latency = time.perf_counter() - start
            after = await asyncio.to_thread(files.snapshot, ctx.workspace)
            changed = await asyncio.to_thread(files.diff, ctx.workspace, before, after, self.max_file_bytes)
        self._record(name, args, outcome, latency, ctx, index, changed)
        return outcome

    def _record(self, name: str, args: object, outcome: ToolOutcome, latency: float, ctx: ToolContext,
                index: int, changed: files.Diff | None) -> None:
        assert self.writer is not None
        too_big = changed.too_big if changed is not None else []
        if too_big:  # said now, not only when a replay of this call misses
            log.warning("tool cassette: %s changed files over rollout.tool_cassette.max_file_bytes (%d): %s; "
                        "replaying this call will be a cassette miss", name, self.max_file_bytes, ", ".join(too_big))
        self.writer.write(CallRecord(
            tool=name, args=args, output=scrub(outcome.output, self.secrets), status=outcome.status,
            error=scrub(outcome.error, self.secrets) if outcome.error is not None else None,
            http_status=outcome.http_status, latency_s=latency, trace_id=ctx.trace_id, run_id=ctx.run_id,
            step=ctx.step, task_id=ctx.task_id, sample_index=ctx.sample_index, turn=ctx.turn,
            call_index=index, files=changed.changes if changed is not None else [],
            files_error=(f"over {self.max_file_bytes} bytes: {', '.join(too_big)}" if too_big else None)))
        self.counts.recorded += 1


async def _run(tool: Tool, arguments: str, ctx: ToolContext) -> ToolOutcome:
    """The tool's outcome; one that raises is answered as the rollout loop answers it."""
    try:
        return await tool.call(arguments, ctx)
    except Exception as e:  # noqa: BLE001 - recorded as the loop would show it
        return raised(e)
