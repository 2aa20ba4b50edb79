"""Overlap and drift between dataset splits (arft.data.checks)."""

from __future__ import annotations

from typing import Any

import pytest

from arft.data.checks import (ALL_JOB_TOOLS, KS_MIN_STATISTIC, ks_critical, ks_statistic,
                              presence_shares, prompt_text, split_drift, split_overlap, tools_of)
from arft.records import FunctionCall, Message, Task, ToolCall


def task(tid: str, prompt: str, tools: list[str] | None = None, **item: Any) -> Task:
    schemas = tuple({"type": "function", "function": {"name": n}} for n in tools) if tools else None
    return Task(id=tid, messages=(Message(role="system", content="Be brief."),
                                  Message(role="user", content=prompt)),
                tools=schemas, item={"id": tid, **item})


def test_prompt_text_is_the_last_user_message() -> None:
    t = Task(id="a", messages=(Message(role="user", content="What is 1 + 1?"),
                               Message(role="assistant", content="2."),
                               Message(role="user", content="And 2 + 2?")))
    assert prompt_text(t) == "And 2 + 2?"
    assert prompt_text(Task(id="b", messages=(Message(role="system", content="x"),))) == ""


def test_overlap_finds_exact_copies_and_near_duplicates_only() -> None:
    train = [task("t1", "What is the capital of France?"),
             task("t2", "Summarise the design document for the billing service."),
             task("t3", "Please calculate 84 * 20.")]
    val = [task("v1", "  what is the CAPITAL of   France? "),             # a copy: case, spaces
           task("v2", "Summarise the design document for the biling service."),  # a typo
           task("v3", "Please calculate 23 * 22."),                     # templated, not a copy
           task("v4", "Which port does the cache listen on?")]
    o = split_overlap(train, val)
    assert o.exact == [("v1", "t1")]
    assert [(b, a) for b, a, _ in o.near] == [("v2", "t2")]
    assert o.near[0][2] >= 95
    assert o.share_exact == 0.25 and o.share_near == 0.25
    assert split_overlap(train, []).share_exact == 0.0


def test_ks_statistic_and_critical_value() -> None:
    assert ks_statistic([1, 2, 3], [1, 2, 3]) == 0.0
    assert ks_statistic([1, 2, 3], [10, 11]) == 1.0
    assert ks_statistic([1, 2, 3, 4], [3, 4, 5, 6]) == pytest.approx(0.5)
    assert ks_critical(100, 100) == pytest.approx(1.63 * (200 / 10000) ** 0.5)
    with pytest.raises(ValueError, match="non-empty"):
        ks_statistic([], [1])


def test_tools_of_a_row() -> None:
    few_shot = Task(id="x", messages=(
        Message(role="user", content="q"),
        Message(role="assistant", tool_calls=(ToolCall(id="c", function=FunctionCall(name="calc")),)),
        Message(role="tool", content="1", tool_call_id="c"),
        Message(role="user", content="q2")), tool_choice="search")
    assert tools_of(few_shot) == ["search"]  # a worked example's call is not a tool it names
    assert tools_of(task("a", "q", tools=["lookup"])) == ["lookup"]
    assert tools_of(task("b", "q")) == [ALL_JOB_TOOLS]
    assert presence_shares([["a"], ["a", "b"], []]) == {"a": 2 / 3, "b": 1 / 3}


def test_drift_alike_sets_do_not_drift() -> None:
    a = [task(f"a{i}", f"What is {i} plus {i + 1}?", answer=str(2 * i + 1)) for i in range(30)]
    b = [task(f"b{i}", f"What is {i} plus {i + 2}?", answer=str(2 * i + 2)) for i in range(10)]
    d = split_drift(a, b, "train", "validation")
    assert d.length_ks == 0.0 and d.length_limit >= KS_MIN_STATISTIC
    assert d.drifted == []


def test_drift_in_length_tools_and_fields() -> None:
    a = [task(f"a{i}", "Short question here?", tools=["search"], answer="x") for i in range(20)]
    b = [task(f"b{i}", " ".join(["word"] * (40 + i)), tools=["shell"], context="y")
         for i in range(20)]
    d = split_drift(a, b, "train", "traffic")
    assert d.length_median_a == 3 and d.length_ks == 1.0
    found = "\n".join(d.drifted)
    assert "prompt length" in found and "tool 'search' in 100% vs 0%" in found
    assert "tool 'shell'" in found and "field 'answer'" in found and "field 'context'" in found
    # real traffic carries no answers: fields it never has are left out and listed
    d2 = split_drift(a, b, "train", "traffic", ignore_missing_fields=True)
    assert d2.fields_ignored == ["answer"]
    assert not any("'answer'" in x for x in d2.drifted) and any("'context'" in x for x in d2.drifted)
    with pytest.raises(ValueError, match="both sets"):
        split_drift(a, [], "train", "validation")
