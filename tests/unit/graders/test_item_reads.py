"""The item fields a python grader reads, followed through the helper functions of its source; and
``arft doctor``'s field check on a grader that reads its item only in a helper."""

from __future__ import annotations

from pathlib import Path

from arft.graders.item_reads import item_keys
from tests.unit.app.test_doctor import good_rows, static, write_job

HELPERS = '''
import json

def expected(row):
    ref = row["answer"]
    return norm(ref, extra=row)

def norm(text, extra=None):
    return text.strip() + extra["unit"] + str(extra.get("optional_note", ""))

def by_keyword(*, data):
    return data["tolerance"]

def cycle(a):
    return cycle(a) if a["loop"] else 0

def grade(sample, item):
    row = item
    want = expected(item)
    closure = lambda: row["facts"]
    return float(want == sample["output_text"]) + by_keyword(data=item) + cycle(row)
'''


def test_reads_are_followed_through_helpers_aliases_keywords_and_cycles() -> None:
    assert sorted(item_keys(HELPERS)) == ["answer", "facts", "loop", "tolerance", "unit"]


def test_what_the_item_never_reaches_is_not_a_read() -> None:
    source = ("def other(d):\n    return d['not_the_item']\n"
              "def grade(sample, item):\n    return other(sample) + item.get('x', 0)\n")
    assert item_keys(source) == []
    assert item_keys("def grade(sample):\n    return 1") == []
    assert item_keys("def grade(:") == []


async def test_the_doctor_finds_a_field_read_only_in_a_helper(tmp_path: Path) -> None:
    source = ("def reference(row):\n    return row['answer']\n\n"
              "def grade(sample, item):\n    return float(reference(item) in sample['output_text'])\n")
    train, val = good_rows()
    del train[2]["answer"]
    checks = await static(write_job(tmp_path, train, val,
                                    grader={"type": "python", "name": "py", "source": source}))
    c = checks["task.fields"]
    assert c.verdict == "fail"  # it said "no item fields" (and passed) before
    assert c.details == ['{{ item["answer"] }} (grader source) missing in 1 row(s): train:t2']
