"""A switch that is on for one thread inside a ``with`` block: how a caller tells the layers it
calls into which path to take (the engine's packed passes, the trainer's fused passes) without
passing an argument through every module of a model. The switches themselves live with the
rest of arft's process-wide state, in ``arft.cpu.patch`` (``TRAINER_PASSES``, ``PACKED_PASSES``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class ThreadFlag:
    """Off by default; ``with flag.on():`` turns it on for this thread, and the block's end
    restores what it was (blocks nest)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __bool__(self) -> bool:
        return getattr(self._local, "on", False)

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        before = bool(self)
        self._local.on = True
        try:
            yield
        finally:
            self._local.on = before
