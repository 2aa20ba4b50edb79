"""What a ``TransformersEngine`` has done so far: requests, tokens, forward passes and batch sizes."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field


@dataclass
class EngineStats:
    """What the engine has done so far (written by the worker thread; read for monitoring)."""

    requests: int = 0
    """Requests answered (with a generation or an error)."""
    generated_tokens: int = 0
    prefills: int = 0
    """Prefill forward passes (each admits one or more requests)."""
    decode_steps: int = 0
    """Decode forward passes (one token for every row in the batch)."""
    steps_in_prefills: int = 0
    """Decode steps run in a prefill's forward pass (their rows ride along its products)."""
    max_rows: int = 0
    """Most rows decoded together in one forward pass."""
    cascade_steps: int = 0
    """Decode steps that read the rows' common prefix once for all of them (cascade attention)."""
    decode_batch_sizes: collections.Counter[int] = field(default_factory=collections.Counter)
    """How many decode steps ran with each batch size."""
    prefill_batch_sizes: collections.Counter[int] = field(default_factory=collections.Counter)
    constrained_tokens: int = 0
    """Tokens sampled under a grammar mask that excluded at least one token."""
    prompt_tokens: int = 0
    """Prompt tokens of the requests admitted."""
    prefill_tokens: int = 0
    """Prompt tokens actually run by prefill forward passes (the rest came from the prefix store
    or from a duplicate prompt admitted together)."""
