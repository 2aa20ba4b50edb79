"""Give freed heap memory back to the operating system between training phases.

Generation (in a worker thread) and the update (in the main thread) allocate large, differently
shaped tensors; glibc keeps the freed pages in its arenas, so the resident size ratchets up
from phase to phase. ``malloc_trim(0)`` returns them: measured on the embedded model (3 rounds of
32 rollouts + an update of 16 × 664 tokens), peak RSS 5.0 GB with it vs 7.4 GB and growing
without it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_memory() -> bool:
    """Trim the C heap; False where the C library has no ``malloc_trim`` (not glibc)."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
