"""Dataset loading: good rows become tasks; every bad row is reported as file:line: reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arft.data.dataset import DatasetError, check_task_tools, load_tasks, normalise_tool_schema

USER = {"role": "user", "content": "What is the capital of France?"}
LOOKUP = {"type": "function", "function": {"name": "lookup", "description": "Look up a fact.",
                                           "parameters": {"type": "object", "properties": {}}}}


def write_rows(path: Path, rows: list[Any]) -> Path:
    """One line per row: dicts/lists are JSON-encoded, strings written as they are."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def load_error(tmp_path: Path, rows: list[Any]) -> str:
    path = write_rows(tmp_path / "train.jsonl", rows)
    with pytest.raises(DatasetError) as err:
        load_tasks(path)
    return str(err.value)


def test_rows_become_tasks_with_item_and_ids(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "train.jsonl", [
        {"messages": [USER], "answer": "Paris", "facts": ["a", "b"]},
        "",
        {"id": "q2", "messages": [{"role": "system", "content": "Be brief."}, USER],
         "tools": [LOOKUP], "tool_choice": "auto", "answer": "Paris"},
    ])
    tasks = load_tasks(path)
    assert [t.id for t in tasks] == ["train:1", "q2"]
    assert tasks[0].item == {"answer": "Paris", "facts": ["a", "b"]}
    assert tasks[0].tools is None and tasks[0].tool_choice is None
    assert tasks[1].item == {"id": "q2", "answer": "Paris"}
    assert tasks[1].tools == (LOOKUP,)
    assert tasks[1].tool_choice == "auto"
    assert [m.role for m in tasks[1].messages] == ["system", "user"]
    assert tasks[1].messages[1].content == USER["content"]


def test_parallel_tool_calls_is_a_row_field_not_an_item_key(tmp_path: Path) -> None:
    tasks = load_tasks(write_rows(tmp_path / "d.jsonl", [
        {"messages": [USER], "parallel_tool_calls": False, "answer": "x"}, {"messages": [USER]}]))
    assert tasks[0].parallel_tool_calls is False and tasks[0].item == {"answer": "x"}
    assert tasks[1].parallel_tool_calls is None


def test_integer_id_becomes_string(tmp_path: Path) -> None:
    tasks = load_tasks(write_rows(tmp_path / "d.jsonl", [{"id": 7, "messages": [USER]}]))
    assert tasks[0].id == "7" and tasks[0].item == {"id": 7}


def test_content_parts_are_joined(tmp_path: Path) -> None:
    row = {"messages": [{"role": "user", "content": [{"type": "text", "text": "one"},
                                                     {"type": "input_text", "text": "two"}]}]}
    tasks = load_tasks(write_rows(tmp_path / "d.jsonl", [row]))
    assert tasks[0].messages[0].content == "one\ntwo"


def test_flat_responses_tool_schema_is_normalised(tmp_path: Path) -> None:
    flat = {"type": "function", "name": "lookup", "description": "Look up a fact.",
            "parameters": {"type": "object", "properties": {}}, "strict": True}
    tasks = load_tasks(write_rows(tmp_path / "d.jsonl", [{"messages": [USER], "tools": [flat]}]))
    assert tasks[0].tools == ({"type": "function", "function": {
        "name": "lookup", "description": "Look up a fact.",
        "parameters": {"type": "object", "properties": {}}, "strict": True}},)


def test_few_shot_tool_calls_and_tool_messages(tmp_path: Path) -> None:
    row = {"messages": [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "lookup", "arguments": {"q": "France"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Paris"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And Spain?"},
    ], "tools": [LOOKUP]}
    task = load_tasks(write_rows(tmp_path / "d.jsonl", [row]))[0]
    call = task.messages[1].tool_calls[0]
    assert call.id == "c1" and call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"q": "France"}
    assert task.messages[1].content is None
    assert task.messages[2].tool_call_id == "c1"


