"""A switch that is on for one thread inside a ``with`` block: how a caller tells the layers it
calls into which path to take (the engine's packed passes, the trainer's fused passes) without
passing an argument through every module of a model."""

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


TRAINER_PASSES = ThreadFlag()
"""On inside the trainer's own passes (the learner's old-logprob pass): the fused functions the
update uses (``arft.cpu.ops``) run there without a gradient too, so that its old-logprob pass
computes exactly what its update pass computes."""
