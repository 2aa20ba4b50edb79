"""The layers of docs/architecture.md hold: import-linter's contracts in pyproject.toml pass, and
they have teeth (an upward import added to a copy of the package breaks them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


def test_layer_contracts_are_kept() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "arft", tmp_path / "arft", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    records = tmp_path / "arft" / "records.py"
    # even a lazy import, deep inside a function, counts
    records.write_text(records.read_text() + "\n\ndef _upward() -> None:\n    import arft.app.train  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode != 0
    assert "arft.records is not allowed to import arft.app" in result.stdout
