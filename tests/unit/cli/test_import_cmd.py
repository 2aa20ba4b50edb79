"""`arft import LOGS -o DIR` through the real CLI: the files it writes, its summary, its errors."""

from __future__ import annotations

import json
from pathlib import Path

from arft.data.dataset import load_tasks
from tests.unit.cli.runner import flat, invoke
from tests.unit.data.test_traffic import QUESTIONS, logged, many, SYSTEM, user, write


def test_import_writes_rows_demos_and_report_and_prints_the_next_step(tmp_path: Path) -> None:
    logs = write(tmp_path / "logs.jsonl", [*many(6), "{broken", {"messages": []}])
    out = invoke("import", str(logs), "-o", str(tmp_path / "data"), "--val-fraction", "0.2",
                 "--item", "answer=metadata.expected", "--item-optional")
    assert out.exit_code == 0, out.output
    text = flat(out.stdout)
    assert "lines read 14" in text and "bad lines (skipped) 2" in text
    assert "duplicate starts merged 6" in text and "rows 6" in text and "demonstrations 6" in text
    assert f"arft doctor JOB.yaml --traffic {logs}" in text
    assert f"arft sft JOB.yaml --data {tmp_path / 'data' / 'demos.jsonl'}" in text
    assert "logs.jsonl:13: not valid JSON" in flat(out.stderr)
    assert "logs.jsonl:14: 'messages' must be a non-empty list" in flat(out.stderr)
    data = tmp_path / "data"
    tasks = load_tasks(data / "train.jsonl") + load_tasks(data / "validation.jsonl")
    assert len(tasks) == 6 and {t.item["answer"] for t in tasks} == {"shipped"}
    report = json.loads((data / "import_report.json").read_text())
    assert report["bad_lines"] == 2 and report["train"] + report["validation"] == 6
    assert len((data / "demos.jsonl").read_text().splitlines()) == 6


def test_import_refuses_a_non_empty_folder_and_overwrites_with_force(tmp_path: Path) -> None:
    logs = write(tmp_path / "logs.jsonl", many(2))
    assert invoke("import", str(logs), "-o", str(tmp_path / "d")).exit_code == 0
    again = invoke("import", str(logs), "-o", str(tmp_path / "d"))
    assert again.exit_code == 2 and "--force" in flat(again.stderr)
    assert invoke("import", str(logs), "-o", str(tmp_path / "d"), "--force").exit_code == 0


def test_import_errors_say_what_to_do(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.jsonl", ["nope"])
    out = invoke("import", str(bad), "-o", str(tmp_path / "d1"))
    assert out.exit_code == 2 and "no valid line to import" in flat(out.stderr)
    assert "bad.jsonl:1: not valid JSON" in flat(out.stderr)
    out = invoke("import", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "d2"))
    assert out.exit_code == 2 and "traffic file not found" in flat(out.stderr)
    logs = write(tmp_path / "logs.jsonl", many(2))
    out = invoke("import", str(logs), "-o", str(tmp_path / "d3"), "--item", "messages=request.messages")
    assert out.exit_code == 2 and "'messages' is a row field" in flat(out.stderr)
    out = invoke("import", str(logs), "-o", str(tmp_path / "d4"), "--redact", "([")
    assert out.exit_code == 2 and "not a valid regular expression" in flat(out.stderr)
    out = invoke("import", str(logs), "-o", str(tmp_path / "d5"), "--near-dup", "120")
    assert out.exit_code == 2 and "between 0 and 100" in flat(out.stderr)
    assert not any((tmp_path / f"d{i}").exists() for i in range(1, 6))  # nothing written


def test_import_with_job_drops_unknown_tools_and_redacts(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text("def lookup_order(order_id: str) -> str:\n"
                                       "    '''Find an order.'''\n    return order_id\n")
    (tmp_path / "job.yaml").write_text(
        "training_file: data/train.jsonl\nmethod:\n  type: reinforcement\n  reinforcement:\n"
        "    grader: {type: string_check, name: g, input: '{{ sample.output_text }}', "
        "reference: x, operation: eq}\n"
        "    tools:\n      - {type: python, function: tools.py:lookup_order}\n")
    other = logged([SYSTEM, user("cancel order 9 for me@mail.example.com")],
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "c", "type": "function",
                        "function": {"name": "cancel_order", "arguments": "{}"}}]})
    mail = logged([SYSTEM, user(QUESTIONS[5] + " Reply to bob@corp.example.org")],
                  {"role": "assistant", "content": "Done."})
    logs = write(tmp_path / "logs.jsonl", [*many(3), other, mail])
    out = invoke("import", str(logs), "-o", str(tmp_path / "data"), "--job",
                 str(tmp_path / "job.yaml"), "--redact", "pii")
    assert out.exit_code == 0, out.output
    text = flat(out.stdout)
    assert "rows dropped: unknown tools (cancel_order x1) 1" in text and "redactions 2" in text  # the dropped row was redacted too
    assert f"arft doctor {tmp_path / 'job.yaml'} --traffic {logs}" in text
    written = "".join(p.read_text() for p in (tmp_path / "data").iterdir())
    assert "bob@corp.example.org" not in written and "cancel_order" in written  # in the report
    assert "me@mail.example.com" not in written


def test_import_prints_the_dropped_near_duplicates_beside_the_rows_they_matched(tmp_path: Path) -> None:
    near = logged([SYSTEM, user(QUESTIONS[0].replace("week", "weak"))], {"role": "assistant", "content": "ok"})
    logs = write(tmp_path / "logs.jsonl", [*many(3), near])
    out = invoke("import", str(logs), "-o", str(tmp_path / "d"))
    assert out.exit_code == 0, out.output
    (pair,) = json.loads((tmp_path / "d" / "import_report.json").read_text())["near_duplicate_pairs"]
    assert pair["dropped_text"] == QUESTIONS[0].replace("week", "weak").lower()
    assert pair["kept_text"] == QUESTIONS[0].lower() and pair["ratio"] >= 95
    text = flat(out.stdout)
    assert "near-duplicates dropped, compared on what varies between requests" in text
    assert f"{pair['dropped']} ~ {pair['kept']} (ratio {pair['ratio']:g})" in text
