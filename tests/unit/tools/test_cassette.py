"""The cassette's matching rule, misses, latency and workspace files, on a counting tool."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from arft.config import RolloutSpec
from arft.tools.base import ToolContext, ToolOutcome
from arft.tools.cassette import Cassette, CassetteError, read_cassette, scope
from arft.tools.cassette.files import FileChange, WorkspaceReplayError, apply
from arft.tools.cassette.format import CassetteWriter


class Counter:
    """A tool that answers with how often it was called (so a replay is told from a live call),
    and writes ``note.txt`` in the workspace when it has one."""

    name = "count"
    schema: dict[str, Any] = {"type": "function", "function": {"name": "count"}}

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        self.calls += 1
        if ctx.workspace is not None:
            (ctx.workspace / "note.txt").write_text(f"call {self.calls} {arguments}")
            (ctx.workspace / "gone.txt").unlink(missing_ok=True)
        return ToolOutcome(output=f"live {self.calls}")

    async def aclose(self) -> None:
        pass


def ctx(task: str = "t", sample: int = 0, run_id: str = "e1", trace: str | None = None, **kw: Any) -> ToolContext:
    return ToolContext(trace_id=trace or "trace_" + uuid.uuid4().hex, call_id="c", run_id=run_id,
                       task_id=task, sample_index=sample, **kw)


async def record(tmp: Path, calls: list[tuple[str, ToolContext]], **kw: Any) -> Path:
    path = tmp / "tape.jsonl"
    cassette = Cassette(writer=CassetteWriter(path), **kw)
    tool = Counter()
    for args, c in calls:
        await cassette.call(tool, "count", args, c)
    await cassette.aclose()
    return path


def test_config_short_and_object_forms() -> None:
    assert RolloutSpec.model_validate({"tool_cassette": "record"}).tool_cassette.mode == "record"
    spec = RolloutSpec.model_validate({"tool_cassette": {"mode": "replay", "path": "x", "latency": "recorded"}})
    assert (spec.tool_cassette.path, spec.tool_cassette.miss, spec.tool_cassette.latency) == ("x", "fail", "recorded")
    with pytest.raises(ValueError, match="needs a path"):
        RolloutSpec.model_validate({"tool_cassette": "replay"})


def test_scope_is_stable_across_runs() -> None:
    assert [scope(r) for r in ("train", "train:eval-000003", "train:rescue", "runs/job-eval-2026")] == [
        "train", "eval-000003", "rescue", "eval"]


async def test_matching_order_trace_then_place_then_args(tmp_path: Path) -> None:
    traced = ctx(trace="trace_a", task="t1")
    path = await record(tmp_path, [('{"b": 1, "a": 2}', traced), ('{"a":2,"b":1}', ctx(task="t1")),
                                   ('{"a": 2, "b": 1}', ctx(task="t2", sample=1))])
    cassette = Cassette(recording=read_cassette(path))
    tool = Counter()
    # (a) the same trace id wins over everything else
    same_trace = ctx(trace="trace_a", task="t2", sample=1)
    assert (await cassette.call(tool, "count", '{"a": 2, "b": 1}', same_trace)).output == "live 1"
    # (b) same place (scope, step, task, sample): t2 sample 1 was the third call
    same_place = ctx(task="t2", sample=1, run_id="e2")
    assert (await cassette.call(tool, "count", '{"b":1,"a":2}', same_place)).output == "live 3"
    # (c) anywhere: the n-th occurrence, then the last one
    outputs = [(await cassette.call(tool, "count", '{"a":2,"b":1}', ctx(task="other"))).output for _ in range(4)]
    assert outputs == ["live 1", "live 2", "live 3", "live 3"]
    assert tool.calls == 0 and cassette.counts.replayed == 6 and cassette.counts.misses == 0


async def test_place_takes_the_nth_recording_in_order(tmp_path: Path) -> None:
    path = await record(tmp_path, [("{}", ctx(step=2, run_id="train")) for _ in range(2)])
    cassette = Cassette(recording=read_cassette(path))
    place = ctx(step=2, run_id="train")
    assert [(await cassette.call(Counter(), "count", "{}", place)).output for _ in range(2)] == ["live 1", "live 2"]


async def test_miss_fails_or_goes_live(tmp_path: Path) -> None:
    path = await record(tmp_path, [("{}", ctx())])
    failing = Cassette(recording=read_cassette(path))
    missed = await failing.call(Counter(), "count", '{"x": 1}', ctx())
    assert missed.status == "infra_error" and "cassette miss" in (missed.error or "")
    assert '{"x":1}' in (missed.error or "") and "--replay-miss live" in (missed.error or "")
    assert failing.counts.misses == 1
    live = Cassette(recording=read_cassette(path), miss="live", writer=CassetteWriter(tmp_path / "more.jsonl"))
    tool = Counter()
    assert (await live.call(tool, "count", '{"x": 1}', ctx())).output == "live 1" and tool.calls == 1
    assert (live.counts.live, live.counts.recorded) == (1, 1)
    await live.aclose()
    assert len(read_cassette(tmp_path / "more.jsonl").calls) == 1


async def test_workspace_changes_replay(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "gone.txt").write_text("old")
    path = await record(tmp_path, [('{"k": "é"}', ctx(workspace=ws))])
    (call,) = read_cassette(path).calls
    assert [(f.path, f.op) for f in call.files] == [("note.txt", "write"), ("gone.txt", "delete")]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "gone.txt").write_text("old")
    cassette = Cassette(recording=read_cassette(path))
    await cassette.call(Counter(), "count", '{"k": "é"}', ctx(workspace=fresh))
    assert (fresh / "note.txt").read_text() == (ws / "note.txt").read_text() and not (fresh / "gone.txt").exists()


async def test_file_over_the_cap_makes_its_replay_a_miss(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    path = await record(tmp_path, [("{}", ctx(workspace=ws))], max_file_bytes=4)
    (call,) = read_cassette(path).calls
    assert call.files == [] and "note.txt" in (call.files_error or "")
    outcome = await Cassette(recording=read_cassette(path)).call(Counter(), "count", "{}", ctx(workspace=ws))
    assert outcome.status == "infra_error" and "max_file_bytes" in (outcome.error or "")


def test_apply_refuses_paths_outside_the_workspace(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceReplayError, match="outside the workspace"):
        apply(tmp_path, [FileChange(path="../evil", op="write", text="x")])


def test_bad_cassette_lines_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"type": "tools"}) + "\n{not json\n")
    with pytest.raises(CassetteError, match=r"c.jsonl:2"):
        read_cassette(path)
    with pytest.raises(CassetteError, match="no cassette at"):
        read_cassette(tmp_path / "none.jsonl")
