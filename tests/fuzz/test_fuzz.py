"""Fuzzing every input arft reads from outside (DESIGN rule 5: bad input gets a clear error).

Each test feeds its target generated inputs, mostly near-valid ones (a valid example with a few
mutations: a key dropped, a wrong type, a huge or odd string, deep nesting), and holds the rule:
the input ends in success or in the layer's own arft error with a message — never in another
exception, never in a hang. ``python -m bench run fuzz`` runs the
same targets (``bench/lib/fuzz``) at 10,000 inputs each.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings

from bench.lib.fuzz import examples as ex
from bench.lib.fuzz import inputs
from bench.lib.fuzz.targets import Target


def test_every_target_is_fuzzed(fuzz_targets: dict[str, Target]) -> None:
    assert set(fuzz_targets) == {"dataset_rows", "job_specs", "grader_specs", "tool_call_text",
                                 "tool_response_body", "tool_response_http", "import_logs"}


@given(inputs.DATASET_FILE)
def test_dataset_rows(fuzz_targets: dict[str, Target], content: bytes) -> None:
    """load_tasks: a row or a DatasetError naming the file and line."""
    fuzz_targets["dataset_rows"].check(content)


@given(inputs.JOB_FILE)
def test_job_specs(fuzz_targets: dict[str, Target], job_file: tuple[str, bytes]) -> None:
    """load_job: a JobSpec or a JobError naming the file, line and field."""
    fuzz_targets["job_specs"].check(job_file)


@given(inputs.GRADER_SPEC)
def test_grader_specs(fuzz_targets: dict[str, Target], spec: Any) -> None:
    """GraderSpec + build_grader: a grader, or a GraderError / pydantic ValidationError."""
    fuzz_targets["grader_specs"].check(spec)


@given(inputs.MODEL_TURN)
def test_tool_call_text(fuzz_targets: dict[str, Target], turn: tuple[str, frozenset[str] | None]) -> None:
    """parse_tool_calls never raises: bad blocks are reasons in ParsedTurn.errors."""
    fuzz_targets["tool_call_text"].check(turn)


@given(inputs.RESPONSE_BODY)
def test_tool_response_body(fuzz_targets: dict[str, Target], body: bytes) -> None:
    """json_object + the endpoint tool's parser: an output or a BadAnswer (retried)."""
    fuzz_targets["tool_response_body"].check(body)


@given(inputs.HTTP_CALL)
def test_tool_response_http(fuzz_targets: dict[str, Target], call: Any) -> None:
    """EndpointTool.call against a real server on 127.0.0.1: a ToolOutcome, never raised."""
    fuzz_targets["tool_response_http"].check(call)


@given(inputs.TRAFFIC_FILE, inputs.IMPORT_OPTIONS)
def test_import_logs(fuzz_targets: dict[str, Target], content: bytes, options: dict[str, Any]) -> None:
    """read_traffic / traffic_tasks / import_traffic: records, or the importer's own errors."""
    fuzz_targets["import_logs"].check((content, options))


# -- the valid examples the mutations start from are valid ------------------------------------

VALID = settings(max_examples=40)


@VALID
@given(ex.DATASET_ROW)
def test_valid_rows_load(fuzz_targets: dict[str, Target], row: dict[str, Any]) -> None:
    assert fuzz_targets["dataset_rows"].check(json.dumps(row).encode() + b"\n") is None


@VALID
@given(ex.JOB_SPEC)
def test_valid_jobs_load(fuzz_targets: dict[str, Target], job: dict[str, Any]) -> None:
    assert fuzz_targets["job_specs"].check((".json", json.dumps(job).encode())) is None


@VALID
@given(ex.GRADER_SPEC)
def test_valid_grader_specs_build(fuzz_targets: dict[str, Target], spec: dict[str, Any]) -> None:
    assert fuzz_targets["grader_specs"].check(spec) is None


@VALID
@given(ex.CALL_OBJECT)
def test_valid_tool_calls_parse(fuzz_targets: dict[str, Target], call: Any) -> None:
    assert fuzz_targets["tool_call_text"].check((f"<tool_call>{json.dumps(call)}</tool_call>", None)) is None


@VALID
@given(ex.TRAFFIC_LINE)
def test_valid_traffic_lines_import(fuzz_targets: dict[str, Target], line: dict[str, Any]) -> None:
    options = {"item_paths": (), "item_optional": False, "redact": (), "with_job": False}
    assert fuzz_targets["import_logs"].check((json.dumps(line).encode() + b"\n", options)) is None
