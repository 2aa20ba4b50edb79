"""Cascade attention for decode steps whose rows share a prefix: its keys and values are read once.

A decode step is memory-bound on the CPU: each layer reads every row's keys and values. When all
rows of a batch start with the same tokens (the system prompt and worked examples every rollout
of a job shares), ``KVBatch`` keeps those tokens in the first ``shared`` columns of every row.
Attention then splits at ``shared``:

- the prefix part: the queries of all rows against row 0's prefix keys, one matrix product per
  key/value head (the prefix is read once for the whole batch);
- the rest: each row's queries against its own columns ``[shared, T)``, under the row's mask;

and the two softmax parts are joined exactly through their log-sum-exps (the merge of
flash/cascade attention), each part run by PyTorch's CPU flash-attention kernel. The result equals
attention over the whole row within floating-point rounding.

A decode step also leaves out the holes of its rows (``hole_split``): a row whose history is
shorter than the batch's longest is masked from the shared columns to its first real column, so
each row's own columns split at the column that reads the fewest: every row attends over the
columns after it, and only the rows with real columns before it (gathered) over those; the parts
join through their log-sum-exps as above. The split is made once a step, for every layer.

A decode step of the engine's fused pass (``arft.engines.transformers.fused_pass``) may run each row's own
columns on arft's decode-attention kernel instead (``arft.cpu.kernels``: it streams a
row's keys and values at about twice the speed of PyTorch's kernel on an AVX-512 CPU, skips the
masked holes itself, and merges the shared prefix's part into its output).

The engine's prefills take a second fast path: Hugging Face's ``sdpa`` copies every key/value head
to its query heads whenever a mask is given (``repeat_kv``); ``grouped`` lets sdpa read the
key/value heads as they are, which halves a batched prefill's attention time on a 2-core CPU.

The engine passes ``arft_shared_prefix=shared`` (0 when nothing is shared) to the model's forward;
Hugging Face models pass such keywords down to their attention function. ``arft.cpu.attention``
is that function: it hands the calls that carry the keyword and that ``takes`` accepts to
``attend``, and every other call (the trainer's passes, HF ``generate``) to the trainer's kernel
or ``sdpa``, so the switch changes nothing else.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from arft.cpu.kernels import CpuKernels

KEYWORD = "arft_shared_prefix"
"""The keyword the engine's passes give the model's forward: the columns their rows share."""
MIN_SHARED = 16
"""Shorter shared prefixes are not worth a second softmax part."""
MIN_SKIPPED = 0.2
"""A decode step's attention skips the holes of its rows (``hole_split``) only where that leaves
out at least this share of their own columns: below it the extra kernel call costs more."""


@dataclass(frozen=True)
class Split:
    """Where a decode step's own columns ``[start, T)`` split so that holes are not read: every
    row attends over ``[at, T)``, and only ``rows`` (those with a real column before ``at``) over
    ``[start, at)``; the parts join through their log-sum-exps."""

    start: int
    at: int
    rows: "torch.Tensor | slice"
    shape: tuple[int, int]
    """The ``[B, T]`` of the mask it was made for: used only for a step of that shape."""

    @property
    def reads_before(self) -> bool:
        """Whether any row reads ``[start, at)`` (none: the split only cuts a hole all rows have)."""
        return self.rows != slice(0, 0) if isinstance(self.rows, slice) else self.rows.numel() > 0


def hole_split(mask: "torch.Tensor", shared: int) -> Split | None:
    """The split of a decode step's own columns ``[shared, T)`` (after the ``shared`` columns every
    row holds the same, real) that reads the fewest; ``mask`` ``[B, T]`` is 1 on real columns,
    every row's last column real. Rows whose history is shorter than the batch's longest have a
    hole before their first real column, and rows that join with a longer history leave one in
    the others. ``None`` where it would skip under ``MIN_SKIPPED``.
    Made once a step (one small reduction and a sync), used by every layer."""
    import torch

    start = shared
    rest = mask[:, start:]
    b, width = rest.shape
    if b < 2 or width < 2:
        return None
    first = rest.ne(0).to(torch.uint8).argmax(-1)
    firsts = sorted(first.tolist())
    best, cost = 0, b * width
    for at in set(firsts):  # rows with a real column before `at` read [start, at) too
        c = b * (width - at) + bisect.bisect_left(firsts, at) * at
        if c < cost:
            best, cost = at, c
    if cost > (1 - MIN_SKIPPED) * b * width:
        return None
    rows = (first < best).nonzero().flatten()
    shape = (b, mask.shape[1])
    if not rows.numel():
        return Split(start, start + best, slice(0, 0), shape)
    if int(rows[-1] - rows[0]) + 1 == rows.numel():
        return Split(start, start + best, slice(int(rows[0]), int(rows[-1]) + 1), shape)  # no gather
    return Split(start, start + best, rows, shape)


def reads_once(shared: int, rows: int) -> bool:
    """Whether a decode step of ``rows`` rows sharing ``shared`` leading columns cascades."""
    return shared >= MIN_SHARED and rows >= 2


def has_cpu_flash() -> bool:
    """Whether this torch has the CPU flash-attention kernel the parts run on."""
    import torch

    return hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")


def takes(query: "torch.Tensor", key: "torch.Tensor", attention_mask: "torch.Tensor | None", shared: int,
          dropout: float, kwargs: dict[str, Any]) -> bool:
    """Whether an engine's pass (the keyword given, ``shared`` its value) takes a fast path: a plain
    call (``_plain_call``) whose single-token queries of two or more rows share at least
    ``MIN_SHARED`` leading columns (``cascades``), or a masked prefill of a grouped-query model
    (``grouped``: sdpa on the key/value heads as they are)."""
    grouped_prefill = query.shape[2] > 1 and attention_mask is not None and key.shape[1] != query.shape[1]
    return _plain_call(query, dropout, kwargs) and (cascades(query, key, shared) or grouped_prefill)


def cascades(query: "torch.Tensor", key: "torch.Tensor", shared: int) -> bool:
    """Whether attention of ``query`` over ``key`` reads ``shared`` leading columns once: single-token
    queries of two or more rows, with columns of their own after the shared ones."""
    return query.shape[2] == 1 and reads_once(shared, query.shape[0]) and shared < key.shape[2]


def attend(query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor", mask: "torch.Tensor | None",
           shared: int, scale: float, split: Split | None = None, kernel: "CpuKernels | None" = None
           ) -> "torch.Tensor":
    """``[B, q, Hq, D]``: cascade where ``cascades``, else sdpa on the key/value heads as they are
    (no gradient: the engine's passes). A decode step given its ``hole_split`` skips the holes; one
    given ``kernel`` (``arft.cpu.kernels``, which skips them itself) runs the rows' own
    columns on it."""
    if kernel is not None and query.shape[2] == 1:
        return _kernel_decode(query, key, value, mask, shared, scale, kernel)
    if split is not None and (split.start != shared or split.shape != (query.shape[0], key.shape[2])
                              or query.shape[2] != 1 or mask is None):
        split = None  # made for another step
    if split is not None or cascades(query, key, shared):
        return _decode(query, key, value, mask, shared, scale, split)
    return grouped(query, key, value, mask, scale)


def _plain_call(query: "torch.Tensor", dropout: float, kwargs: dict[str, Any]) -> bool:
    """No gradient, no dropout, nothing but a mask shaping the scores (a position bias, a softcap,
    attention sinks): what the fast paths assume."""
    import torch

    special = ("position_bias", "softcap", "s_aux")
    return (not dropout and not (torch.is_grad_enabled() and query.requires_grad)
            and all(kwargs.get(k) is None for k in special))


def grouped(query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor", mask: "torch.Tensor | None",
             scale: float) -> "torch.Tensor":
    """Masked attention of a grouped-query model without copying each key/value head to its query
    heads (Hugging Face's sdpa path does, for every masked call): on a 2-core CPU a 24-row prefill's
    attention takes half the time."""
    import torch.nn.functional as F

    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale, enable_gqa=True)
    return out.transpose(1, 2).contiguous()


def _decode(query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor",
            mask: "torch.Tensor | None", shared: int, scale: float, split: Split | None = None) -> "torch.Tensor":
    """One query per row; columns ``[0, shared)`` equal in every row and visible to all, read
    once where ``reads_once`` (else by every row, as a part of its own). Each part runs PyTorch's
    CPU flash-attention kernel, which returns the log-sum-exp the merge needs (on a 2-core CPU
    14 % faster than scores, ``exp`` and products done op by op); the ``g`` query heads of a
    key/value head are its ``g`` queries, so no key or value is copied. ``split``: each row's own
    columns in two parts, its holes left out."""
    b, hq, _, d = query.shape
    q = _by_kv_head(query, key)
    parts = []
    if reads_once(shared, b):
        parts.append(_prefix_once(q, key, value, shared, scale))
    elif shared:  # too short to be worth reading once: each row reads it
        parts.append(_flash(q, key[:, :, :shared], value[:, :, :shared], None, scale))
    # rest: each row against its own columns, under its mask
    rest = None if mask is None else additive(mask[:, :, -1:], query.dtype)  # [B, 1, 1, T]
    at = shared if split is None else split.at
    parts.append(_flash(q, key[:, :, at:], value[:, :, at:], None if rest is None else rest[..., at:], scale))
    if split is not None and rest is not None and split.reads_before:
        parts.append(_before(q, key, value, rest, split, scale))
    return _merge(parts).to(query.dtype).reshape(b, 1, hq, d)


def _kernel_decode(query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor", mask: "torch.Tensor | None",
                   shared: int, scale: float, kernel: "CpuKernels") -> "torch.Tensor":
    """``_decode`` with each row's own columns on arft's kernel, which starts from the shared
    prefix's part (PyTorch's kernel, read once for all rows where ``reads_once``) and merges it."""
    b, hq, _, d = query.shape
    q = _by_kv_head(query, key)
    q = q if q.stride(-1) == 1 else q.contiguous()
    prior, at = None, 0
    if reads_once(shared, b) and shared < key.shape[2]:
        prior, at = _prefix_once(q, key, value, shared, scale), shared
    rest = None if mask is None else additive(mask[:, 0, -1, at:], query.dtype)  # [B, T - at]
    if rest is not None and (rest.stride(-1) != 1 or rest.shape[0] != b):
        rest = rest.expand(b, -1).contiguous()
    return kernel.attend(q, key[:, :, at:], value[:, :, at:], rest, scale, prior).reshape(b, 1, hq, d)


def _by_kv_head(query: "torch.Tensor", key: "torch.Tensor") -> "torch.Tensor":
    """A decode step's queries ``[B, Hq, 1, D]`` as ``[B, Hkv, g, D]``: query head h reads
    key/value head h // g, so the ``g`` query heads of a key/value head are its ``g`` queries."""
    b, hq, _, d = query.shape
    return query.reshape(b, key.shape[1], hq // key.shape[1], d)


def _prefix_once(q: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor", shared: int, scale: float
                 ) -> tuple["torch.Tensor", "torch.Tensor"]:
    """The part of the columns ``[0, shared)`` every row holds the same: every row's queries of
    one key/value head against row 0's prefix, one pass a head; output ``[B, Hkv, g, D]`` and
    log-sum-exp ``[B, Hkv, g]``."""
    b, hkv, g, d = q.shape
    o, lse = _flash(q.transpose(0, 1).reshape(1, hkv, b * g, d), key[:1, :, :shared], value[:1, :, :shared], None,
                    scale)
    return o.reshape(hkv, b, g, d).transpose(0, 1), lse.reshape(hkv, b, g).transpose(0, 1)


def _before(q: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor", rest: "torch.Tensor",
            split: Split, scale: float) -> tuple["torch.Tensor", "torch.Tensor"]:
    """The columns ``[split.start, split.at)`` of ``split.rows`` only; every other row gets the
    empty part (output 0, log-sum-exp -inf), which the merge weighs 0."""
    import torch

    cols = slice(split.start, split.at)
    r = split.rows
    o, lse = _flash(q[r], key[r, :, cols], value[r, :, cols], rest[r, ..., cols], scale)
    out = q.new_zeros(q.shape, dtype=o.dtype)
    full = torch.full(q.shape[:3], float("-inf"), dtype=lse.dtype, device=q.device)
    if isinstance(r, slice):
        out[r], full[r] = o, lse
    else:
        out.index_copy_(0, r, o)
        full.index_copy_(0, r, lse)
    return out, full


def additive(mask: "torch.Tensor", dtype: "torch.dtype") -> "torch.Tensor":
    """``mask`` (boolean, or already additive) as the attention kernels take it: added to the
    scores (0 where kept, -inf elsewhere), in ``dtype``."""
    import torch

    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    return mask.to(dtype)


def _merge(parts: list[tuple["torch.Tensor", "torch.Tensor"]]) -> "torch.Tensor":
    """Softmax attention over the union of the parts' columns from each part's output and
    log-sum-exp (in float32: the kernel's log-sum-exps are float32 for every dtype). It relies on
    one part never being fully masked for a row (the kernel would give 0, not -inf): the row's
    newest token is always in the last columns."""
    import torch

    top = functools.reduce(torch.maximum, [lse for _, lse in parts])
    weights = [(lse - top).exp_().unsqueeze(-1) for _, lse in parts]
    out = functools.reduce(torch.add, [o * w for (o, _), w in zip(parts, weights)])
    return out / functools.reduce(torch.add, weights)


def _flash(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", mask: "torch.Tensor | None",
           scale: float) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Softmax attention ``[.., H, q, D]`` and the log-sum-exp of each query's scaled scores ``[.., H, q]``."""
    import torch

    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask, scale=scale)
