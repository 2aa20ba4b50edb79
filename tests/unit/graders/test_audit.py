"""The grader audit: adversarial answers against real graders, continuity of baseline grades."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arft.config import JobSpec, load_job
from arft.graders.audit import (adversarial_answers, audit_grader, baseline_continuity,
                                continuity, item_strings, long_answer, reference_values)
from arft.graders.registry import build_grader
from arft.records import Message, Rollout, Score, ToolCallRecord, new_trace_id
from arft.data.splits import load_split

LIKE = {"type": "string_check", "name": "has_answer", "input": "{{ sample.output_text }}",
        "reference": "{{ item.answer }}", "operation": "like"}
EQ = {**LIKE, "name": "exact", "operation": "eq"}
ROWS = [
    {"id": "q1", "messages": [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "Capital of France?"}],
     "answer": "Paris", "options": ["Paris", "Lyon", "Nice"]},
    {"id": "q2", "messages": [{"role": "user", "content": "Largest planet?"}],
     "answer": "Jupiter", "meta": {"distractors": ["Mars", "Saturn"], "level": 3}},
]


def make_job(tmp: Path, grader: dict[str, Any]) -> JobSpec:
    (tmp / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp / "train.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "t"}]}))
    job = {"training_file": "train.jsonl", "validation_file": "val.jsonl",
           "method": {"type": "reinforcement", "reinforcement": {"grader": grader}}}
    (tmp / "job.json").write_text(json.dumps(job))
    return load_job(tmp / "job.json")


def baseline_rollout(task_id: str, score: Score | None, *outputs: str,
                     status: str = "ok") -> Rollout:
    tid = new_trace_id()
    calls = tuple(ToolCallRecord(trace_id=tid, call_id=f"c{i}", name="lookup", arguments="{}",
                                 output=out) for i, out in enumerate(outputs))
    return Rollout(trace_id=tid, task_id=task_id, status=status,  # type: ignore[arg-type]
                   messages=(Message(role="user", content="q"),
                             Message(role="assistant", content="a")),
                   tool_calls=calls, score=score)


async def audit(tmp: Path, grader: dict[str, Any], baseline: list[Rollout] | None = None,
                threshold: float = 0.5) -> Any:
    job = make_job(tmp, grader)
    tasks = load_split(job, "validation", None)
    return await audit_grader(job, tasks, build_grader(job.rl.grader, job.base_dir), baseline,
                              threshold)


# -- the answers -------------------------------------------------------------------------------


def test_item_strings_are_distinct_and_nested() -> None:
    item = {"answer": "Paris", "options": ["Paris", "Lyon"], "n": 3, "ok": True,
            "meta": {"x": None, "y": ["Nice", " "]}}
    assert item_strings(item) == ["Paris", "Lyon", "3", "Nice"]


def test_long_answer_repeats_the_prompt_to_4000_words() -> None:
    text = long_answer("Capital of France?")
    assert len(text.split()) == 4000 and text.startswith("Capital of France? Capital")
    assert len(long_answer("").split()) == 4000


def test_adversarial_answers_of_a_task(tmp_path: Path) -> None:
    task = load_split(make_job(tmp_path, LIKE), "validation", None)[0]
    answers = dict(adversarial_answers(task, LIKE, None))
    assert answers["empty"] == ""
    assert answers["echo_prompt"] == "Capital of France?"  # the last user message, not the system
    assert answers["all_candidates"] == "Paris\nLyon\nNice"  # the id is not a candidate
    assert "tool_copy" not in answers


def test_a_single_candidate_is_not_a_hedge(tmp_path: Path) -> None:
    task = load_split(make_job(tmp_path, LIKE), "validation", None)[0]
    task = task.model_copy(update={"item": {"id": "q1", "answer": "Paris"}})
    assert "all_candidates" not in dict(adversarial_answers(task, EQ, None))


def test_reference_values_render_the_graders_reference() -> None:
    item = {"answer": "Paris", "expected": "Lyon"}
    assert reference_values(LIKE, item) == ["Paris"]
    nested = {"type": "multi", "graders": {"a": {**LIKE, "reference": "{{ item.expected }}"}}}
    assert reference_values(nested, item) == ["Lyon"]
    # A reference that reads the sample is not a fixed value: fall back to the usual keys.
    assert reference_values({**LIKE, "reference": "{{ sample.output_text }}"}, item) == [
        "Paris", "Lyon"]


# -- the audit ---------------------------------------------------------------------------------


async def test_like_grader_is_hacked_by_every_candidate(tmp_path: Path) -> None:
    report = await audit(tmp_path, LIKE)
    assert report.hackable
    assert [(h.task_id, h.kind, h.score) for h in report.hacks] == [
        ("q1", "all_candidates", 1.0), ("q2", "all_candidates", 1.0)]
    assert report.by_kind["all_candidates"].n_above == 2
    assert report.by_kind["empty"].n_above == 0 and report.by_kind["long"].max == 0.0
    assert any("'all_candidates'" in w and "`eq`" in w for w in report.warnings)
    # no baseline: the grader type alone says it is 0/1
    assert report.continuity is None
    assert any("not continuous" in w for w in report.warnings)


async def test_eq_grader_is_not_fooled(tmp_path: Path) -> None:
    report = await audit(tmp_path, EQ)
    assert not report.hackable
    assert report.by_kind["all_candidates"].n == 2 and report.by_kind["all_candidates"].max == 0.0
    assert not any(w.startswith("hackable") for w in report.warnings)


async def test_ne_grader_is_hacked_by_everything(tmp_path: Path) -> None:
    report = await audit(tmp_path, {**EQ, "operation": "ne"})
    assert {h.kind for h in report.hacks} == {"empty", "echo_prompt", "long", "all_candidates"}


async def test_tool_copy_from_the_baseline(tmp_path: Path) -> None:
    baseline = [
        baseline_rollout("q1", Score(score=0.0), "France: capital Paris", "weather: sunny"),
        baseline_rollout("q1", Score(score=1.0), "France: capital Paris"),  # same output once
        baseline_rollout("q2", Score(score=0.5), "Saturn is big"),  # no reference shown
        baseline_rollout("q1", Score(score=1.0), " paris\n"),  # is the answer: the tool doing its job
    ]
    report = await audit(tmp_path, EQ, baseline)
    copies = [r for r in report.results if r.kind == "tool_copy"]
    assert [(c.task_id, c.answer_preview, c.hack) for c in copies] == [
        ("q1", "France: capital Paris", False)]
    hacked = await audit(tmp_path, LIKE, baseline)
    assert ("q1", "tool_copy") in {(h.task_id, h.kind) for h in hacked.hacks}
    assert any("'tool_copy'" in w for w in hacked.warnings)


async def test_grader_errors_are_counted_never_hacks(tmp_path: Path) -> None:
    report = await audit(tmp_path, {**LIKE, "reference": "{{ item.missing }}"}, threshold=-1.0)
    assert report.hacks == []
    assert all(r.error and "missing" in r.error for r in report.results)
    assert report.by_kind["empty"].n_errors == 2
    assert any("grader error" in w for w in report.warnings)


# -- continuity --------------------------------------------------------------------------------


def test_continuity_stats() -> None:
    c = continuity([0.0, 1.0, 1.0, 0.0, 0.5])
    assert (c.n_scores, c.n_distinct, c.share_zero, c.share_one) == (5, 3, 0.4, 0.4)
    assert c.mean == pytest.approx(0.5) and not c.continuous  # 80% exactly 0 or 1
    smooth = continuity([0.1, 0.35, 0.6, 0.9, 1.0])
    assert smooth.continuous and smooth.share_one == 0.2 and smooth.n_distinct == 5
    assert not continuity([0.3, 0.7, 0.3, 0.7]).continuous  # two values only
    empty = continuity([])
    assert empty.n_scores == 0 and empty.share_zero is None and not empty.continuous


def test_baseline_continuity_leaves_out_errors_and_infra_failures() -> None:
    baseline = [baseline_rollout("q1", Score(score=s)) for s in (0.2, 0.4, 0.4, 0.9)]
    baseline += [baseline_rollout("q1", Score(score=0.0, error="judge: timeout")),
                 baseline_rollout("q1", Score(score=0.0), status="infra_failed"),
                 baseline_rollout("q1", None)]
    c = baseline_continuity(baseline)
    assert (c.n_scores, c.n_grader_errors, c.n_distinct, c.share_zero) == (4, 1, 3, 0.0)
    assert c.continuous


async def test_binary_baseline_warns(tmp_path: Path) -> None:
    baseline = [baseline_rollout("q1", Score(score=s)) for s in (0.0, 0.0, 1.0, 0.0)]
    report = await audit(tmp_path, EQ, baseline)
    assert report.continuity is not None and report.continuity.share_zero == 0.75
    assert any(w.startswith("not continuous: 2 distinct") for w in report.warnings)
