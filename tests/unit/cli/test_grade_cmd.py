"""`arft grade` (the hosted graders/run) through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.cli.runner import flat, invoke, last_json, write

LIKE = {"type": "string_check", "name": "has_answer", "input": "{{ sample.output_text }}",
        "reference": "{{ item.answer }}", "operation": "like"}
EQ = {**LIKE, "name": "exact", "operation": "eq"}


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
