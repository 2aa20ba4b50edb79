"""The calculator example: the committed data is what make_data.py writes, with and without the
worked examples, and the plain-rows variant (job_plain.yaml) is the same tasks as real traffic."""

from __future__ import annotations

from pathlib import Path

from arft.pyfile import load_file
from tests.examples.plain_variant import check_plain_variant

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calculator"


def test_generator_is_deterministic_and_the_committed_data_is_current(tmp_path: Path) -> None:
    make_data = load_file(EXAMPLE / "make_data.py", "calculator_make_data_test")
    make_data.main(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl", "validation.jsonl"]
    for name in ("train.jsonl", "validation.jsonl"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes(), "run python make_data.py"


def test_plain_rows_are_the_same_tasks_without_worked_examples(tmp_path: Path) -> None:
    load_file(EXAMPLE / "make_data.py", "calculator_make_data_test").main(tmp_path, plain=True)
    check_plain_variant(EXAMPLE, tmp_path)
