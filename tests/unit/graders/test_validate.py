"""graders/validate and graders/run as library calls: reading inputs, completing samples,
template paths, python sources (parsed, never run) and spec schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from arft.graders.validate import (InputError, complete_sample, python_problems,
                                   python_source_problems, run_grader,
                                   sample_from_text, template_problems, validate_grader)

LIKE = {"type": "string_check", "name": "has_answer", "input": "{{ sample.output_text }}",
        "reference": "{{ item.answer }}", "operation": "like"}


# -- inputs and samples ------------------------------------------------------------------------




def test_sample_from_text_has_every_key() -> None:
    s = sample_from_text('{"x": 1}')
    assert s["output_text"] == '{"x": 1}' and s["output_json"] == {"x": 1}
    assert s["output_tools"] == [] and s["trajectory"]["n_tool_calls"] == 0
    assert s["choices"][0]["message"]["content"] == '{"x": 1}'


def test_complete_sample_fills_defaults_and_keeps_given_keys() -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    s = complete_sample({"output_text": "[1, 2]", "output_tools": calls})
    assert s["output_json"] == [1, 2] and s["output_tools"] == calls
    assert s["trajectory"]["n_tool_calls"] == 1
    from_choices = complete_sample({"choices": [{"message": {"content": "hi"}}]})
    assert from_choices["output_text"] == "hi" and from_choices["output_json"] is None
    assert complete_sample({"output_text": "1", "output_json": None})["output_json"] is None


def test_complete_sample_rejects_unknown_keys_and_bad_text() -> None:
    with pytest.raises(InputError, match="did you mean 'output_tools'"):
        complete_sample({"output_tool": []})
    with pytest.raises(InputError, match="output_text must be a string"):
        complete_sample({"output_text": 3})


async def test_run_grader_grades_one_sample(tmp_path: Path) -> None:
    score = await run_grader(LIKE, tmp_path, {"answer": "Paris"}, sample_from_text("Paris!"))
    assert score.score == 1.0 and score.passed is True and score.grader == "has_answer"


# -- templates ---------------------------------------------------------------------------------


def test_valid_spec_has_no_problems(tmp_path: Path) -> None:
    assert validate_grader(LIKE, tmp_path) == []
    assert validate_grader(LIKE, tmp_path, item={"answer": "x"},
                           sample={"output_text": "x"}) == []


def test_missing_item_variable_is_named_with_its_path(tmp_path: Path) -> None:
    problems = validate_grader({**LIKE, "reference": "ref: {{ item.answr }}"}, tmp_path,
                               item={"id": "q1", "answer": "Paris"})
    assert problems == ["reference: {{ item.answr }}: item has no key 'answr' (it has: id, answer)"]


def test_multi_children_are_walked_with_their_paths() -> None:
    spec = {"type": "multi", "name": "m", "calculate_output": "0.5 * a + 0.5 * b", "graders": {
        "a": LIKE,
        "b": {"type": "score_model", "name": "judge", "input": [
            {"role": "user", "content": "Grade {{ sample.output_txt }} against {{ item.ref }}"}]},
    }}
    problems = template_problems(spec, item={"answer": "x"})
    assert len(problems) == 2
    assert problems[0].startswith("graders.b.input[0].content: {{ sample.output_txt }}: "
                                  "sample has no key 'output_txt'")
    assert problems[1].startswith("graders.b.input[0].content: {{ item.ref }}: item has no key 'ref'")


def test_default_sample_checks_top_keys_only() -> None:
    deep = {**LIKE, "input": "{{ sample.output_tools[0].function.arguments.city }}"}
    assert template_problems(deep) == []  # every sample has output_tools; its depth varies
    assert template_problems({**LIKE, "input": "{{ sample.trajectory.n_tool_calls }}"}) == []
    problems = template_problems({**LIKE, "input": "{{ sample.trajectory.calls }}"})
    assert len(problems) == 1 and "sample.trajectory has no key 'calls'" in problems[0]


def test_given_sample_resolves_the_whole_path() -> None:
    deep = {**LIKE, "input": "{{ sample.output_tools[0].function.name }}"}
    problems = template_problems(deep, sample=complete_sample({"output_text": "x"}))
    assert len(problems) == 1 and "has 0 element(s)" in problems[0]


def test_item_without_row_is_checked_for_syntax_only() -> None:
    assert template_problems({**LIKE, "reference": "{{ item.anything.at[0] }}"}) == []
    problems = template_problems({**LIKE, "reference": "{{ answer }}"})
    assert len(problems) == 1 and "must start with 'sample' or 'item'" in problems[0]


# -- python sources ----------------------------------------------------------------------------


def test_python_syntax_error_is_reported_without_building(tmp_path: Path) -> None:
    spec = {"type": "python", "name": "py", "source": "def grade(sample, item)\n    return 1.0\n"}
    problems = validate_grader(spec, tmp_path)
    assert len(problems) == 1
    assert problems[0].startswith("source: syntax error on line 1")


def test_python_without_grade(tmp_path: Path) -> None:
    spec = {"type": "python", "name": "py", "source": "def score(sample, item):\n    return 1.0\n"}
    problems = validate_grader(spec, tmp_path)
    assert problems == ["source: no top-level `def grade(sample, item)`; the python grader "
                        "calls grade(sample, item) and expects a float"]


def test_python_source_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w').write('x')\ndef grade(sample, item):\n    return 1.0\n"
    assert python_source_problems(source, "source") == []
    assert not marker.exists()


@pytest.mark.parametrize("signature, ok", [
    ("def grade(sample, item):", True),
    ("def grade(sample, item, scale=1.0):", True),
    ("def grade(*args):", True),
    ("def grade(sample, /, item):", True),
    ("def grade(sample):", False),
    ("def grade(sample, item, extra):", False),
    ("def grade(sample, item, *, key):", False),
    ("async def grade(sample, item):", False),
])
def test_grade_signature(signature: str, ok: bool) -> None:
    problems = python_source_problems(f"{signature}\n    return 1.0\n", "source")
    assert (problems == []) is ok, problems


def test_python_children_and_files(tmp_path: Path) -> None:
    (tmp_path / "g.py").write_text("def grade(sample):\n    return 0.0\n")
    spec = {"type": "multi", "graders": {
        "py": {"type": "python", "source": "def grade(sample, item):\n  return 1\n"},
        "fromfile": {"type": "python", "file": "g.py"},
        "missing": {"type": "python", "file": "nope.py"}}}
    problems = python_problems(spec, tmp_path)
    assert len(problems) == 2
    assert problems[0].startswith(f"graders.fromfile.file ({tmp_path / 'g.py'}): `grade` (line 1) "
                                  "takes (sample)")
    assert problems[1].startswith("graders.missing.file: cannot read")


# -- schema ------------------------------------------------------------------------------------


def test_unknown_type_and_bad_fields(tmp_path: Path) -> None:
    problems = validate_grader({"type": "string_chek", "name": "x"}, tmp_path)
    assert len(problems) == 1 and "type 'string_chek' is not supported" in problems[0]
    problems = validate_grader({**LIKE, "refrence": "x"}, tmp_path)
    assert len(problems) == 1 and "did you mean 'reference'" in problems[0]
    assert "must be a mapping" in validate_grader(["not", "a", "spec"], tmp_path)[0]
