"""The per-thread switch: on inside its block, for its thread only, restored when blocks nest."""

from __future__ import annotations

import threading

from arft.cpu.trainer_pass import ThreadFlag


def test_on_in_its_block_and_thread_only() -> None:
    flag = ThreadFlag()
    assert not flag
    seen = []
    with flag.on():
        assert flag
        worker = threading.Thread(target=lambda: seen.append(bool(flag)))
        worker.start()
        worker.join()
        with flag.on():
            assert flag
        assert flag  # the inner block restores on, not off
    assert not flag and seen == [False]


def test_restored_after_an_error() -> None:
    flag = ThreadFlag()
    try:
        with flag.on():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert not flag
