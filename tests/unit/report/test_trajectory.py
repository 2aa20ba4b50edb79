"""render_trajectory prints the header, every message and each tool call's result."""

from __future__ import annotations

from rich.console import Console

from arft.records import Message, Rollout, Score
from arft.report.trajectory import render_trajectory, truncate
from tests.unit.tracing.factories import make_rollout, tool_record


def _render(rollout: Rollout, **kw) -> str:  # type: ignore[no-untyped-def]
    console = Console(record=True, width=100)
    render_trajectory(rollout, console, **kw)
    return console.export_text()


def test_header_and_messages() -> None:
    score = Score(score=0.0, sub_scores={"f1": 0.25}, error="judge returned no JSON",
                  flags=("reward_hack",), grader="judge", latency_s=0.5)
    rollout = make_rollout(score=score, calls=[("search", 0), ("read", 0)], failing={1},
                           n_tokens=8, finish_reason="max_episode_steps")
    text = _render(rollout)
    for needle in [rollout.trace_id, "t1  sample 0  run run1", "max_episode_steps",
                   "no grade", "f1 0.25", "judge returned no JSON", "reward_hack",
                   "generate 1.00", "total 1.75", "8 total  4 sampled",
                   "0 system", "be brief", "find [bold]x[/bold]",  # brackets are not markup
                   '→ search({"q": "x"})', "call_id call_0", "← read [tool_error]",
                   "error: boom", "0.200s  HTTP 200", "the answer is 42"]:
        assert needle in text, needle
    assert text.index("be brief") < text.index("→ search") < text.index("the answer is 42")


def test_graded_reward_shown() -> None:
    text = _render(make_rollout(score=Score(score=0.75, passed=True, grader="f1")))
    assert "0.75  passed True  grader f1" in text
    assert "not graded" in _render(make_rollout())


def test_long_output_truncated_and_unanswered_calls_listed() -> None:
    base = make_rollout(calls=[("search", 0)])
    long = tool_record(base.trace_id, "call_0", output="x" * 5000)
    lost = tool_record(base.trace_id, "call_9", "shell", status="infra_error",
                       error="503 after 3 retries", http_status=503, output="")
    rollout = base.model_copy(update={"tool_calls": (long, lost), "messages": base.messages
                                      + (Message(role="user", content=None),)})
    text = _render(rollout, max_output_chars=100)
    assert "[truncated 4900 more chars]" in text
    assert "x" * 5000 not in text.replace("\n", "")
    assert "tool calls without a tool message" in text
    assert "shell [infra_error]" in text and "HTTP 503" in text and "503 after 3 retries" in text
    assert "(empty)" in text


def test_truncate() -> None:
    assert truncate("abc", 5) == "abc"
    assert truncate("abcdef", 3) == "abc… [truncated 3 more chars]"
    assert truncate("abcdef", 0) == "abcdef"
