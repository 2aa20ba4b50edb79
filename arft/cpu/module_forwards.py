"""Give a model's modules a forward of arft's own, or their own back: how the trainer's fused
functions (``fused_norm``, ``fused_ops``) enter Hugging Face's modules without copying them.

The forward is a ``functools.partial`` of a module-level function and the module, set on the
instance: the module still pickles, and a module whose forward something else already replaced
(a hub kernel) keeps that one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def set_forwards(policy: Any, select: Callable[[Any], bool], forward: Callable[..., Any], on: bool) -> int:
    """Give every module of ``policy`` that ``select`` takes ``forward`` (called with the module
    first) where ``on``, or take it away; returns how many modules have it now. Idempotent."""
    n = 0
    for module in policy.modules():
        if on and select(module) and "forward" not in module.__dict__:
            module.forward = functools.partial(forward, module)
        elif not on and has_forward(module, forward):
            del module.__dict__["forward"]
        n += has_forward(module, forward)
    return n


def has_forward(module: Any, forward: Callable[..., Any]) -> bool:
    """Whether ``module`` runs ``forward`` (``set_forwards``)."""
    current = module.__dict__.get("forward")
    return isinstance(current, functools.partial) and current.func is forward
