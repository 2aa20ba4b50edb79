"""Reading logged traffic (three shapes), and importing it: merging sessions, near-duplicates,
unknown tools, redaction, --item paths, the split, and the doctor reading the same formats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arft.app.doctor import load_data
from arft.config import load_job
from arft.data.dataset import DatasetError, load_tasks
from arft.data.importer import (TrafficImportError, import_traffic, job_tool_names,
                                near_duplicates, split_hash)
from arft.data.redact import PII_PATTERNS, RedactError, Redactor
from arft.data.traffic import read_traffic, traffic_tasks

SYSTEM = {"role": "system", "content": "You are the support agent of Acme. Use the tools."}
LOOKUP = {"type": "function", "function": {
    "name": "lookup_order", "description": "Find an order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}
REFUND = {"type": "function", "function": {
    "name": "refund", "description": "Refund an order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(cid: str, name: str, args: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}


def tool(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def logged(messages: list[dict[str, Any]], reply: dict[str, Any], tools: list[Any] | None = None,
           **extra: Any) -> dict[str, Any]:
    """A logged call: the request and a whole chat-completions response."""
    request: dict[str, Any] = {"model": "gpt-4.1", "messages": messages, "tool_choice": "auto"}
    if tools is not None:
        request["tools"] = tools
    response = {"id": "chatcmpl-1", "object": "chat.completion",
                "choices": [{"index": 0, "message": {"refusal": None, **reply},
                             "finish_reason": "stop"}]}
    return {"request": request, "response": response, **extra}


def session(question: str, order: str) -> list[dict[str, Any]]:
    """The two logged turns of one episode: the tool call, then the final answer."""
    start = [SYSTEM, user(question)]
    first = call("c1", "lookup_order", json.dumps({"order_id": order}))
    second = [*start, first, tool("c1", f"order {order}: shipped")]
    return [logged(start, first, [LOOKUP, REFUND]),
            logged(second, {"role": "assistant", "content": f"Order {order} has shipped."},
                   [LOOKUP, REFUND], metadata={"expected": "shipped"})]


def write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines),
                    encoding="utf-8")
    return path


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


QUESTIONS = ["Where is my order A-100? It has been a week.",
             "Can you refund order B-200, the box arrived broken?",
             "What is the status of my laptop order C-300 please",
             "I ordered a blue kettle last Monday, has it shipped yet?",
             "My parcel D-400 says delivered but I never got it.",
             "Please cancel the subscription attached to order E-500."]


def many(n: int = 6) -> list[dict[str, Any]]:
    return [rec for i in range(n) for rec in session(QUESTIONS[i], f"X-{i}")]


# -- the three shapes ---------------------------------------------------------------------------


def test_request_response_pairs_give_prompt_and_whole_conversation(tmp_path: Path) -> None:
    log = read_traffic(write(tmp_path / "t.jsonl", session(QUESTIONS[0], "A-100")))
    assert log.errors == [] and log.lines == 2 and len(log.records) == 2
    first, second = log.records
    assert first.prompt == [SYSTEM, user(QUESTIONS[0])] == second.prompt
    assert [m["role"] for m in second.conversation] == ["system", "user", "assistant", "tool",
                                                        "assistant"]
    assert second.conversation[-1] == {"role": "assistant", "content": "Order A-100 has shipped."}
    assert first.tools == [LOOKUP, REFUND] and first.tool_choice is None  # "auto" is not kept
    assert first.item == {}  # the logger's own keys are not item keys unless --item picks them


def test_bare_assistant_response_plain_request_and_fine_tuning_row(tmp_path: Path) -> None:
    bare = {"request": {"messages": [user("hi")]},
            "response": {"role": "assistant", "content": [{"type": "output_text", "text": "Hello"}]}}
    plain = {"messages": [SYSTEM, user("what now?")], "tools": [LOOKUP], "model": "m",
             "temperature": 0.2, "answer": "42", "tool_choice": "required"}
    ft = {"messages": [user([{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}]),
                       call("c9", "lookup_order", {"order_id": "Z"}), tool("c9", "ok"),
                       {"role": "assistant", "content": "done"}],
          "tools": [LOOKUP], "parallel_tool_calls": False}
    log = read_traffic(write(tmp_path / "t.jsonl", [bare, plain, ft]))
    assert log.errors == []
    a, b, c = log.records
    assert a.conversation == [user("hi"), {"role": "assistant", "content": "Hello"}]
    assert b.conversation is None and b.prompt == [SYSTEM, user("what now?")]
    assert b.item == {"answer": "42"}  # request parameters (model, temperature) are not items
    assert b.tool_choice == "required"
    assert c.prompt == [user("a\nb")] and len(c.conversation) == 4
    assert c.conversation[1]["tool_calls"][0]["function"]["arguments"] == '{"order_id": "Z"}'
    assert c.item == {}  # parallel_tool_calls is a request parameter...
    assert c.parallel_tool_calls is False and a.parallel_tool_calls is b.parallel_tool_calls is None


def test_parallel_tool_calls_off_reaches_rows_and_demos_and_a_bad_value_is_a_bad_line(
        tmp_path: Path) -> None:
    off = {"messages": [SYSTEM, user("one at a time"), call("c1", "lookup_order", {"order_id": "Q"}),
                        tool("c1", "ok"), {"role": "assistant", "content": "done"}],
           "tools": [LOOKUP], "parallel_tool_calls": False}
    on = {"messages": [SYSTEM, user("any way you like")], "tools": [LOOKUP], "parallel_tool_calls": True}
    bad = {"messages": [SYSTEM, user("bad")], "parallel_tool_calls": "no"}
    out = tmp_path / "out"
    report = import_traffic(write(tmp_path / "t.jsonl", [off, on, bad]), out)
    assert report.bad_lines == 1 and "t.jsonl:3: 'parallel_tool_calls' must be true or false" \
        in report.errors[0]
    rows = {r["messages"][1]["content"]: r for f in ("train", "validation")
            for r in jsonl(out / f"{f}.jsonl")}
    assert rows["one at a time"]["parallel_tool_calls"] is False
    assert "parallel_tool_calls" not in rows["any way you like"]  # true is the default: not written
    tasks = {t.messages[1].content: t for f in ("train", "validation")
             for t in load_tasks(out / f"{f}.jsonl")}
    assert tasks["one at a time"].parallel_tool_calls is False
    assert "parallel_tool_calls" not in tasks["one at a time"].item  # a row field, not an item key
    assert tasks["any way you like"].parallel_tool_calls is None
    (demo,) = jsonl(out / "demos.jsonl")
    assert demo["parallel_tool_calls"] is False


def test_legacy_functions_and_function_call_are_converted(tmp_path: Path) -> None:
    fn = LOOKUP["function"]
    line = {"request": {"messages": [user("find Q-1"), {"role": "assistant", "content": None,
                                                        "function_call": {"name": "lookup_order",
                                                                          "arguments": '{"order_id": "Q-1"}'}},
                                     {"role": "function", "name": "lookup_order", "content": "found"}],
                        "functions": [fn], "function_call": {"name": "lookup_order"}},
            "response": {"role": "assistant", "content": "It is found."}}
    rec = read_traffic(write(tmp_path / "t.jsonl", [line])).records[0]
    assert rec.tools == [LOOKUP]
    assert rec.tool_choice == {"type": "function", "function": {"name": "lookup_order"}}
    asst, answer = rec.conversation[1], rec.conversation[2]
    assert answer["role"] == "tool" and answer["tool_call_id"] == asst["tool_calls"][0]["id"]


def test_bad_lines_are_reported_with_line_numbers_and_the_rest_is_read(tmp_path: Path) -> None:
    lines: list[Any] = [session(QUESTIONS[0], "A")[1], "{not json", "[1, 2]", "",
                        {"prompt": "hi"}, {"messages": [{"role": "robot", "content": "x"}]},
                        {"messages": [user("x"), call("c", "f", "{bad")]},
                        {"messages": [tool("c", "x")]}, session(QUESTIONS[1], "B")[1]]
    log = read_traffic(write(tmp_path / "t.jsonl", lines))
    assert [r.line for r in log.records] == [1, 9] and log.lines == 8  # the blank line is no line
    lines_of = [e.split(":")[1] for e in log.errors]
    assert lines_of == ["2", "3", "5", "6", "7", "8"]
    text = "\n".join(log.errors)
    assert "not valid JSON" in text and "role 'robot'" in text and "unknown shape" in text
    assert "arguments is not valid JSON" in text and "tool message before any assistant" in text


def test_a_logged_call_without_response_is_a_row_without_demonstration(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps({"request": {"messages": [user("héllo")]}, "response": None})
                     .encode() + b"\n" + b'{"messages": [{"role": "user", "content": "\xff"}]}\n')
    log = read_traffic(path)
    assert [(r.prompt, r.conversation) for r in log.records] == [([user("héllo")], None)]
    assert log.errors == [f"{path}:2: not UTF-8 text; save the log as UTF-8"]


def test_message_fields_a_message_cannot_hold_are_counted(tmp_path: Path) -> None:
    line = logged([user("hi")], {"role": "assistant", "content": "yo",
                                 "reasoning_content": "thinking", "annotations": []})
    log = read_traffic(write(tmp_path / "t.jsonl", [line]))
    assert log.errors == [] and dict(log.dropped_keys) == {"reasoning_content": 1}


# -- import --------------------------------------------------------------------------------------


def test_sessions_merge_keeping_the_longest_and_rows_load(tmp_path: Path) -> None:
    logs = write(tmp_path / "t.jsonl", many())
    report = import_traffic(logs, tmp_path / "out", item_paths=["answer=metadata.expected"],
                            item_optional=True)
    assert report.records == 12 and report.duplicates_merged == 6 and report.rows == 6
    assert report.train + report.validation == 6 and report.validation >= 1
    rows = load_tasks(tmp_path / "out" / "train.jsonl") + load_tasks(tmp_path / "out" / "validation.jsonl")
    assert sorted(t.id for t in rows) == sorted(d["id"] for d in jsonl(tmp_path / "out" / "demos.jsonl"))
    assert all(t.item["answer"] == "shipped" for t in rows)  # from the longest (second) record
    assert all(len(t.messages) == 2 and t.tools and len(t.tools) == 2 for t in rows)
    demos = jsonl(tmp_path / "out" / "demos.jsonl")
    assert all(len(d["messages"]) == 5 and d["split"] in ("train", "validation") for d in demos)
    assert len(load_tasks(tmp_path / "out" / "demos.jsonl")) == 6  # arft sft reads it so
    saved = json.loads((tmp_path / "out" / "import_report.json").read_text())
    assert saved["rows"] == 6 and saved["demos"] == 6 and saved["duplicates_merged"] == 6


def test_row_ids_are_the_prompt_hash_and_the_split_is_stable(tmp_path: Path) -> None:
    recs = many()
    a = import_traffic(write(tmp_path / "a.jsonl", recs[:8]), tmp_path / "a", val_fraction=0.4)
    b = import_traffic(write(tmp_path / "a.jsonl", recs[:8]), tmp_path / "b", val_fraction=0.4)
    for name in ("train.jsonl", "validation.jsonl", "demos.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert a.rows == b.rows == 4
    c = import_traffic(write(tmp_path / "c.jsonl", recs), tmp_path / "c", val_fraction=0.4)
    assert c.rows == 6
    for split in ("train", "validation"):
        old = {r["id"] for r in jsonl(tmp_path / "a" / f"{split}.jsonl")}
        new = {r["id"] for r in jsonl(tmp_path / "c" / f"{split}.jsonl")}
        assert old <= new  # adding logs never moves a row to the other split
    assert all(r["id"].startswith("imp-") and len(r["id"]) == 16
               for r in jsonl(tmp_path / "c" / "train.jsonl"))
    assert all((split_hash(r["id"]) < 0.4) == (s == "validation") for s in ("train", "validation")
               for r in jsonl(tmp_path / "c" / f"{s}.jsonl"))


def test_an_empty_validation_split_gets_the_lowest_hash_row(tmp_path: Path) -> None:
    report = import_traffic(write(tmp_path / "t.jsonl", many()), tmp_path / "o", val_fraction=1e-9)
    assert report.validation == 1 and report.train == 5 and "lowest" in report.notes[0]
    ids = [r["id"] for r in jsonl(tmp_path / "o" / "train.jsonl")]
    (val,) = jsonl(tmp_path / "o" / "validation.jsonl")
    assert all(split_hash(val["id"]) < split_hash(i) for i in ids)


def test_near_duplicates_are_removed_and_exact_ones_merged(tmp_path: Path) -> None:
    recs = many(4)
    near = session(QUESTIONS[0].replace("week", "weak"), "X-0")  # a one-letter typo
    copy = session(QUESTIONS[1], "X-1")[1]  # exactly the same start as session 1
    report = import_traffic(write(tmp_path / "t.jsonl", [*recs, *near, copy]), tmp_path / "o")
    assert report.duplicates_merged == 4 + 1 + 1 and report.near_duplicates_removed == 1
    assert report.rows == 4
    prompts = [r["messages"][1]["content"] for s in ("train", "validation")
               for r in jsonl(tmp_path / "o" / f"{s}.jsonl")]
    assert QUESTIONS[0] in prompts and near[0]["request"]["messages"][1]["content"] not in prompts
    off = import_traffic(write(tmp_path / "t.jsonl", [*recs, *near]), tmp_path / "o2", near_dup=100)
    assert off.near_duplicates_removed == 0 and off.rows == 5


def test_near_duplicates_sorted_neighbourhood_finds_shared_ends_and_keeps_the_first() -> None:
    texts = ["please refund order 12345 today", "completely different request here",
             "xplease refund order 12345 today", "please refund order 12345 todax", "",
             ""]
    assert near_duplicates(texts, 90) == {2, 3}  # 2 shares an end with 0, 3 a start
    assert near_duplicates(texts, 100) == set()
    # 10,000 distinct texts: only neighbours are compared, so this is quick
    many_texts = [f"request number {i * 7919 % 10007} about item {i}" for i in range(10_000)]
    assert near_duplicates(many_texts, 99) == set()


def test_rows_calling_tools_the_job_lacks_are_dropped(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text("def lookup_order(order_id: str) -> str:\n"
                                       "    '''Find an order.'''\n    return order_id\n")
    (tmp_path / "job.yaml").write_text(
        "training_file: train.jsonl\nmethod:\n  type: reinforcement\n  reinforcement:\n"
        "    grader: {type: string_check, name: g, input: '{{ sample.output_text }}', "
        "reference: x, operation: eq}\n"
        "    tools:\n      - {type: python, function: tools.py:lookup_order}\n")
    job = load_job(tmp_path / "job.yaml")
    assert job_tool_names(job) == ({"lookup_order"}, ())
    refund = [logged([SYSTEM, user("refund R-1")], call("c1", "refund", '{"order_id": "R-1"}'),
                     [LOOKUP, REFUND])]
    report = import_traffic(write(tmp_path / "t.jsonl", [*many(3), *refund]), tmp_path / "o", job=job)
    assert report.rows_dropped_unknown_tools == 1 and report.dropped_unknown_tools == {"refund": 1}
    assert report.rows == 3 and report.offered_tools_removed == {"refund": 3}
    rows = [r for s in ("train", "validation") for r in jsonl(tmp_path / "o" / f"{s}.jsonl")]
    assert all([t["function"]["name"] for t in r["tools"]] == ["lookup_order"] for r in rows)
    assert not report.mcp_tools_unchecked


def test_mcp_tools_without_include_are_not_checked_but_other_names_are(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        "training_file: train.jsonl\nmethod:\n  type: reinforcement\n  reinforcement:\n"
        "    grader: {type: string_check, name: g, input: '{{ sample.output_text }}', "
        "reference: x, operation: eq}\n"
        "    tools:\n      - {type: shell}\n"
        "      - {type: mcp, command: [python, server.py], name_prefix: kb_}\n")
    job = load_job(tmp_path / "job.yaml")
    assert job_tool_names(job) == ({"shell"}, ("kb_",))
    lines = [logged([user(f"question {i} about the knowledge base")],
                    call("c", name, "{}")) for i, name in enumerate(["kb_search", "refund", "shell"])]
    report = import_traffic(write(tmp_path / "t.jsonl", lines), tmp_path / "o", job=job,
                            near_dup=100)  # the three questions are near-duplicates
    assert report.rows == 2 and report.dropped_unknown_tools == {"refund": 1}
    assert report.mcp_tools_unchecked and report.unchecked_tool_calls == {"kb_search": 1}


def test_item_paths_with_indices_and_missing_paths(tmp_path: Path) -> None:
    recs = many(2)
    logs = write(tmp_path / "t.jsonl", recs)
    report = import_traffic(logs, tmp_path / "o", item_paths=[
        "answer=metadata.expected", "reference=response.choices.0.message.content"])
    # the first turn of each session has no metadata: reported and skipped, the second kept
    assert report.bad_lines == 2 and report.rows == 2
    assert all(":1:" in e or ":3:" in e for e in report.errors)
    assert "--item answer=metadata.expected: the line has no 'metadata'" in report.errors[0]
    rows = [r for s in ("train", "validation") for r in jsonl(tmp_path / "o" / f"{s}.jsonl")]
    assert {r["reference"] for r in rows} == {"Order X-0 has shipped.", "Order X-1 has shipped."}
    with pytest.raises(ValueError, match="'tools' is a row field"):
        import_traffic(logs, tmp_path / "o3", item_paths=["tools=request.tools"])
    assert not (tmp_path / "o3").exists()


def test_redaction_by_regex_preset_and_hook_leaves_no_secret(tmp_path: Path) -> None:
    secrets = ["jane.doe@example.com", "sk-abcdefghijklmnop1234", "4111 1111 1111 1111",
               "+44 20 7946 0958", "10.20.30.40", "Bearer eyJhbGciOiJIUzI1NiJ9", "ACME-77-SECRET",
               "hunter2"]
    question = (f"I am {secrets[0]}, key {secrets[1]}, card {secrets[2]}, call {secrets[3]} "
                f"from {secrets[4]}; auth: {secrets[5]}; ticket {secrets[6]}")
    line = logged([SYSTEM, user(question)], call("c1", "lookup_order", json.dumps(
        {"order_id": secrets[6], "note": secrets[0]})), [LOOKUP], metadata={"pw": secrets[7]})
    (tmp_path / "hook.py").write_text("def scrub(text):\n"
                                      "    return text.replace('hunter2', '[REDACTED]')\n")
    report = import_traffic(write(tmp_path / "t.jsonl", [line]), tmp_path / "o",
                            item_paths=["pw=metadata.pw"], redact=["pii", r"ACME-\d+-SECRET"],
                            redact_hook=str(tmp_path / "hook.py") + ":scrub")
    assert report.redactions >= 9 and report.rows == 1
    for f in (tmp_path / "o").iterdir():
        text = f.read_text(encoding="utf-8")
        assert not any(s in text for s in secrets), f.name
    (demo,) = jsonl(tmp_path / "o" / "demos.jsonl")
    args = json.loads(demo["messages"][2]["tool_calls"][0]["function"]["arguments"])
    assert args == {"order_id": "[REDACTED]", "note": "[REDACTED]"}  # still valid JSON
    (row,) = jsonl(tmp_path / "o" / "train.jsonl") or jsonl(tmp_path / "o" / "validation.jsonl")
    assert row["pw"] == "[REDACTED]"


def test_pii_preset_keeps_ordinary_text() -> None:
    r = Redactor(["pii"])
    text = "Order 12345 of 2024-05-01 costs 19.99 EUR; call at 10:30, version 3.2."
    assert r(text) == text and r.count == 0
    assert set(PII_PATTERNS) == {"email", "api_key", "bearer", "card", "phone", "ipv4",
                                 "phone_international", "phone_parenthesised"}
    assert r("mail bob@x.org now") == "mail [REDACTED] now" and r.count == 1
    with pytest.raises(RedactError, match="not a valid regular expression"):
        Redactor(["(unclosed"])


def test_refuses_non_empty_out_without_force_and_all_bad_lines(tmp_path: Path) -> None:
    logs = write(tmp_path / "t.jsonl", many(2))
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "keep.txt").write_text("mine")
    with pytest.raises(TrafficImportError, match="--force"):
        import_traffic(logs, tmp_path / "o")
    assert import_traffic(logs, tmp_path / "o", force=True).rows == 2
    assert (tmp_path / "o" / "keep.txt").read_text() == "mine"
    with pytest.raises(TrafficImportError, match="(?s)no valid line.*t2.jsonl:1: not valid JSON"):
        import_traffic(write(tmp_path / "t2.jsonl", ["nope", "[]"]), tmp_path / "o2")


# -- the doctor reads the same formats -----------------------------------------------------------


def test_traffic_tasks_merge_sessions_and_keep_dataset_rows(tmp_path: Path) -> None:
    tasks = traffic_tasks(write(tmp_path / "t.jsonl", many(3)))
    assert [t.id for t in tasks] == ["t:1", "t:3", "t:5"]  # one task per session
    assert tasks[0].messages[1].content == QUESTIONS[0] and tasks[0].tools[0] == LOOKUP
    rows = traffic_tasks(write(tmp_path / "d.jsonl", [{"id": "r1", "messages": [user("a")],
                                                       "answer": "x"}]))
    assert rows[0].id == "r1" and rows[0].item == {"id": "r1", "answer": "x"}
    with pytest.raises(DatasetError, match="b.jsonl:2"):
        traffic_tasks(write(tmp_path / "b.jsonl", [many(1)[0], "oops"]))


def test_doctor_load_data_reads_request_response_traffic(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text(json.dumps({"id": "t1", "messages": [user("q")],
                                                      "answer": "a"}) + "\n")
    (tmp_path / "job.json").write_text(json.dumps({
        "training_file": "train.jsonl", "method": {"type": "reinforcement", "reinforcement": {
            "grader": {"type": "string_check", "name": "g", "input": "{{ sample.output_text }}",
                       "reference": "{{ item.answer }}", "operation": "eq"},
            "tools": [{"type": "shell"}]}}}))
    data = load_data(load_job(tmp_path / "job.json"), write(tmp_path / "traffic.jsonl", many(4)))
    assert data.traffic is not None and len(data.traffic) == 4
    assert {t.messages[-1].content for t in data.traffic} == set(QUESTIONS[:4])
