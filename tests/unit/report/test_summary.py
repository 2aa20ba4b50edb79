"""render_summary / summary_line print the numbers of ``arft.metrics.summary`` (the same
hand-made rollouts as tests/unit/metrics/test_summary.py)."""

from __future__ import annotations

from rich.console import Console

from arft.metrics.summary import EvalSummary, summarize
from arft.report.summary import render_summary, summary_line
from tests.unit.metrics.test_summary import summary  # noqa: F401  (the shared fixture)
from tests.unit.tracing.factories import make_rollout


def test_ungraded_rollouts_print_na_not_zero() -> None:
    assert "reward n/a" in summary_line(summarize([make_rollout()]))


def test_summary_line(summary: EvalSummary) -> None:
    line = summary_line(summary)
    assert "\n" not in line
    assert f"reward {summary.reward.mean:.3f}" in line
    assert f"pass@1 {summary.pass_at_k[1]:.3f}" in line
    assert "calls/rollout 2.38" in line
    assert "parse errors 2" in line and "infra failed 1/9" in line


def test_render_summary_prints_key_fields(summary: EvalSummary) -> None:
    console = Console(record=True, width=80)
    render_summary(summary, console)
    text = console.export_text()
    for needle in ["9 over 3 tasks", "infra_failed 1", "mean 0.533", "pass@k", "@2 0.500",
                   "grader errors 1", "37.5% of 8", "flaky", "20.0%", "0.480", "f1",
                   ">=10 | ", "0 | "]:
        assert needle in text, needle
    assert max(len(line) for line in text.splitlines()) <= 80
    render_summary(summarize([]), Console(record=True, width=80))  # nothing to show: no crash
