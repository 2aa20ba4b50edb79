"""What the fuzzing found, pinned: each input once ended in an unhandled exception (named in the
test's docstring) and now ends in the layer's own error with a message, or is handled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arft.config import JobError, load_job
from arft.data.dataset import DatasetError, load_tasks
from arft.data.importer import import_traffic
from arft.data.traffic import read_traffic
from arft.graders.base import GraderError
from arft.graders.registry import build_grader
from arft.graders.templates import TemplateError, render_template
from arft.graders.validate import validate_grader
from arft.http import BadAnswer, json_object, server_message
from arft.chat.toolcalls import parse_tool_calls
from bench.lib.fuzz.strategies import deep_json
from bench.lib.fuzz.targets import Target

DEEP = deep_json(100_000)
USER = {"role": "user", "content": "hi"}


def test_a_deeply_nested_dataset_line_names_its_line(tmp_path: Path) -> None:
    """Was RecursionError."""
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"messages": [USER]}) + '\n{"messages": ' + DEEP + "}\n")
    with pytest.raises(DatasetError, match=r"rows.jsonl:2: JSON nested too deeply"):
        load_tasks(path)


def test_a_dataset_byte_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    """Was UnicodeDecodeError, naming neither the file nor the line."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"messages": [{"role": "user", "content": "caf\xe9"}]}\n')
    with pytest.raises(DatasetError, match=r"rows.jsonl:1: not UTF-8 text \(byte 0xE9 at column 47\)"):
        load_tasks(path)


def test_a_deep_traffic_line_is_a_bad_line(tmp_path: Path) -> None:
    """Was RecursionError out of read_traffic (arft import, arft doctor --traffic)."""
    path = tmp_path / "log.jsonl"
    path.write_text('{"messages": ' + DEEP + "}\n" + json.dumps({"messages": [USER]}) + "\n")
    log = read_traffic(path)
    assert len(log.records) == 1 and "1: JSON nested too deeply" in log.errors[0]


def test_an_item_path_index_int_cannot_read_is_a_missing_key(tmp_path: Path) -> None:
    """``--item x=messages.²`` (and a 5,000-digit index) was ValueError from int()."""
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"messages": [USER]}) + "\n")
    for spec in ("x=messages.²", "x=messages." + "9" * 5_000):
        assert "has no" in read_traffic(path, item_paths=[spec]).errors[0]


def test_a_lone_surrogate_in_a_log_is_imported_as_its_escape(tmp_path: Path) -> None:
    """Was UnicodeEncodeError writing train.jsonl, and a serialisation error writing the report
    (a message key) — after the log had been read."""
    logs = tmp_path / "log.jsonl"
    logs.write_text(json.dumps({"messages": [{"role": "user", "content": "hi \ud800",
                                              "reasoning_\ud800": "x"}]}) + "\n")
    report = import_traffic(logs, tmp_path / "out")
    assert report.message_keys_dropped == {"reasoning_\\ud800": 1}
    assert "\\ud800" in (tmp_path / "out" / "train.jsonl").read_text(encoding="utf-8")
    assert load_tasks(tmp_path / "out" / "train.jsonl")[0].messages[0].content == "hi \ud800"


@pytest.mark.parametrize("suffix, content, message", [
    (".yaml", b"model: caf\xe9\n", "not UTF-8 text (byte 0xE9 at offset 10)"),
    (".json", ('{"method": ' + DEEP + "}").encode(), "nested too deeply to read"),
    (".yaml", ('{"method": ' + DEEP + "}").encode(), "nested too deeply to read"),
])
def test_a_job_file_that_cannot_be_read_is_a_job_error(tmp_path: Path, suffix: str,
                                                       content: bytes, message: str) -> None:
    """Were UnicodeDecodeError and RecursionError."""
    path = tmp_path / f"job{suffix}"
    path.write_bytes(content)
    with pytest.raises(JobError) as err:
        load_job(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_a_deep_json_job_with_a_bad_field_is_reported(tmp_path: Path) -> None:
    """Was RecursionError from PyYAML composing the file to find the bad field's line."""
    path = tmp_path / "job.json"
    path.write_text('{"method": ' + deep_json(700) + "}")
    with pytest.raises(JobError, match="method: Input should be a valid dictionary"):
        load_job(path)


def test_a_builtin_grader_named_by_a_mapping_is_a_grader_error(tmp_path: Path) -> None:
    """Was TypeError: unhashable type: 'dict'."""
    with pytest.raises(GraderError, match="is not a built-in design"):
        build_grader({"type": "builtin", "name": {}}, tmp_path)


@pytest.mark.parametrize("expression", ["1 + " * 20_000 + "1", "-" * 20_000 + "1"])
def test_python_grader_code_too_deep_to_compile(tmp_path: Path, expression: str) -> None:
    """Were RecursionError and MemoryError from CPython's parser (building, and validating)."""
    spec = {"type": "python", "source": f"def grade(sample, item):\n    return {expression}\n"}
    with pytest.raises(GraderError, match="nested too deeply to compile"):
        build_grader(spec, tmp_path)
    assert "nested too deeply to compile" in validate_grader(spec, tmp_path)[0]


def test_a_template_index_too_long_for_int_is_a_template_error(tmp_path: Path) -> None:
    """Was ValueError (int's 4,300-digit limit), out of validate_grader too."""
    template = "{{ item.facts[" + "9" * 5_000 + "] }}"
    with pytest.raises(TemplateError, match="cannot read the path"):
        render_template(template, {}, {"facts": [1]})
    spec = {"type": "string_check", "input": template, "reference": "a", "operation": "eq"}
    assert "cannot read the path" in validate_grader(spec, tmp_path)[0]


def test_a_deep_tool_call_is_a_parse_error() -> None:
    """Was RecursionError out of the rollout's turn parsing."""
    turn = parse_tool_calls("<tool_call>" + DEEP + "</tool_call>")
    assert turn.tool_calls == [] and "nested too deeply" in turn.errors[0]


def test_a_deep_endpoint_answer_is_a_bad_answer() -> None:
    """Was RecursionError out of EndpointTool.call (and the endpoint grader and judges)."""
    with pytest.raises(BadAnswer, match="nested too deeply"):
        json_object(DEEP.encode())
    assert server_message(DEEP.encode()).startswith("[[[")


def test_an_answer_that_does_not_match_its_encoding_is_retried(fuzz_targets: dict[str, Target]) -> None:
    """A gzip-labelled body that is not gzip was httpx.DecodingError out of EndpointTool.call;
    now it is retried like any garbage answer, then an infra error."""
    answer = (200, [(b"content-encoding", b"gzip")], b'{"output": "x"}')
    outcome = fuzz_targets["tool_response_http"].check((answer, {}))
    assert outcome is not None and outcome.startswith("infra_error: ")
    assert "answer could not be decoded" in outcome


def test_a_model_name_too_long_for_a_path_is_not_a_local_model(tmp_path: Path) -> None:
    """JobSpec.model_ref was OSError (ENAMETOOLONG) for a model name over 255 bytes."""
    path = tmp_path / "job.yaml"
    path.write_text("model: " + "x" * 300 + "\nmethod: {type: reinforcement, reinforcement: "
                    "{grader: {type: string_check, input: a, reference: a, operation: eq}}}\n")
    assert load_job(path).model_ref == "x" * 300
