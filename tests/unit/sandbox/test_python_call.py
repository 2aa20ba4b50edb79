"""The call records and the messages the pool exchanges with the sandboxed worker (no process)."""

from __future__ import annotations

import pytest

from arft.sandbox.python_call import (CallLimits, CallResult, encode_args, imported_modules,
                                      launcher_limits, parse_answer)


def test_imported_modules() -> None:
    source = "import os, numpy.linalg as la\nfrom scipy import stats\nfrom . import x\n" \
             "def f():\n    import sympy\n"
    assert imported_modules(source) == ("os", "numpy.linalg", "scipy", "sympy")
    assert imported_modules("def (") == ()


def test_answers_become_results() -> None:
    assert parse_answer('{"value": [1, 2]}') == CallResult("ok", value=[1, 2])
    assert parse_answer(b'{"kind": "timeout", "error": "slow"}') == CallResult("timeout",
                                                                               error="slow")
    unreadable = parse_answer("not json")
    assert unreadable.kind == "crashed" and "unreadable answer" in (unreadable.error or "")


def test_arguments_must_be_json() -> None:
    assert encode_args(({"a": 1}, "x")) == b'[{"a": 1}, "x"]'
    bad = encode_args((object(),))
    assert isinstance(bad, CallResult) and bad.kind == "bad_input"


def test_a_zygote_gets_headroom_a_fresh_call_does_not() -> None:
    limits = CallLimits(timeout_s=3, memory_mb=100, disk_mb=10)
    fresh, zygote = launcher_limits(limits, zygote=False), launcher_limits(limits, zygote=True)
    assert fresh.memory_mb == 100 and fresh.cpu_s == 3
    assert zygote.memory_mb > 100 and zygote.cpu_s > 3
    assert fresh.workspace_tmpfs_mb == zygote.workspace_tmpfs_mb == 10


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="memory_mb"):
        CallLimits(memory_mb=0)
