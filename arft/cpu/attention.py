"""The one attention function arft registers with Hugging Face: the engine's, the trainer's, sdpa.

A model that ``arft.cpu.patch`` gives arft's attention runs ``attention`` (registered in Hugging
Face's ``AttentionInterface`` as ``NAME``, with ``sdpa``'s masks) in every layer, and it decides
per call, in this order:

1. **the engine's call**: a pass of ``TransformersEngine`` carries the keyword
   ``cascade.KEYWORD`` (the columns its rows share); where ``cascade.takes`` it, decode steps read
   the shared prefix once and masked prefills keep their key/value heads uncopied
   (``cascade.attend``);
2. **the trainer's call**: a layer marked for the update's kernel, in a pass that records a
   gradient or is one of the trainer's own, with a mask the kernel reproduces, runs forward and
   backward on the AMX kernel (``train_attention.attend``);
3. **everything else** is Hugging Face's ``sdpa`` unchanged, so giving a model this function
   changes nothing for any other call (HF ``generate``, unmarked layers, float32, left padding).

The engine's and the trainer's calls never meet: the engine's passes need no gradient, and the
keyword is the engine's alone. torch and transformers are imported lazily.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from arft.cpu import cascade
from arft.cpu import train_attention

if TYPE_CHECKING:
    import torch

NAME = "arft"
"""The attention function's name in Hugging Face's ``AttentionInterface``."""


def attention(module: "torch.nn.Module", query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor",
              attention_mask: "torch.Tensor | None", dropout: float = 0.0, scaling: float | None = None,
              **kwargs: Any) -> tuple["torch.Tensor", None]:
    """Hugging Face attention-function signature: ``query`` ``[B, Hq, q, D]``, ``key``/``value``
    ``[B, Hkv, T, D]``; returns ``[B, q, Hq, D]``: the engine's call, the trainer's, or ``sdpa``
    (module doc)."""
    shared = kwargs.pop(cascade.KEYWORD, None)  # never handed on: sdpa does not take it
    if shared is not None and cascade.takes(query, key, attention_mask, int(shared or 0), dropout, kwargs):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return cascade.attend(query, key, value, attention_mask, int(shared or 0), scale), None
    out = train_attention.attend(module, query, key, value, attention_mask, dropout, scaling, kwargs)
    if out is not None:
        return out, None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  **kwargs)


@functools.cache
def register() -> None:
    """Register ``attention`` with Hugging Face as ``NAME``, with ``sdpa``'s masks (once)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # the same masks sdpa gets
