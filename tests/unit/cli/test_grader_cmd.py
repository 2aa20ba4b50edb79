"""`arft grader validate` and `arft grader audit` through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arft.records import Message, Rollout, Score, ToolCallRecord, new_trace_id
from arft.tracing.store import RunStore
from tests.unit.cli.runner import flat, invoke, write
from tests.unit.cli.test_grade_cmd import EQ, LIKE

ROWS = [
    {"id": "q1", "messages": [{"role": "user", "content": "Capital of France?"}],
     "answer": "Paris", "options": ["Paris", "Lyon", "Nice"]},
    {"id": "q2", "messages": [{"role": "user", "content": "Largest planet?"}],
     "answer": "Jupiter", "options": ["Mars", "Jupiter"]},
]


# -- arft grader validate ----------------------------------------------------------------------


def test_validate_valid_and_invalid(tmp_path: Path) -> None:
    good = write(tmp_path / "g.json", LIKE)
    out = invoke("grader", "validate", good, "--item", '{"answer": "x"}')
    assert out.exit_code == 0 and "valid" in out.stdout
    bad = write(tmp_path / "b.json", {**LIKE, "input": "{{ sample.output_txt }}"})
    out = invoke("grader", "validate", bad)
    assert out.exit_code == 2
    assert "input: {{ sample.output_txt }}: sample has no key 'output_txt'" in flat(out.stderr)


def test_validate_python_syntax_error(tmp_path: Path) -> None:
    spec = write(tmp_path / "py.json", {"type": "python", "name": "py",
                                        "source": "def grade(sample, item)\n    return 1.0\n"})
    out = invoke("grader", "validate", spec)
    assert out.exit_code == 2 and "syntax error on line 1" in flat(out.stderr)


# -- arft grader audit -------------------------------------------------------------------------


def write_job(tmp: Path, grader: dict[str, Any]) -> str:
    (tmp / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    job = {"training_file": "val.jsonl", "validation_file": "val.jsonl",
           "method": {"type": "reinforcement", "reinforcement": {"grader": grader}}}
    return write(tmp / "job.json", job)


def test_audit_reports_the_like_hack(tmp_path: Path) -> None:
    out = invoke("grader", "audit", write_job(tmp_path, LIKE), "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert {(h["task_id"], h["kind"]) for h in report["hacks"]} == {("q1", "all_candidates"),
                                                                  ("q2", "all_candidates")}
    text = invoke("grader", "audit", write_job(tmp_path, LIKE))
    assert text.exit_code == 0
    assert "hackable" in text.stdout and "all_candidates" in text.stdout


def test_audit_eq_is_not_fooled_and_limit(tmp_path: Path) -> None:
    out = invoke("grader", "audit", write_job(tmp_path, EQ), "--json", "--limit", "1")
    report = json.loads(out.stdout)
    assert out.exit_code == 0 and report["hacks"] == [] and report["n_tasks"] == 1


def rollout(task_id: str, score: float, tool_output: str) -> Rollout:
    tid = new_trace_id()
    return Rollout(trace_id=tid, task_id=task_id, run_id="base",
                   messages=(Message(role="user", content="q"),
                             Message(role="assistant", content="a")),
                   tool_calls=(ToolCallRecord(trace_id=tid, call_id="c1", name="lookup",
                                              arguments="{}", output=tool_output),),
                   score=Score(score=score))


def test_audit_with_run_reads_baseline(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        for i, s in enumerate([0.0, 0.25, 0.5, 0.75, 1.0]):
            store.add_rollout(rollout("q1", s, "France: capital Paris" if i == 0 else "nothing"))
    out = invoke("grader", "audit", write_job(tmp_path, LIKE), "--run", str(tmp_path / "run"),
                 "--json", "--threshold", "0.9")
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["continuity"]["n_scores"] == 5 and report["continuity"]["n_distinct"] == 5
    copies = [r for r in report["results"] if r["kind"] == "tool_copy"]
    assert [(c["task_id"], c["answer_preview"], c["hack"]) for c in copies] == [
        ("q1", "France: capital Paris", True)]
    text = invoke("grader", "audit", write_job(tmp_path, LIKE), "--run", str(tmp_path / "run"))
    assert "continuity: 5 baseline grades, 5 distinct" in flat(text.stdout)


def test_audit_bad_inputs_exit_2(tmp_path: Path) -> None:
    out = invoke("grader", "audit", str(tmp_path / "nope.json"))
    assert out.exit_code == 2 and "job file not found" in flat(out.stderr)
    job = write_job(tmp_path, {"type": "string_check", "input": "x"})
    out = invoke("grader", "audit", job)  # the typed grader: a load error naming the field
    assert out.exit_code == 2 and "grader.string_check.operation: Field required" in flat(out.stderr)
    out = invoke("grader", "audit", write_job(tmp_path, EQ), "--run", str(tmp_path))
    assert out.exit_code == 2 and "not an arft run directory" in flat(out.stderr)
