"""arft.pyfile.load_file: a file imported by path under its own name, cleaned up when it fails."""

from __future__ import annotations

import sys
from dataclasses import is_dataclass
from pathlib import Path

import pytest

from arft.pyfile import NotAPythonFile, load_file


def test_loads_a_file_under_its_own_name_with_dataclasses(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(
        "from dataclasses import dataclass\n@dataclass\nclass Row:\n    x: int\nVALUE = Row(3)\n")
    module = load_file(tmp_path / "tools.py", "pyfile_test_tools")
    assert module.VALUE.x == 3 and is_dataclass(module.Row)  # dataclasses need sys.modules
    assert sys.modules["pyfile_test_tools"] is module


def test_a_failing_file_is_not_left_in_sys_modules(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(RuntimeError, match="boom"):
        load_file(tmp_path / "broken.py", "pyfile_test_broken")
    assert "pyfile_test_broken" not in sys.modules


def test_a_path_python_cannot_import_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(NotAPythonFile, match="not an importable Python file"):
        load_file(tmp_path / "data.csv", "pyfile_test_csv")
