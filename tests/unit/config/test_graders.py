"""The job's typed grader: every type the registry builds, typos named with file, line and a
suggestion (nested graders too), and stored runs keep the grader as written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Union, get_args

import pytest

from arft.config import GraderSpec, JobError, JobSpec, load_job
from arft.config.loading import _members
from arft.graders.builtins import designs
from arft.graders.registry import build_grader, grader_types

CHECK = {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
         "reference": "{{ item.answer }}", "operation": "eq"}

MULTI_YAML = """\
method:
  type: reinforcement
  reinforcement:
    grader:
      type: multi
      calculate_output: "exact + files"
      graders:
        exact: {type: string_check, input: "{{ sample.output_text }}",
                reference: "{{ item.answer }}", operation: eq}
        files:
          type: builtin
          name: set_f1
          predicted: "{{ sample.output_json.files }}"
          reference: "{{ item.files }}"
"""


def job_error(path: Path) -> str:
    with pytest.raises(JobError) as err:
        load_job(path)
    return str(err.value)


def tags(union: Any, field: str) -> set[str]:
    return {v for m in _members(union) for v in get_args(m.model_fields[field].annotation)}


def test_a_typo_in_the_grader_names_file_line_and_suggestion(tmp_path: Path) -> None:
    job = {"method": {"type": "reinforcement", "reinforcement": {
        "grader": {**{k: v for k, v in CHECK.items() if k != "operation"}, "operaton": "eq"}}}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job, indent=2))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "operaton" in text)
    message = job_error(path)
    assert (f"{path}:{line}: method.reinforcement.grader.string_check.operaton: unknown field "
            "'operaton' (did you mean 'operation'?)") in message


def test_a_typo_in_a_multi_child_names_file_line_and_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(MULTI_YAML.replace("          reference: \"{{ item.files }}\"",
                                       "          refrence: \"{{ item.files }}\""))
    message = job_error(path)
    assert (f"{path}:14: method.reinforcement.grader.multi.graders.files.builtin.set_f1.refrence: "
            "unknown field 'refrence' (did you mean 'reference'?)") in message
    path.write_text(MULTI_YAML.replace("operation: eq", "opration: eq"))
    assert (f"{path}:9: method.reinforcement.grader.multi.graders.exact.string_check.opration: "
            "unknown field 'opration' (did you mean 'operation'?)") in job_error(path)


def test_a_misspelt_grader_type_or_design_is_suggested(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(MULTI_YAML.replace("type: string_check", "type: string_chek"))
    assert "did you mean 'string_check'?" in job_error(path)
    path.write_text(MULTI_YAML.replace("name: set_f1", "name: set_f2"))
    message = job_error(path)
    assert f"{path}:10: method.reinforcement.grader.multi.graders.files.builtin" in message
    assert "did you mean 'set_f1'?" in message


def test_the_union_covers_every_type_and_design_the_registry_builds() -> None:
    assert tags(GraderSpec, "type") == set(grader_types())
    builtins = [m for m in _members(GraderSpec) if "builtin" in get_args(m.model_fields["type"].annotation)]
    assert tags(Union[tuple(builtins)], "name") == set(designs())


def test_stored_runs_keep_the_grader_as_written(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(MULTI_YAML)
    job = load_job(path)
    stored = json.loads(json.dumps(job.model_dump(mode="json")))  # what the run store keeps
    grader = stored["method"]["reinforcement"]["grader"]
    assert "name" not in grader["graders"]["exact"]  # a child stays named by its key
    again = JobSpec.model_validate(stored)
    assert again.model_dump(mode="json") == stored and again.rl.grader == job.rl.grader


async def test_the_registry_builds_a_typed_grader(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(MULTI_YAML)
    grader = build_grader(load_job(path).rl.grader, tmp_path)
    assert grader.name == "multi" and set(grader.children) == {"exact", "files"}
    assert grader.children["exact"].name == "exact"

