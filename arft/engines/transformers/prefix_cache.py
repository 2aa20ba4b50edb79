"""Computed KV kept between requests: the prefix store of ``TransformersEngine``.

A multi-turn rollout sends, turn after turn, its whole conversation so far: the previous turn's
prompt and completion, then the tool results. The K samples of a task send the same prompt, and
the tasks of a job often share a system prompt and worked examples. The store keeps the keys and
values of finished requests (prompt plus completion) so that a new request whose prompt starts
with one of them prefills only what follows the longest common prefix.

- **Entries.** Token ids (exact, token in / token out) and one ``[heads, length, head_dim]`` key
  and value tensor per layer, copied out of the batch (the batch's buffers are written in place).
- **Lookup.** The entry with the longest common prefix wins; at most ``len(prompt) - 1`` tokens
  are reused, since the prompt's last token must be run to get the next token's logits.
- **Superseded entries.** An entry that is a prefix of a newly inserted one is dropped: the new
  one serves every lookup it served (a rollout's turn-2 entry replaces its turn-1 entry).
- **Budget.** ``budget_bytes`` bounds the stored tensors; the least recently used entries are
  evicted first, and a later request that needed one simply prefills again.
- **Weights.** Cached keys and values belong to the weights that computed them. The engine
  passes a fingerprint of its parameters (``check_weights``); any change (an optimizer step,
  a loaded checkpoint) clears the store. ``clear()`` does so explicitly.

Called from the engine's worker thread; ``clear`` may come from any thread (a lock guards it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Hashable, Sequence

from arft.models.token_ids import common_prefix, id_array

if TYPE_CHECKING:
    import numpy as np
    import torch

MB = 1024 * 1024


@dataclass(eq=False)
class PrefixEntry:
    """The keys and values of one token sequence (compared by identity)."""

    ids: np.ndarray
    """Token ids (int64), one per cached position."""
    kv: list[tuple["torch.Tensor", "torch.Tensor"]]
    """Per layer: keys and values ``[heads, len(ids), head_dim]``."""
    nbytes: int
    last_used: int = 0


@dataclass
class PrefixStats:
    """What the store has saved and spent (read for monitoring and benchmarks)."""

    hits: int = 0
    """Lookups that reused at least one token."""
    misses: int = 0
    reused_tokens: int = 0
    """Prompt tokens whose keys and values came from the store instead of a forward pass."""
    inserted: int = 0
    evicted: int = 0
    """Entries dropped to stay within the budget."""
    cleared: int = 0
    """Times the whole store was dropped (weights changed, or ``clear()``)."""
    peak_bytes: int = 0


@dataclass
class PrefixCache:
    """Longest-common-prefix KV store with LRU eviction under ``budget_bytes`` (see module doc)."""

    budget_bytes: int
    entries: list[PrefixEntry] = field(default_factory=list)
    stats: PrefixStats = field(default_factory=PrefixStats)
    _bytes: int = 0
    _clock: int = 0
    _weights: Hashable = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def nbytes(self) -> int:
        """Bytes of keys and values held now."""
        return self._bytes

    def clear(self) -> None:
        """Drop every entry (safe from any thread)."""
        with self._lock:
            if self.entries:
                self.stats.cleared += 1
            self.entries, self._bytes = [], 0

    def check_weights(self, fingerprint: Hashable) -> None:
        """Clear the store when ``fingerprint`` (of the model's weights) differs from the last."""
        if fingerprint != self._weights:
            self.clear()
            self._weights = fingerprint

    def lookup(self, prompt: Sequence[int]) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest prefix with ``prompt`` and that prefix's length (at most
        ``len(prompt) - 1``); ``(None, 0)`` when nothing is shared. Counted in ``stats``."""
        with self._lock:
            best, n = self._best(prompt)
            if best is None:
                self.stats.misses += 1
                return None, 0
            self._clock += 1
            best.last_used = self._clock
            self.stats.hits += 1
            self.stats.reused_tokens += n
            return best, n

    def reusable(self, prompt: Sequence[int]) -> int:
        """How many of ``prompt``'s tokens ``lookup`` would reuse (not counted, nothing touched)."""
        with self._lock:
            return self._best(prompt)[1]

    def _best(self, prompt: Sequence[int]) -> tuple[PrefixEntry | None, int]:
        ids = id_array(prompt)
        best, best_len = None, 0
        for entry in self.entries:
            n = common_prefix(entry.ids, ids)
            if n > best_len:
                best, best_len = entry, n
        best_len = min(best_len, len(ids) - 1)
        return (best, best_len) if best is not None and best_len > 0 else (None, 0)

    def insert(self, ids: Sequence[int], kv: list[tuple["torch.Tensor", "torch.Tensor"]]) -> bool:
        """Keep ``kv`` (already copied: the store owns it) for ``ids``; False when not kept (it
        alone exceeds the budget, or an entry already covers it)."""
        arr = id_array(ids)
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if self.budget_bytes <= 0 or nbytes > self.budget_bytes or not len(arr):
            return False
        with self._lock:
            self._clock += 1
            kept = []
            for entry in self.entries:
                n = common_prefix(entry.ids, arr)
                if n == len(arr):  # already covered by a longer or equal entry
                    entry.last_used = self._clock
                    return False
                if n == len(entry.ids):  # superseded by the new entry
                    self._bytes -= entry.nbytes
                else:
                    kept.append(entry)
            kept.append(PrefixEntry(arr, kv, nbytes, self._clock))
            self.entries, self._bytes = kept, self._bytes + nbytes
            self.stats.inserted += 1
            self._evict()
            self.stats.peak_bytes = max(self.stats.peak_bytes, self._bytes)
            return True

    def _evict(self) -> None:
        while self._bytes > self.budget_bytes and self.entries:
            oldest = min(self.entries, key=lambda e: e.last_used)
            self.entries.remove(oldest)
            self._bytes -= oldest.nbytes
            self.stats.evicted += 1

