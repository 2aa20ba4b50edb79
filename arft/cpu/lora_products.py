"""LoRA adapters in the engine's fused pass: the adapter's products beside the base layer's.

Where the engine samples through a peft adapter (``engine.lora: adapter``, and what ``auto``
picks for bfloat16 weights, whose merged copy would round the adapter's smallest changes away),
Hugging Face's forward runs each adapted linear layer as peft does: the base product, a cast of
the input to the adapter's float32, two small products, a scale and a sum, module by module.
``arft.engines.transformers.fused_pass`` instead runs ``x Wᵀ + (x Aᵀ)(s B)ᵀ`` for a whole group of layers at
once (q, k and v; gate and up): the base weights stacked and packed as for a plain model, the
adapters' ``A`` stacked into one packed product and their scaled ``B`` as one block-diagonal
packed product, in the input's dtype (as the trainer's bf16 autocast computes the adapter).

``plain(layer)`` says which adapted layers this computes exactly: one active adapter, not merged
or disabled, no DoRA or other variant, no adapter bias, dropout inactive (eval mode) or none,
a bias-free base of plain (or packed) linear type. A group may mix adapted and plain layers
(adapters on q and v only): the plain ones get a zero block. ``peft_layers.active_adapter``
checks the switches peft flips at run time (``disable_adapter``, ``merge_adapter``,
``set_adapter``, ``train()``) on every adapted layer before each pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from arft.cpu import packed_linear
from arft.models import peft_layers

if TYPE_CHECKING:
    import torch


def plain(layer: Any) -> bool:
    """Whether the fused pass computes ``layer`` (a peft LoRA layer) exactly: a plain adapter
    (``peft_layers.plain_adapter``) over a base without bias (the fused pass adds none)."""
    return peft_layers.plain_adapter(layer) is not None and layer.base_layer.bias is None


def adapter_term(x: "torch.Tensor", layers: list[Any]) -> "torch.Tensor":
    """``(x Aᵀ)(s B)ᵀ`` of every layer of ``layers`` (layers sharing the input ``x``, some of them
    peft LoRA layers), side by side along the last dimension as their base products are, zero
    for a layer without an adapter: packed products (the adapters' ``A`` stacked, the scaled
    ``B`` block-diagonal) in ``x``'s dtype, kept under the first adapted layer's modules."""
    import torch

    adapted = [layer for layer in layers if peft_layers.is_lora(layer)]
    name = adapted[0].active_adapters[0]
    dtype = x.dtype
    scales = tuple(layer.scaling[name] for layer in adapted)
    has = tuple(peft_layers.is_lora(layer) for layer in layers)
    outs = [layer.weight.shape[0] for layer in layers]

    def blocks(ws: "list[torch.Tensor]") -> "torch.Tensor":
        """The scaled ``B`` block-diagonal; a layer without an adapter: its rows, no column."""
        scaled = iter(w * s for w, s in zip(ws, scales))
        parts = [next(scaled) if h else ws[0].new_zeros(out, 0) for h, out in zip(has, outs)]
        return torch.block_diag(*parts).to(dtype)

    a = [layer.lora_A[name].weight for layer in adapted]
    b = [layer.lora_B[name].weight for layer in adapted]
    packed_a = packed_linear.packed(adapted[0].lora_A, a, lambda ws: torch.cat(ws).to(dtype), key=(dtype,))
    packed_b = packed_linear.packed(adapted[0].lora_B, b, blocks, key=(dtype, scales, has))
    z = torch.ops.mkldnn._linear_pointwise(x, packed_a, None, "none", [], "")
    return torch.ops.mkldnn._linear_pointwise(z, packed_b, None, "none", [], "")


def unpacked_term(x: "torch.Tensor", layer: Any) -> "torch.Tensor | float":
    """``(x Aᵀ)(s B)ᵀ`` of one layer with ``F.linear`` (the long prefills that keep it); 0 for a
    layer without an adapter."""
    import torch.nn.functional as F

    if not peft_layers.is_lora(layer):
        return 0.0
    name = layer.active_adapters[0]
    a, b = layer.lora_A[name].weight, layer.lora_B[name].weight
    return F.linear(F.linear(x, a.to(x.dtype)), (b * layer.scaling[name]).to(x.dtype))
