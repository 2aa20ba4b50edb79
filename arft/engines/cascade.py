"""Cascade attention for decode steps whose rows share a prefix: its keys and values are read once.

A decode step is memory-bound on the CPU: each layer reads every row's keys and values. When all
rows of a batch start with the same tokens (the system prompt and worked examples every rollout
of a job shares), ``KVBatch`` keeps those tokens in the first ``shared`` columns of every row.
Attention then splits at ``shared``:

- the prefix part: the queries of all rows against row 0's prefix keys, one matrix product per
  key/value head (the prefix is read once for the whole batch);
- the rest: each row's queries against its own columns ``[shared, T)``, under the row's mask;

and the two softmax parts are joined exactly through their maxima and sums (the log-sum-exp
merge of flash/cascade attention). The result equals attention over the whole row within
floating-point rounding.

The engine passes ``arft_shared_prefix=shared`` to the model's forward; Hugging Face models pass
such keywords down to their attention function. ``enable`` switches a model from ``sdpa`` to the
registered ``arft_cascade`` implementation, which *is* ``sdpa`` for every call without that
keyword (the trainer's passes, prefill, a batch without a shared prefix), so the switch changes
nothing else.
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
    if current != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False  # eager, flash, flex or a custom kernel: left as it is
    _register()
    model.set_attn_implementation(NAME)
    return getattr(model.config, "_attn_implementation", None) == NAME


def reads_once(shared: int, rows: int) -> bool:
    """Whether a decode step of ``rows`` rows sharing ``shared`` leading columns cascades."""
    return shared >= MIN_SHARED and rows >= 2


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
    ``[B, Hkv, T, D]``; returns ``[B, q, Hq, D]``. Cascades for single-token queries of two or
    more rows when ``kwargs[KEYWORD]`` is at least ``MIN_SHARED``; otherwise ``sdpa``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    shared = int(kwargs.pop(KEYWORD, 0) or 0)
    plain = (not reads_once(shared, query.shape[0]) or query.shape[2] != 1 or dropout
             or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
             or shared >= key.shape[2])
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return _decode(query, key, value, attention_mask, shared, scale), None


def _decode(query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor",
            mask: "torch.Tensor | None", shared: int, scale: float) -> "torch.Tensor":
    """One query per row; columns ``[0, shared)`` equal in every row and visible to all."""
    import torch

    b, hq, _, d = query.shape
    hkv = key.shape[1]
    g = hq // hkv
    q = query.reshape(b, hkv, g, d)  # query head h reads key/value head h // g
    # prefix: every row's queries of one kv head against row 0's prefix, one product per head
    q_all = q.transpose(0, 1).reshape(hkv, b * g, d)
    m1, l1, o1 = _part(q_all @ key[0, :, :shared].transpose(1, 2), value[0, :, :shared], scale)
    m1, l1, o1 = (x.reshape(hkv, b, g, -1).transpose(0, 1) for x in (m1, l1, o1))
    # rest: each row against its own columns
    scores = q @ key[:, :, shared:].transpose(2, 3)  # [B, Hkv, g, T - shared]
    if mask is not None:
        rest = mask[:, :, -1:, shared:]  # [B, 1, 1, T - shared]
        if rest.dtype == scores.dtype:
            scores = scores + rest / scale  # an additive mask, applied after scaling below
        else:
            scores = scores.masked_fill(~rest.bool(), float("-inf"))
    m2, l2, o2 = _part(scores, value[:, :, shared:], scale)
    m = torch.maximum(m1, m2)
    a1, a2 = (m1 - m).exp(), (m2 - m).exp()
    out = (o1 * a1 + o2 * a2) / (l1 * a1 + l2 * a2)  # [B, Hkv, g, D]
    return out.reshape(b, 1, hq, d)


def _part(scores: "torch.Tensor", values: "torch.Tensor", scale: float
          ) -> tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
    """One softmax part: its row maxima, its sums of ``exp(score - max)`` and the unnormalised
    output ``exp(score - max) @ values`` (scores still unscaled; ``scale`` applied here)."""
    scores = scores * scale
    top = scores.amax(dim=-1, keepdim=True)
    top = top.masked_fill(top == float("-inf"), 0.0)  # a fully masked part adds nothing
    weights = (scores - top).exp()
    return top, weights.sum(dim=-1, keepdim=True), weights @ values

