"""A prefill's rows run without their padding: their real new tokens as one sequence.

The engine prefills several prompts in one pass (``arft.engines.transformers.prefill``): row ``u`` has
``s_u`` new tokens, left-padded to the longest, ``S``, after its cached columns. A padded pass
runs ``U x S`` token rows through every projection and attends over every row's ``W`` columns;
with the tool results of a multi-turn batch that was 22 % padded tokens and 42 % masked attention
area in one 24-row admission. ``RaggedRows`` lets ``fused_pass`` run only the ``N = sum s_u``
real tokens:

- ``pack`` takes a ``[U, S]`` tensor's real entries in order (row by row) as ``[N]``;
- ``unpack`` puts a packed ``[1, H, N, D]`` back in the padded ``[U, H, S, D]`` layout the cache
  keeps (zeros where padding is: masked, and never NaN garbage);
- ``attend`` runs each row's queries over its own real columns of the cache (a view where they
  are one run, gathered where the mask has a hole), causal in the last ``s_u``, without copying
  key/value heads (``cascade.grouped``).

The results equal the padded pass's within float rounding (the tests compare with Hugging
Face's forward). torch is imported lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from arft.cpu import cascade

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class _Row:
    start: int
    """Where the row's tokens begin in the packed sequence."""
    count: int
    """Its real new tokens."""
    columns: "slice | torch.Tensor"
    """Its real cache columns once they are appended: one run (a slice), or their indices."""
    mask: "torch.Tensor | None"
    """Additive causal mask ``[1, 1, count, columns]`` (``None`` for a single query)."""


class RaggedRows:
    """The real new tokens of a prefill's rows (module doc). ``new`` ``[U, S]`` marks them (every
    row needs at least one; the real ones of a row come after its padding), ``mask`` ``[U, W]``
    marks every real cache column once they are appended (the new ones are its last ``S``)."""

    def __init__(self, new: "torch.Tensor", mask: "torch.Tensor", dtype: "torch.dtype | None" = None) -> None:
        import torch

        new = new.bool()
        counts = new.sum(dim=1).tolist()
        if not counts or min(counts) < 1:
            raise ValueError("every row of a ragged prefill needs at least one new token")
        self.shape = tuple(new.shape)
        self.dense = bool(new.all())
        self.flat = None if self.dense else new.reshape(-1).nonzero().squeeze(1)
        """Each packed token's index in the flattened ``[U * S]`` layout (``None``: no padding)."""
        ends = torch.tensor(counts).cumsum(0)
        self.last = (ends - 1).to(mask.device)
        """Each row's last token in the packed sequence."""
        masks: dict[tuple[int, int], torch.Tensor | None] = {}
        self.rows: list[_Row] = []
        for u, (count, end) in enumerate(zip(counts, ends.tolist())):
            real = mask[u].bool().nonzero().squeeze(1)
            width = int(real.numel())
            one_run = int(real[-1]) - int(real[0]) + 1 == width
            columns = slice(int(real[0]), int(real[-1]) + 1) if one_run else real
            key = (count, width)
            if key not in masks:
                masks[key] = _causal(count, width, dtype or torch.float32, mask.device)
            self.rows.append(_Row(end - count, count, columns, masks[key]))

    def pack(self, x: "torch.Tensor") -> "torch.Tensor":
        """``x`` ``[U, S]``'s real entries, row by row: ``[N]``."""
        flat = x.reshape(-1)
        return flat if self.flat is None else flat[self.flat]

    def unpack(self, x: "torch.Tensor") -> "torch.Tensor":
        """Packed ``[1, H, N, D]`` in the padded layout ``[U, H, S, D]`` (zeros at padding)."""
        u, s = self.shape
        heads, dim = x.shape[1], x.shape[-1]
        if self.flat is not None:
            out = x.new_zeros((heads, u * s, dim))
            out.index_copy_(1, self.flat, x[0])
            x = out[None]
        return x[0].reshape(heads, u, s, dim).transpose(0, 1)

    def attend(self, query: "torch.Tensor", keys: "torch.Tensor", values: "torch.Tensor",
               scale: float) -> "torch.Tensor":
        """Attention of packed ``query`` ``[1, Hq, N, D]`` over each row's real columns of ``keys``/
        ``values`` ``[U, Hkv, W, D]``: ``[1, N, Hq * D]``."""
        _, heads, n, dim = query.shape
        out = query.new_empty((1, n, heads, dim))
        for u, row in enumerate(self.rows):
            k, v = keys[u:u + 1], values[u:u + 1]
            if isinstance(row.columns, slice):
                k, v = k[:, :, row.columns], v[:, :, row.columns]
            else:
                k, v = k.index_select(2, row.columns), v.index_select(2, row.columns)
            q = query[:, :, row.start:row.start + row.count]
            out[:, row.start:row.start + row.count] = cascade.grouped(q, k, v, row.mask, scale)
        return out.view(1, n, heads * dim)


def _causal(count: int, width: int, dtype: "torch.dtype", device: "torch.device") -> "torch.Tensor | None":
    """Additive mask ``[1, 1, count, width]``: the last ``count`` of ``width`` columns are the
    queries, each seeing the columns up to its own."""
    import torch

    if count == 1:
        return None
    keep = torch.ones(count, width, dtype=torch.bool, device=device).tril(width - count)
    return cascade.additive(keep[None, None], dtype)
