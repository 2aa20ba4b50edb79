"""The KV cache of rows decoded together, and a cache layer that grows in place.

Used by ``TransformersEngine`` for continuous batching: rows join (``merge``) and leave
(``drop``) a running batch between decode steps. Both work in place where they can: each cache
layer keeps its keys and values as a view of a larger buffer (spare rows and positions), so a
finished row's slot is filled by moving the last row into it, and joining rows are written into
spare rows; only the rows that move or join are copied. Rows joining with a longer history than
the batch's leave a masked hole in the rows already there instead of re-padding them. The whole
cache is rebuilt (one copy) only when the buffer is full or leading padding piles up.

A batch whose rows all start with the same tokens keeps them left-aligned in its first
``shared`` columns (``shared_ids``); rows that join keep that alignment (the rest of a row is
right-aligned, with a masked hole between), so cascade attention (``arft.cpu.cascade``) can
read those columns once for the whole batch.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

from arft.models.token_ids import common_prefix

if TYPE_CHECKING:
    import torch


class PassInputs(NamedTuple):
    """One forward pass of the engine's model (``ModelPass``): a decode step or a prefill."""

    ids: "torch.Tensor"
    """The new tokens ``[B, S]``."""
    positions: "torch.Tensor"
    """Their positions ``[B, S]``."""
    mask: "torch.Tensor"
    """``[B, T]``: 1 on the real columns of the cache once these tokens are appended."""
    cache: Any
    """The batch's KV cache; it grows in place."""
    shared: int = 0
    """Leading columns every row holds the same (cascade attention reads them once)."""


