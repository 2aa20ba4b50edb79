"""JSON arguments: inline or a file, and errors that say what to pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from arft.cli.inputs import read_json_arg, read_object_arg, require_object
from arft.graders.validate import InputError


def test_read_json_arg_inline_and_file(tmp_path: Path) -> None:
    assert read_json_arg(' {"a": 1}', "--item")[0] == {"a": 1}
    (tmp_path / "g.json").write_text('{"b": 2}')
    data, base = read_json_arg(str(tmp_path / "g.json"), "--grader")
    assert data == {"b": 2} and base == tmp_path.resolve()
    with pytest.raises(InputError, match="--item: inline JSON is not valid"):
        read_json_arg("{'a': 1}", "--item")
    with pytest.raises(InputError, match="neither a file nor inline JSON"):
        read_json_arg(str(tmp_path / "none.json"), "--sample")


def test_require_object_names_the_argument() -> None:
    assert require_object({"a": 1}, "--item") == {"a": 1}
    with pytest.raises(InputError, match="--item must be a JSON object, got list"):
        require_object([1], "--item")


def test_read_object_arg_returns_the_object_or_fails_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "i.json").write_text('{"answer": "Paris"}')
    assert read_object_arg(str(tmp_path / "i.json"), "--item") == ({"answer": "Paris"},
                                                                    tmp_path.resolve())
    with pytest.raises(typer.Exit) as exit_:
        read_object_arg("[1, 2]", "--item")
    assert exit_.value.exit_code == 2
    assert "error: --item must be a JSON object, got list" in capsys.readouterr().err
