"""The README is an entry point, the docs hold the rest, and the benchmark page is generated.

- README.md: at most 250 lines, ``make demo`` and ``make test`` in its first 10 lines, the library
  example on its first screen, no table row over 300 characters;
- every relative link in README.md and docs/*.md points to a file that exists;
- docs/benchmarks.md is exactly what ``python -m bench docs`` renders from bench/results/ now.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.lib.docs import DOCS, render

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    head = "\n".join(lines[:10])
    assert "make demo" in head and "make test" in head


def test_the_library_example_is_on_the_first_screen() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    first_screen = "\n".join(lines[:60])
    assert "```python" in first_screen and "load_job(" in first_screen and "train(" in first_screen


def test_no_readme_table_row_is_a_wall_of_text() -> None:
    long_rows = [line[:60] for line in README.read_text(encoding="utf-8").splitlines()
                 if line.startswith("|") and len(line) > 300]
    assert not long_rows


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_an_existing_file(page: Path) -> None:
    missing = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, or an anchor in the same page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{page.name} links to missing files: {missing}"


def test_the_benchmark_page_is_what_bench_docs_generates_now() -> None:
    assert DOCS.read_text(encoding="utf-8") == render(), (
        "docs/benchmarks.md is generated: run `python -m bench docs` after recording results")
