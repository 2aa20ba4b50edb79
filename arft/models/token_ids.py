"""Token-id sequences compared by their common prefix (numpy is imported lazily, not when arft's
CLI starts). Used by the engine's prefix store and KV layout and by the trainer's micro-batching."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


def id_array(ids: "np.ndarray | Sequence[int]") -> "np.ndarray":
    """Token ids as an int64 array."""
    import numpy as np

    return np.asarray(ids, dtype=np.int64)


def common_prefix(a: "np.ndarray | Sequence[int]", b: "np.ndarray | Sequence[int]") -> int:
    """Length of the longest common prefix of two id sequences."""
    import numpy as np

    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.flatnonzero(id_array(a[:n]) != id_array(b[:n]))
    return int(differ[0]) if len(differ) else n


def common_prefix_of_all(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the prefix every sequence of ``seqs`` starts with (0 for none)."""
    if not seqs:
        return 0
    first = id_array(seqs[0])
    n = len(first)
    for s in seqs[1:]:
        n = min(n, common_prefix(first, s))
    return n
