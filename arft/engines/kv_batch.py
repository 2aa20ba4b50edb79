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
        """Keep only rows ``keep`` (an index may repeat: the row is copied), then drop the padding
        columns no remaining row needs. Each layer is copied once, into a new buffer."""
        import torch

        idx = torch.tensor(keep, device=self.mask.device)
        self.rows = [self.rows[i] for i in keep]
        self.mask = self.mask[idx]
        first = int(self.mask.any(dim=0).to(torch.int8).argmax())
        self.mask = self.mask[:, first:]
        for layer in self._layers():
            _rebuild(layer, [(layer.keys[i:i + 1, :, first:], layer.values[i:i + 1, :, first:])
                             for i in keep], self.mask.shape[1])

    def row_kv(self, i: int, n: int) -> list[tuple["torch.Tensor", "torch.Tensor"]]:
        """Copies of row ``i``'s keys and values at its first ``n`` real positions (mask 1, in
        order; holes and padding skipped): per layer ``[heads, n, head_dim]``."""
        import torch

        runs, left = [], n
        for a, b in _runs(self.mask[i].tolist()):
            if left <= 0:
                break
            runs.append((a, min(b, a + left)))
            left -= runs[-1][1] - a
        out = []
        for layer in self.cache.layers:
            k, v = layer.keys[i], layer.values[i]
            if len(runs) == 1:
                (a, b), = runs
                out.append((k[:, a:b].clone(), v[:, a:b].clone()))
            else:
                out.append((torch.cat([k[:, a:b] for a, b in runs], dim=-2),
                            torch.cat([v[:, a:b] for a, b in runs], dim=-2)))
        return out

    def merge(self, other: "KVBatch") -> None:
        """Append ``other``'s rows, left-padding the shorter cache so both have equal length.
        Each layer is copied once, into a new buffer."""
        import torch
        import torch.nn.functional as F

        t = max(self.mask.shape[1], other.mask.shape[1])
        self.mask = torch.cat([F.pad(m, (t - m.shape[1], 0)) for m in (self.mask, other.mask)])
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            _rebuild(mine, [(mine.keys, mine.values), (theirs.keys, theirs.values)], t)
        self.rows = self.rows + other.rows


def _runs(mask_row: list[int]) -> list[tuple[int, int]]:
    """``[start, end)`` of every run of ones."""
    runs, start = [], None
    for j, m in enumerate(mask_row + [0]):
        if m and start is None:
            start = j
        elif not m and start is not None:
            runs.append((start, j))
            start = None
    return runs


def _rebuild(layer: Any, parts: list[tuple["torch.Tensor", "torch.Tensor"]], t: int) -> None:
    """Stack ``parts`` (keys, values ``[b, H, len, D]``, each right-aligned at column ``t``) into
    the layer's new cache; a growing layer gets its spare capacity at once (no second copy)."""
    k0 = parts[0][0]
    rows = sum(k.shape[0] for k, _ in parts)
    spare = getattr(layer, "spare", 0)
    kbuf = k0.new_empty((rows, k0.shape[1], t + spare, k0.shape[-1]))
    vbuf = parts[0][1].new_empty((rows, k0.shape[1], t + spare, parts[0][1].shape[-1]))
    r = 0
    for k, v in parts:
        n, b = k.shape[-2], k.shape[0]
        kbuf[r:r + b, :, t - n:t] = k
        vbuf[r:r + b, :, t - n:t] = v
        kbuf[r:r + b, :, :t - n] = 0  # padding is masked, but must not be NaN garbage
        vbuf[r:r + b, :, :t - n] = 0
        r += b
    layer.keys, layer.values = kbuf[..., :t, :], vbuf[..., :t, :]
    if spare:
        layer.kbuf, layer.vbuf = kbuf, vbuf


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