class KVBatch:
    """Rows decoded together: their left-padded attention mask ``[B, T]`` and KV cache."""

    def __init__(self, rows: list[Any], cache: Any, mask: "torch.Tensor", capacity: int = 0,
                 shared_ids: Sequence[int] = ()) -> None:
        self.rows, self.cache, self.mask = rows, cache, mask
        self.capacity = capacity
        """Rows a rebuilt buffer has room for (0: just the rows it holds), so later rows join in place."""
        self.shared_ids = list(shared_ids)
        """The tokens in columns ``[0, shared)`` of every row (same keys and values in each)."""

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def shared(self) -> int:
        """Leading columns every row holds the same tokens in (``shared_ids``), all unmasked."""
        return len(self.shared_ids)

    @property
    def mergeable(self) -> bool:
        """Only plain full-attention cache layers can be re-padded and concatenated."""
        from transformers.cache_utils import DynamicLayer

        return all(type(layer) in (DynamicLayer, growing_layer()) for layer in self.cache.layers)

    def step_inputs(self, device: "torch.device", cascade: bool) -> "PassInputs":
        """The inputs of this batch's next decode step: every row's last token at its next
        position; the mask grows by a column. ``cascade``: pass the shared columns (full-attention
        layers only)."""
        import torch

        ids = torch.tensor([[r.tokens[-1]] for r in self.rows], device=device)
        positions = torch.tensor([[r.next_position] for r in self.rows], device=device)
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.size, 1))], dim=1)
        return PassInputs(ids, positions, self.mask, self.cache, self.shared if cascade and self.mergeable else 0)

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
                             for i in keep], self.mask.shape[1], self.capacity)

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

    def drop(self, gone: list[int]) -> None:
        """Remove rows ``gone``. In place when the buffers allow: the last rows move into the
        freed slots (so the order of the remaining rows changes), and only they are copied.
        Otherwise, or when a quarter of the columns has become leading padding, ``select``."""
        import torch

        out = set(gone)
        keep = [i for i in range(self.size) if i not in out]
        n, t = len(keep), self.mask.shape[1]
        first = int(self.mask[keep].any(dim=0).to(torch.int8).argmax()) if keep else 0
        if not keep or 4 * first > t or not self._in_buffers(self.size, t):
            return self.select(keep)
        moves = list(zip([i for i in sorted(out) if i < n], [j for j in keep if j >= n]))
        order = list(range(n))
        for hole, mover in moves:
            order[hole] = mover
        for layer in self.cache.layers:
            for buf in (layer.kbuf, layer.vbuf):
                for hole, mover in moves:
                    buf[hole, :, :t] = buf[mover, :, :t]
            layer.keys, layer.values = layer.kbuf[:n, :, :t], layer.vbuf[:n, :, :t]
        self.rows = [self.rows[i] for i in order]
        self.mask = self.mask[torch.tensor(order, device=self.mask.device)]

    def merge(self, other: "KVBatch") -> None:
        """Append ``other``'s rows: into this batch's spare rows where its buffers have room,
        else by rebuilding, left-padding the shorter cache (each layer copied once)."""
        import torch

        lead = common_prefix(self.shared_ids, other.shared_ids)
        self.shared_ids = self.shared_ids[:lead]
        if self._append(other):
            return
        t = max(self.mask.shape[1], other.mask.shape[1])
        self.mask = torch.cat([_aligned(m, lead, t) for m in (self.mask, other.mask)])
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            _rebuild(mine, [(mine.keys, mine.values), (theirs.keys, theirs.values)], t, self.capacity, lead)
        self.rows = self.rows + other.rows

    def _append(self, other: "KVBatch") -> bool:
        """Write ``other``'s rows into spare rows of the buffers; ``False`` if they have no room.
        A longer ``other`` moves the write column right: the rows already here get a masked hole.
        ``other``'s first ``shared`` columns stay in place, its rest is right-aligned."""
        import torch
        import torch.nn.functional as F

        b, t, to = self.size, self.mask.shape[1], other.mask.shape[1]
        end, lead = max(t, to), self.shared
        if not self._in_buffers(b, t, rows=b + other.size, length=end):
            return False
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            for buf, new in ((mine.kbuf, theirs.keys), (mine.vbuf, theirs.values)):
                buf[:b, :, t:end] = 0  # masked, but must not be NaN garbage
                _place(buf[b:b + other.size, :, :end], new, lead)
            mine.keys, mine.values = mine.kbuf[:b + other.size, :, :end], mine.vbuf[:b + other.size, :, :end]
        self.mask = torch.cat([F.pad(self.mask, (0, end - t)), _aligned(other.mask, lead, end)])
        self.rows = self.rows + other.rows
        return True

    def _in_buffers(self, b: int, t: int, rows: int = 0, length: int = 0) -> bool:
        """Every layer holds its ``b`` x ``t`` cache as the leading view of a growing buffer with
        room for ``rows`` rows and ``length`` positions."""
        layer_type = growing_layer()
        for layer in self.cache.layers:
            kbuf = getattr(layer, "kbuf", None)
            if type(layer) is not layer_type or kbuf is None:
                return False
            grown = cast(Growing, layer)  # a growing_layer() layer, its buffers built
            if grown.keys.dim() != 4 or kbuf.shape[0] < max(rows, b) or kbuf.shape[-2] < max(length, t):
                return False
            if grown.keys.shape[0] != b or grown.keys.shape[-2] != t or not grown.in_buffer():
                return False
        return True


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


def _place(dst: "torch.Tensor", src: "torch.Tensor", lead: int = 0, dim: int = -2) -> None:
    """Write ``src`` into the longer ``dst`` along ``dim``: its first ``lead`` positions at the
    start, the rest right-aligned at the end, zeros between (masked, but must not be NaN garbage)."""
    w, n = dst.shape[dim], src.shape[dim]
    dst.narrow(dim, 0, lead).copy_(src.narrow(dim, 0, lead))
    dst.narrow(dim, lead, w - n).zero_()
    dst.narrow(dim, w - n + lead, n - lead).copy_(src.narrow(dim, lead, n - lead))


def _aligned(mask: "torch.Tensor", lead: int, t: int) -> "torch.Tensor":
    """``mask`` ``[b, n]`` widened to ``t`` columns the way ``_place`` widens its keys."""
    out = mask.new_empty((mask.shape[0], t))
    _place(out, mask, lead, dim=1)
    return out


