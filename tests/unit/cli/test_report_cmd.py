"""`arft report`: its errors and its default viewer link (the full report: tests/integration)."""

from __future__ import annotations

from pathlib import Path

from arft.report.report_data import DEFAULT_VIEWER_URL
from arft.tracing.store import RunStore
from tests.unit.cli.runner import flat, invoke


def test_report_of_a_folder_without_a_store_exits_2(tmp_path: Path) -> None:
    out = invoke("report", str(tmp_path))
    assert out.exit_code == 2 and "is not an arft run directory" in flat(out.stderr)


def test_report_of_an_empty_store_says_what_is_missing(tmp_path: Path) -> None:
    RunStore(tmp_path / "arft.sqlite").close()
    out = invoke("report", str(tmp_path))
    assert out.exit_code == 2 and "holds no train or eval run yet" in flat(out.stderr)


def test_report_help_shows_the_viewers_default_address() -> None:
    out = invoke("report", "--help")
    assert out.exit_code == 0 and DEFAULT_VIEWER_URL in out.stdout
