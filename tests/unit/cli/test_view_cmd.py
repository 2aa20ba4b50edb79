"""The up-front port check of `arft view` and `arft serve` (serving itself: tests/unit/report/test_viewer.py)."""

from __future__ import annotations

import socket

from arft.serving import port_problem


def test_a_free_port_has_no_problem() -> None:
    assert port_problem("127.0.0.1", 0) is None


def test_a_busy_port_says_to_pass_another() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        problem = port_problem("127.0.0.1", port, "another `arft view`?")
    assert problem == (f"port {port} on 127.0.0.1 is already in use (another `arft view`?); "
                       "pass a free one with --port")