def _rebuild(layer: Any, parts: list[tuple["torch.Tensor", "torch.Tensor"]], t: int, capacity: int = 0,
             lead: int = 0) -> None:
    """Stack ``parts`` (keys, values ``[b, H, len, D]``, each widened to ``t`` columns by
    ``_place`` with ``lead``) into the layer's new cache; a growing layer gets its spare positions
    and room for ``capacity`` rows at once (no second copy)."""
    k0 = parts[0][0]
    rows = sum(k.shape[0] for k, _ in parts)
    spare = getattr(layer, "spare", 0)
    room = max(rows, capacity) if spare else rows
    kbuf = k0.new_empty((room, k0.shape[1], t + spare, k0.shape[-1]))
    vbuf = parts[0][1].new_empty((room, k0.shape[1], t + spare, parts[0][1].shape[-1]))
    r = 0
    for k, v in parts:
        b = k.shape[0]
        _place(kbuf[r:r + b, :, :t], k, lead)
        _place(vbuf[r:r + b, :, :t], v, lead)
        r += b
    layer.keys, layer.values = kbuf[:rows, :, :t], vbuf[:rows, :, :t]
    if spare:
        layer.kbuf, layer.vbuf = kbuf, vbuf


class Growing(Protocol):
    """What a ``growing_layer()`` layer holds: its cache as leading views of larger buffers."""

    spare: int
    keys: torch.Tensor
    values: torch.Tensor
    kbuf: torch.Tensor | None
    vbuf: torch.Tensor | None

    def in_buffer(self) -> bool: ...


@functools.cache
def growing_layer() -> type:
    """A ``DynamicLayer`` that appends into spare capacity instead of re-concatenating (the
    stock layer copies its whole cache every decode step; this made decode steps ~15% faster).
    ``keys``/``values`` are leading views (rows and positions) of larger buffers, re-buffered
    whenever they are not."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        spare = 128  # positions allocated ahead each time the buffer is (re)built
        keys: torch.Tensor  # set by lazy_initialization before any read
        values: torch.Tensor
        kbuf: torch.Tensor | None
        vbuf: torch.Tensor | None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.kbuf = self.vbuf = None
            t = self.keys.shape[-2] if self.keys.dim() == 4 else 0
            n = key_states.shape[-2]
            if not _fits(self, t + n, key_states):
                pairs = ((self.keys, key_states), (self.values, value_states))
                self.kbuf, self.vbuf = (_buffer(self, old, new, t, n) for old, new in pairs)
            kbuf, vbuf = self.kbuf, self.vbuf
            assert kbuf is not None and vbuf is not None  # the buffers that fit, or the ones just built
            b = key_states.shape[0]
            kbuf[:b, :, t:t + n] = key_states
            vbuf[:b, :, t:t + n] = value_states
            self.keys, self.values = kbuf[:b, :, :t + n], vbuf[:b, :, :t + n]
            return self.keys, self.values

        def in_buffer(self) -> bool:
            """``keys``/``values`` are the leading views of ``kbuf``/``vbuf`` (set together)."""
            return (self.kbuf is not None and self.vbuf is not None and self.keys.data_ptr() == self.kbuf.data_ptr()
                    and self.keys.stride() == self.kbuf.stride()
                    and self.values.data_ptr() == self.vbuf.data_ptr()
                    and self.values.stride() == self.vbuf.stride())

    return GrowingLayer


def _fits(layer: Growing, length: int, new: torch.Tensor) -> bool:
    """Whether ``layer``'s buffers take ``new``'s rows up to position ``length`` as they are."""
    kbuf = layer.kbuf
    if kbuf is None or kbuf.shape[-2] < length or kbuf.shape[0] < new.shape[0] \
            or kbuf.shape[1] != new.shape[1]:
        return False
    if layer.keys.dim() != 4:
        return True
    return layer.keys.shape[0] == new.shape[0] and layer.in_buffer()


def _buffer(layer: Growing, old: torch.Tensor, new: torch.Tensor, t: int, n: int) -> torch.Tensor:
    """A new buffer for ``t + n`` positions and ``layer.spare`` more, holding ``old``'s ``t``."""
    rows = max(new.shape[0], 0 if layer.kbuf is None else layer.kbuf.shape[0])  # keep spare rows
    shape = (rows, new.shape[1], t + n + layer.spare, new.shape[-1])
    buf = new.new_empty(shape)
    if t:
        buf[:old.shape[0], :, :t] = old
    return buf
