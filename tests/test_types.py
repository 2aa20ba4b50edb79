"""arft type-checks and lints clean: mypy and ruff with the settings in pyproject.toml, and ``Any`` in
at most 5 % of the annotated parameters (tests/any_share.py says which packages hold them)."""

from __future__ import annotations

import subprocess
import sys

from tests.any_share import ROOT, count

# Kept where a third-party type is unreachable (torch's C++ objects, transformers' model classes
# that differ per architecture); everything else names its type.
MAX_ANY_SHARE = 0.05


def run(*args: str) -> subprocess.CompletedProcess[str]:
    # mypy's incremental cache (.mypy_cache) makes a rerun take seconds
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_mypy_is_clean() -> None:
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


def test_ruff_is_clean() -> None:
    result = run("ruff", "check", "--no-fix", "arft")
    assert result.returncode == 0, result.stdout + result.stderr


def test_any_is_rare_in_parameters() -> None:
    result = count()
    worst = ", ".join(f"{package} {n}" for package, n in result.by_package.most_common(5))
    assert result.share <= MAX_ANY_SHARE, f"{result.any_typed} of {result.annotated} parameters are Any: {worst}"
