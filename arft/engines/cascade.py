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

The engine's prefills take a second fast path: Hugging Face's ``sdpa`` copies every key/value head
to its query heads whenever a mask is given (``repeat_kv``); ``grouped`` lets sdpa read the
key/value heads as they are, which halves a batched prefill's attention time on a 2-core CPU.

The engine passes ``arft_shared_prefix=shared`` (0 when nothing is shared) to the model's forward;
Hugging Face models pass such keywords down to their attention function. ``enable`` switches a
model from ``sdpa`` to the registered ``arft_cascade`` implementation, which *is* ``sdpa`` for
every call without that keyword (the trainer's passes, HF ``generate``) or that needs a gradient,
so the switch changes nothing else.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

NAME = "arft_cascade"
KEYWORD = "arft_shared_prefix"
MIN_SHARED = 16
"""Shorter shared prefixes are not worth a second softmax part."""


def enable(model: Any) -> bool:
    """Give ``model`` cascade attention if it runs ``sdpa`` now; ``True`` when it has it."""
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current == NAME:
        return True
    if current != "sdpa" or not hasattr(model, "set_attn_implementation") or not _has_cpu_flash():
        return False  # eager, flash, flex or a custom kernel: left as it is
    _register()
    model.set_attn_implementation(NAME)
    return getattr(model.config, "_attn_implementation", None) == NAME


def reads_once(shared: int, rows: int) -> bool:
    """Whether a decode step of ``rows`` rows sharing ``shared`` leading columns cascades."""
    return shared >= MIN_SHARED and rows >= 2


def _has_cpu_flash() -> bool:
    import torch

    return hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, cascade_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # the same masks sdpa gets


def cascade_attention(module: Any, query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor",
                      attention_mask: "torch.Tensor | None", dropout: float = 0.0,
                      scaling: float | None = None, **kwargs: Any) -> tuple["torch.Tensor", None]:
    """Hugging Face attention-function signature: ``query`` ``[B, Hq, q, D]``, ``key``/``value``
    ``[B, Hkv, T, D]``; returns ``[B, q, Hq, D]``. Only the engine's passes (``kwargs[KEYWORD]``
    present) that need no gradient take the fast paths: single-token queries of two or more rows
    sharing at least ``MIN_SHARED`` leading columns cascade (``_decode``), and a masked prefill of
    a grouped-query model runs sdpa on the key/value heads as they are (``grouped``). Every other
    call is Hugging Face's ``sdpa`` unchanged."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    mark = kwargs.pop(KEYWORD, None)
    shared = int(mark or 0)
    grouped_prefill = query.shape[2] > 1 and attention_mask is not None and key.shape[1] != query.shape[1]
    if mark is not None and _plain_call(query, dropout, kwargs) and (cascades(query, key, shared) or grouped_prefill):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return attend(query, key, value, attention_mask, shared, scale), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                  scaling=scaling, **kwargs)


def cascades(query: "torch.Tensor", key: "torch.Tensor", shared: int) -> bool:
    """Whether attention of ``query`` over ``key`` reads ``shared`` leading columns once: single-token
    queries of two or more rows, with columns of their own after the shared ones."""
    return query.shape[2] == 1 and reads_once(shared, query.shape[0]) and shared < key.shape[2]


def attend(query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor", mask: "torch.Tensor | None",
           shared: int, scale: float) -> "torch.Tensor":
    """``[B, q, Hq, D]``: cascade where ``cascades``, else sdpa on the key/value heads as they are
    (no gradient: the engine's passes)."""
    if cascades(query, key, shared):
        return _decode(query, key, value, mask, shared, scale)
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
            mask: "torch.Tensor | None", shared: int, scale: float) -> "torch.Tensor":
    """One query per row; columns ``[0, shared)`` equal in every row and visible to all. Each part
    runs PyTorch's CPU flash-attention kernel, which returns the log-sum-exp the merge needs (on a
    2-core CPU 14 % faster than scores, ``exp`` and products done op by op); the ``g`` query heads
    of a key/value head are its ``g`` queries, so no key or value is copied."""
    import torch

    b, hq, _, d = query.shape
    hkv = key.shape[1]
    g = hq // hkv
    q = query.reshape(b, hkv, g, d)  # query head h reads key/value head h // g
    # prefix: every row's queries of one kv head against row 0's prefix, in one pass per head
    q_all = q.transpose(0, 1).reshape(1, hkv, b * g, d)
    o1, l1 = _flash(q_all, key[:1, :, :shared], value[:1, :, :shared], None, scale)
    o1, l1 = o1.reshape(hkv, b, g, d).transpose(0, 1), l1.reshape(hkv, b, g).transpose(0, 1)
    # rest: each row against its own columns, under its mask
    rest = None if mask is None else mask[:, :, -1:, shared:]  # [B, 1, 1, T - shared]
    if rest is not None and rest.dtype == torch.bool:  # the kernel adds a mask of the query's dtype
        rest = torch.zeros(rest.shape, dtype=query.dtype, device=query.device).masked_fill_(~rest, float("-inf"))
    elif rest is not None:
        rest = rest.to(query.dtype)
    o2, l2 = _flash(q, key[:, :, shared:], value[:, :, shared:], rest, scale)
    # The log-sum-exp merge (in float32: the kernel's log-sum-exps are float32 for every dtype).
    # It relies on the rest never being fully masked (the kernel would give 0, not -inf): the
    # row's newest token is always there.
    top = torch.maximum(l1, l2)
    a1, a2 = (l1 - top).exp_().unsqueeze(-1), (l2 - top).exp_().unsqueeze(-1)
    out = (o1 * a1 + o2 * a2) / (a1 + a2)  # [B, Hkv, g, D]
    return out.to(query.dtype).reshape(b, 1, hq, d)


def _flash(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", mask: "torch.Tensor | None",
           scale: float) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Softmax attention ``[.., H, q, D]`` and the log-sum-exp of each query's scaled scores ``[.., H, q]``."""
    import torch

    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask, scale=scale)