@pytest.mark.parametrize("row, reason", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ({"prompt": "hi"}, "no 'messages'"),
    ({"messages": []}, "non-empty list"),
    ({"messages": "hi"}, "non-empty list"),
    ({"messages": ["hi"]}, "messages[0] must be an object"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "role 'robot'"),
    ({"messages": [{"content": "x"}]}, "messages[0] has no 'role'"),
    ({"messages": [{"role": "user"}]}, "messages[0] has no 'content'"),
    ({"messages": [{"role": "user", "content": 3}]}, "'content' must be a string"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "content[0] must be a text part"),
    ({"messages": [{"role": "user", "content": "x", "weight": 1}]}, "unknown key(s) ['weight']"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "without 'tool_call_id'"),
    ({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]},
     "only tool messages carry 'tool_call_id'"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
     "only assistant messages carry 'tool_calls'"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]}]},
     "tool_calls[0] must be"),
    ({"messages": [{"role": "assistant", "tool_calls": [
        {"function": {"name": "f", "arguments": "{}"}}]}]}, "needs an 'id'"),
    ({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": "not json"}}]}]},
     "arguments must be a JSON object"),
    ({"messages": [USER], "tools": {"name": "x"}}, "'tools' must be a list"),
    ({"messages": [USER], "tools": ["lookup"]}, "tools[0] must be a function schema"),
    ({"messages": [USER], "tools": [{"type": "web_search"}]}, "only function tools"),
    ({"messages": [USER], "tools": [{"type": "function", "function": {"description": "d"}}]},
     "tools[0] has no function 'name'"),
    ({"messages": [USER], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": "object"}}]}, "must be a JSON schema object"),
    ({"messages": [USER], "tools": [LOOKUP, LOOKUP]}, "more than once"),
    ({"messages": [USER], "tool_choice": 3}, "'tool_choice' must be"),
    ({"messages": [USER], "parallel_tool_calls": "false"}, "'parallel_tool_calls' must be true or false"),
    ({"messages": [USER], "id": ""}, "'id' must be"),
    ({"messages": [USER], "id": [1]}, "'id' must be"),
])
def test_bad_row_names_file_line_and_reason(tmp_path: Path, row: Any, reason: str) -> None:
    # The bad row is on line 3, after a good row and a blank line, so the number is checked.
    message = load_error(tmp_path, [{"messages": [USER]}, "", row])
    assert message.startswith(f"{tmp_path / 'train.jsonl'}:3: ")  # one bad row: just its line
    assert reason in message
    assert ":1:" not in message  # the good row is not blamed


def test_all_bad_rows_are_reported_at_once(tmp_path: Path) -> None:
    message = load_error(tmp_path, ["nope", {"messages": [USER]}, {"messages": []}])
    assert message.startswith(f"{tmp_path / 'train.jsonl'}: 2 bad row(s)")
    assert "train.jsonl:1: not valid JSON" in message
    assert "train.jsonl:3: 'messages' must be a non-empty list" in message


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    message = load_error(tmp_path, [{"id": "a", "messages": [USER]}, {"messages": [USER]},
                                    {"id": "a", "messages": [USER]}])
    assert "train.jsonl:3: duplicate task id 'a' (also on line 1)" in message


def test_explicit_id_colliding_with_generated_id(tmp_path: Path) -> None:
    message = load_error(tmp_path, [{"messages": [USER]}, {"id": "train:1", "messages": [USER]}])
    assert "train.jsonl:2: duplicate task id 'train:1' (also on line 1)" in message


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_file_without_rows_is_an_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(text)
    with pytest.raises(DatasetError, match="has no rows"):
        load_tasks(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="dataset file not found"):
        load_tasks(tmp_path / "nope.jsonl")


def test_normalise_tool_schema_keeps_completions_shape() -> None:
    assert normalise_tool_schema(LOOKUP) == LOOKUP
    with pytest.raises(ValueError, match="must be a function schema"):
        normalise_tool_schema({"type": "function"})


def test_check_task_tools_accepts_provided_tools(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "d.jsonl", [
        {"messages": [USER], "tools": [LOOKUP], "tool_choice": "lookup"},
        {"messages": [USER], "tool_choice": "required"},
    ])
    check_task_tools(load_tasks(path), {"lookup", "shell"}, path)


def test_check_task_tools_names_task_tool_and_available(tmp_path: Path) -> None:
    search = {"type": "function", "function": {"name": "search"}}
    path = write_rows(tmp_path / "d.jsonl", [
        {"messages": [USER], "tools": [LOOKUP]},
        {"id": "q2", "messages": [USER], "tools": [LOOKUP, search]},
        {"messages": [USER], "tool_choice": {"type": "function", "function": {"name": "grep"}}},
    ])
    with pytest.raises(DatasetError) as err:
        check_task_tools(load_tasks(path), {"lookup", "shell"}, path)
    message = str(err.value)
    assert "task 'q2' names tool 'search'" in message
    assert "task 'd:3' names tool 'grep'" in message
    assert "available: lookup, shell" in message
    assert "'lookup'" not in message.split("available")[0]


def test_many_bad_rows_are_capped(tmp_path: Path) -> None:
    message = load_error(tmp_path, ["nope"] * 25)
    assert "25 bad row(s)" in message
    assert "train.jsonl:20: not valid JSON" in message
    assert "train.jsonl:21:" not in message
    assert message.endswith("... and 5 more")


def test_check_task_tools_skips_when_names_are_unknown(tmp_path: Path) -> None:
    # An MCP server's tool names are known only once it starts: None means "cannot check yet".
    path = write_rows(tmp_path / "d.jsonl", [{"messages": [USER], "tools": [LOOKUP]}])
    check_task_tools(load_tasks(path), None, path)
