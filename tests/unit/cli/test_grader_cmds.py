"""`arft grade`, `arft grader validate` and `arft grader audit` through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from arft.cli.main import app as cli
from arft.records import Message, Rollout, Score, ToolCallRecord, new_trace_id
from arft.tracing.store import RunStore

LIKE = {"type": "string_check", "name": "has_answer", "input": "{{ sample.output_text }}",
        "reference": "{{ item.answer }}", "operation": "like"}
EQ = {**LIKE, "name": "exact", "operation": "eq"}
ROWS = [
    {"id": "q1", "messages": [{"role": "user", "content": "Capital of France?"}],
     "answer": "Paris", "options": ["Paris", "Lyon", "Nice"]},
    {"id": "q2", "messages": [{"role": "user", "content": "Largest planet?"}],
     "answer": "Jupiter", "options": ["Mars", "Jupiter"]},
]


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def write(path: Path, data: Any) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def last_json(output: str) -> dict[str, Any]:
    return json.loads(output.strip().splitlines()[-1])


# -- arft grade --------------------------------------------------------------------------------


def test_grade_inline_with_model_sample() -> None:
    out = invoke("grade", "--grader", json.dumps(LIKE), "--item", '{"answer": "Paris"}',
                 "--model-sample", "It is Paris.")
    assert out.exit_code == 0, out.output
    assert last_json(out.stdout) == {"score": 1.0, "sub_scores": {}, "passed": True,
                                     "error": None, "flags": []}
    assert "passed" in out.stdout.splitlines()[0]  # the rich rendering comes first


def test_grade_from_files_and_zero_score_exits_0(tmp_path: Path) -> None:
    grader = write(tmp_path / "g.json", EQ)
    item = write(tmp_path / "i.json", {"answer": "Paris"})
    good = write(tmp_path / "good.json", {"output_text": "Paris"})
    bad = write(tmp_path / "bad.json", {"output_text": "It is Paris."})
    assert last_json(invoke("grade", "-g", grader, "-i", item, "-s", good).stdout)["score"] == 1.0
    out = invoke("grade", "-g", grader, "-i", item, "-s", bad)
    assert out.exit_code == 0
    assert last_json(out.stdout)["score"] == 0.0 and last_json(out.stdout)["passed"] is False


def test_grade_sample_gets_output_json_from_output_text(tmp_path: Path) -> None:
    spec = {**EQ, "input": "{{ sample.output_json.city }}"}
    sample = json.dumps({"output_text": json.dumps({"city": "Paris"})})
    out = invoke("grade", "--grader", json.dumps(spec), "--item", '{"answer": "Paris"}',
                 "--sample", sample, "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["score"] == 1.0


def test_grade_json_output_is_only_the_object() -> None:
    out = invoke("grade", "--grader", json.dumps(LIKE), "--item", '{"answer": "Rome"}',
                 "--model-sample", "Paris", "--json")
    assert out.exit_code == 0
    result = json.loads(out.stdout)  # the whole stdout is one JSON object
    assert set(result) == {"score", "sub_scores", "passed", "error", "flags"}
    assert result["score"] == 0.0 and result["flags"] == [] and result["sub_scores"] == {}


def test_grade_template_error_is_reported_not_silent() -> None:
    out = invoke("grade", "--grader", json.dumps(LIKE), "--item", '{"answr": "Paris"}',
                 "--model-sample", "Paris", "--json")
    assert out.exit_code == 0
    result = json.loads(out.stdout)
    assert result["score"] == 0.0 and "item has no key 'answer'" in result["error"]


def test_grade_bad_json_exits_2_with_message(tmp_path: Path) -> None:
    out = invoke("grade", "--grader", "{not json", "--item", "{}", "--model-sample", "x")
    assert out.exit_code == 2
    assert "--grader: inline JSON is not valid" in flat(out.stderr)
    broken = tmp_path / "g.json"
    broken.write_text("{\"type\": ")
    out = invoke("grade", "--grader", str(broken), "--model-sample", "x")
    assert out.exit_code == 2 and f"{broken} is not valid JSON" in flat(out.stderr)
    out = invoke("grade", "--grader", str(tmp_path / "missing.json"), "--model-sample", "x")
    assert out.exit_code == 2 and "neither a file nor inline JSON" in flat(out.stderr)


def test_grade_bad_spec_and_bad_sample_exit_2() -> None:
    out = invoke("grade", "--grader", json.dumps({**LIKE, "operation": "contains"}),
                 "--model-sample", "x")
    assert out.exit_code == 2
    assert "field 'operation'" in flat(out.stderr) and "arft grader validate" in flat(out.stderr)
    out = invoke("grade", "--grader", json.dumps(LIKE), "--sample", '{"output_txt": "x"}')
    assert out.exit_code == 2 and "did you mean 'output_text'" in flat(out.stderr)
    out = invoke("grade", "--grader", json.dumps(LIKE), "--item", "[1]", "--model-sample", "x")
    assert out.exit_code == 2 and "--item must be a JSON object" in flat(out.stderr)


def test_grade_needs_exactly_one_sample_option() -> None:
    for extra in ([], ["--model-sample", "x", "--sample", '{"output_text": "x"}']):
        out = invoke("grade", "--grader", json.dumps(LIKE), *extra)
        assert out.exit_code == 2 and "exactly one of --sample" in flat(out.stderr)


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
    out = invoke("grader", "audit", job)
    assert out.exit_code == 2 and "invalid spec" in flat(out.stderr)
    out = invoke("grader", "audit", write_job(tmp_path, EQ), "--run", str(tmp_path))
    assert out.exit_code == 2 and "not an arft run directory" in flat(out.stderr)
