"""export_rollouts: one parseable JSON object per rollout, carrying its trace_id."""

from __future__ import annotations

import io
import json
from pathlib import Path

from arft.records import Score
from arft.tracing.export import export_rollouts
from arft.tracing.store import RunStore
from tests.unit.tracing.factories import make_rollout


def test_export_lines_parse_and_carry_trace_ids(tmp_path: Path) -> None:
    graded = make_rollout(score=Score(score=0.5, sub_scores={"f1": 0.5}, grader="g"),
                          calls=[("search", 0), ("read", 0)], n_tokens=8, failing={1})
    ungraded = make_rollout(task_id="t2", run_id="run2")
    with RunStore(tmp_path / "run.db") as store:
        store.add_rollout(graded)
        store.add_rollout(ungraded)
        out = io.StringIO()
        assert export_rollouts(store, out) == 2
        only = io.StringIO()
        assert export_rollouts(store, only, run_id="run2") == 1
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [x["trace_id"] for x in lines] == [graded.trace_id, ungraded.trace_id]
    first = lines[0]
    assert first["reward"] == 0.5 and first["score"]["sub_scores"] == {"f1": 0.5}
    assert first["messages"][1] == {"role": "user", "content": "find [bold]x[/bold]"}
    assert [c["call_id"] for c in first["tool_calls"]] == ["call_0", "call_1"]
    assert first["tool_calls"][1]["status"] == "tool_error"
    assert first["tool_calls"][1]["error"] == "boom"
    assert first["tool_calls"][0]["output"] == "result"
    assert first["tool_calls"][0]["latency_s"] == 0.1
    assert (first["n_tokens"], first["n_sampled_tokens"], first["n_turns"]) == (8, 4, 2)
    assert first["timings"]["total_s"] == 1.75 and first["item"]["answer"] == 42
    assert "token_ids" not in first
    assert lines[1]["reward"] is None and lines[1]["score"] is None
    assert json.loads(only.getvalue())["trace_id"] == ungraded.trace_id


def test_export_lines_say_the_step_split_and_sample_of_each_rollout(tmp_path: Path) -> None:
    trained = make_rollout(run_id="train", sample_index=2).model_copy(update={"step": 3})
    evaluated = make_rollout(run_id="train:eval-000003", sample_index=1).model_copy(update={"step": 3})
    baseline = make_rollout(run_id="baseline")
    legacy = make_rollout(run_id="old-eval")
    loose = make_rollout(run_id="no-run-row")
    with RunStore(tmp_path / "run.db") as store:
        store.create_run("train", "train", {"model": "m"})
        store.create_run("train:eval-000003", "eval", {"step": 3, "split": "validation"})
        store.create_run("baseline", "eval", {"model": "m", "split": "train"})  # arft eval --split train
        store.create_run("old-eval", "eval", {"model": "m"})  # recorded before runs kept their split
        for r in (trained, evaluated, baseline, legacy, loose):
            store.add_rollout(r)
        out = io.StringIO()
        export_rollouts(store, out)
    rows = {x["run_id"]: (x["split"], x["step"], x["sample"]) for x in map(json.loads, out.getvalue().splitlines())}
    assert rows == {"train": ("train", 3, 2), "train:eval-000003": ("validation", 3, 1),
                    "baseline": ("train", None, 0), "old-eval": ("eval", None, 0), "no-run-row": (None, None, 0)}
