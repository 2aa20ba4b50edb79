"""The backbone's hidden states for a micro-batch, with the rows' common prefix run once.

The rollouts of one task share their whole prompt, and the tasks of a dataset often share a
system prompt with the tools and worked examples (the calculator demo's rows carry two worked
examples as real turns: most of every sequence). The plain forward pass runs that prefix once per
row, and so does its backward pass. Here it runs once for the micro-batch: its keys and values
are expanded to every row (a view, no copy) and the rows' own tokens attend to them, so the
prefix's gradient is the sum over the rows, as in the plain pass. The hidden states equal the
plain pass's up to floating-point rounding (tested).

Used by the update and the supervised update (``arft.trainer.loss.token_logprobs``) when
``training.share_prefix`` is on; off under gradient checkpointing (which runs without a cache).
torch is imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arft.models.hf_model import cache_keyword

if TYPE_CHECKING:
    import torch

    from arft.trainer.batching import Tensors

MIN_PREFIX = 16
"""Shorter common prefixes are not worth a second forward call."""


def common_prefix_length(mb: "Tensors") -> int:
    """Leading positions where every row of ``mb`` has the same real token, leaving every row at
    least one token of its own (0 for a single row)."""
    ids = mb.input_ids
    if ids.shape[0] < 2:
        return 0
    same = (ids == ids[:1]).all(dim=0).tolist()
    n = same.index(False) if False in same else len(same)
    return max(0, min(n, int(mb.attention_mask.sum(dim=1).min()) - 1))


def hidden_states(backbone: "torch.nn.Module", mb: "Tensors", share: bool = True) -> "torch.Tensor":
    """``[B, T, H]`` last hidden states of ``mb`` (right-padded), the common prefix run once when
    ``share`` and it is at least ``MIN_PREFIX`` tokens long."""
    import torch

    p = common_prefix_length(mb) if share and not getattr(backbone, "gradient_checkpointing", False) else 0
    if p < MIN_PREFIX:
        return backbone(input_ids=mb.input_ids, attention_mask=mb.attention_mask).last_hidden_state
    from transformers import DynamicCache

    rows, cache = mb.input_ids.shape[0], DynamicCache()
    keyword = cache_keyword(backbone)
    head = backbone(input_ids=mb.input_ids[:1, :p], use_cache=True, **{keyword: cache})
    # after the prefix pass every layer of a decoder's DynamicCache holds its keys and values
    for layer in cache.layers:
        layer.keys = layer.keys.expand(rows, -1, -1, -1)  # type: ignore[union-attr]
        layer.values = layer.values.expand(rows, -1, -1, -1)  # type: ignore[union-attr]
    tail = backbone(input_ids=mb.input_ids[:, p:], attention_mask=mb.attention_mask, use_cache=True,
                    **{keyword: cache})
    return torch.cat([head.last_hidden_state.expand(rows, -1, -1), tail.last_hidden_state], dim=1)

