"""The KV cache of rows decoded together, and a cache layer that grows in place.

Used by ``TransformersEngine`` for continuous batching: rows join (``merge``) and leave
(``select``) a running batch between decode steps.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class KVBatch:
    """Rows decoded together: their left-padded attention mask ``[B, T]`` and KV cache."""

    def __init__(self, rows: list[Any], cache: Any, mask: "torch.Tensor") -> None:
        self.rows, self.cache, self.mask = rows, cache, mask

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def mergeable(self) -> bool:
        """Only plain full-attention cache layers can be re-padded and concatenated."""
        from transformers.cache_utils import DynamicLayer

        return all(type(layer) in (DynamicLayer, growing_layer()) for layer in self.cache.layers)

    def _layers(self) -> list[Any]:
        return [layer for layer in self.cache.layers if layer.is_initialized and layer.keys.numel()]

    def select(self, keep: list[int]) -> None:
        """Keep only rows ``keep``, then drop the padding columns no remaining row needs."""
        import torch

        idx = torch.tensor(keep, device=self.mask.device)
        self.rows = [self.rows[i] for i in keep]
        self.mask = self.mask[idx]
        for layer in self._layers():
            layer.keys, layer.values = layer.keys[idx], layer.values[idx]
        first = int(self.mask.any(dim=0).to(torch.int8).argmax())
        if first > 0:
            self.mask = self.mask[:, first:]
            for layer in self._layers():
                layer.keys, layer.values = layer.keys[..., first:, :], layer.values[..., first:, :]

    def row_kv(self, i: int, n: int) -> list[tuple["torch.Tensor", "torch.Tensor"]]:
        """Copies of row ``i``'s keys and values at its first ``n`` real positions (mask 1, in
        order; holes and padding skipped): per layer ``[heads, n, head_dim]``."""
        cols = self.mask[i].nonzero().squeeze(-1)[:n]
        return [(layer.keys[i].index_select(-2, cols), layer.values[i].index_select(-2, cols))
                for layer in self.cache.layers]

    def merge(self, other: "KVBatch") -> None:
        """Append ``other``'s rows, left-padding the shorter cache so both have equal length."""
        import torch
        import torch.nn.functional as F

        t = max(self.mask.shape[1], other.mask.shape[1])

        def pad(x: torch.Tensor, dim_from_end: int) -> torch.Tensor:
            missing = t - x.shape[-dim_from_end]
            if missing == 0:
                return x
            spec = (0, 0) * (dim_from_end - 1) + (missing, 0)
            return F.pad(x, spec)

        self.mask = torch.cat([pad(self.mask, 1), pad(other.mask, 1)], dim=0)
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            mine.keys = torch.cat([pad(mine.keys, 2), pad(theirs.keys, 2)], dim=0)
            mine.values = torch.cat([pad(mine.values, 2), pad(theirs.values, 2)], dim=0)
        self.rows = self.rows + other.rows


@functools.cache
def growing_layer() -> type:
    """A ``DynamicLayer`` that appends into spare capacity instead of re-concatenating.

    The stock layer copies its whole cache on every decode step (``torch.cat``); this one keeps
    ``keys``/``values`` as prefix views of larger buffers and writes new positions in place,
    which made decode steps ~15% faster (SmolLM2-135M, 32 rows, CPU). Whenever ``keys`` is no
    longer a prefix view of the buffer (rows selected, merged or trimmed), it is re-buffered.
    """
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        spare = 128
        """Positions allocated ahead each time the buffer is (re)built."""

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.kbuf = self.vbuf = None
            t = self.keys.shape[-2] if self.keys.dim() == 4 else 0
            n = key_states.shape[-2]
            if not self._fits(t + n, key_states):
                self.kbuf, self.vbuf = self._buffer(self.keys, key_states, t, n), \
                    self._buffer(self.values, value_states, t, n)
            self.kbuf[..., t:t + n, :] = key_states
            self.vbuf[..., t:t + n, :] = value_states
            self.keys, self.values = self.kbuf[..., :t + n, :], self.vbuf[..., :t + n, :]
            return self.keys, self.values

        def _fits(self, length: int, new: Any) -> bool:
            kbuf = self.kbuf
            if kbuf is None or kbuf.shape[-2] < length or kbuf.shape[:2] != new.shape[:2]:
                return False
            if self.keys.dim() != 4:
                return True
            return (self.keys.data_ptr() == kbuf.data_ptr() and self.keys.stride() == kbuf.stride()
                    and self.values.data_ptr() == self.vbuf.data_ptr()
                    and self.values.stride() == self.vbuf.stride())

        def _buffer(self, old: Any, new: Any, t: int, n: int) -> Any:
            shape = (*new.shape[:2], t + n + self.spare, new.shape[-1])
            buf = new.new_empty(shape)
            if t:
                buf[..., :t, :] = old
            return buf

    return GrowingLayer
