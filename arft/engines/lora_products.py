"""LoRA adapters in the engine's fused pass: the adapter's products beside the base layer's.

Where the engine samples through a peft adapter (``engine.lora: adapter``, and what ``auto``
picks for bfloat16 weights, whose merged copy would round the adapter's smallest changes away),
Hugging Face's forward runs each adapted linear layer as peft does: the base product, a cast of
the input to the adapter's float32, two small products, a scale and a sum, module by module.
``arft.engines.fused_decode`` instead runs ``x Wᵀ + (x Aᵀ)(s B)ᵀ`` for a whole group of layers at
once (q, k and v; gate and up): the base weights stacked and packed as for a plain model, the
adapters' ``A`` stacked into one packed product and their scaled ``B`` as one block-diagonal
packed product, in the input's dtype (as the trainer's bf16 autocast computes the adapter).

``plain(layer)`` says which adapted layers this computes exactly: one active adapter, not merged
or disabled, no DoRA or other variant, no adapter bias, dropout inactive (eval mode) or none,
a bias-free base of plain (or packed) linear type. peft switches adapters on and off for every
layer at once (``disable_adapter``, ``merge_adapter``, ``set_adapter``); ``still_plain`` checks
that state on the first adapted layer before each pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from arft.engines import packed_linear

if TYPE_CHECKING:
    import torch


def unwrap(model: Any) -> Any:
    """The transformers model under a peft wrapper (the model itself otherwise)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def is_lora(module: Any) -> bool:
    """Whether ``module`` is a peft LoRA layer (it wraps a ``base_layer`` and holds ``lora_A``)."""
    return hasattr(module, "base_layer") and hasattr(module, "lora_A")


def plain(layer: Any) -> bool:
    """Whether the fused pass computes ``layer`` (a peft LoRA layer) exactly (module doc)."""
    import torch

    linear = (torch.nn.Linear, packed_linear._packed_class())
    base = layer.base_layer
    if type(base) not in linear or base.bias is not None or getattr(layer, "fan_in_fan_out", False):
        return False
    if not still_plain(layer):
        return False
    name = layer.active_adapters[0]
    dropout = layer.lora_dropout[name]
    return (name not in getattr(layer, "lora_variant", {}) and not getattr(layer, "lora_bias", {}).get(name, False)
            and type(layer.lora_A[name]) in linear and type(layer.lora_B[name]) in linear
            and layer.lora_B[name].bias is None and layer.lora_A[name].bias is None
            and (isinstance(dropout, torch.nn.Identity) or not dropout.training))


def still_plain(layer: Any) -> bool:
    """The switches peft flips for every layer at once: adapters on, not merged, one active."""
    active = layer.active_adapters
    return not layer.disable_adapters and not layer.merged and len(active) == 1 and active[0] in layer.lora_A


def adapter_term(x: "torch.Tensor", layers: list[Any]) -> "torch.Tensor":
    """``(x Aᵀ)(s B)ᵀ`` of every layer of ``layers`` (peft LoRA layers sharing the input ``x``),
    side by side along the last dimension as their base products are: packed products (the ``A``
    stacked, the scaled ``B`` block-diagonal) in ``x``'s dtype, kept under the first layer's
    adapter modules."""
    import torch

    name = layers[0].active_adapters[0]
    a = [layer.lora_A[name].weight for layer in layers]
    b = [layer.lora_B[name].weight for layer in layers]
    scales = [layer.scaling[name] for layer in layers]
    dtype = x.dtype
    packed_a = packed_linear.packed(layers[0].lora_A, a, lambda ws: torch.cat(ws).to(dtype))
    packed_b = packed_linear.packed(
        layers[0].lora_B, b, lambda ws: torch.block_diag(*(w * s for w, s in zip(ws, scales))).to(dtype))
    z = torch.ops.mkldnn._linear_pointwise(x, packed_a, None, "none", [], "")
    return torch.ops.mkldnn._linear_pointwise(z, packed_b, None, "none", [], "")


def unpacked_term(x: "torch.Tensor", layer: Any) -> "torch.Tensor":
    """``(x Aᵀ)(s B)ᵀ`` of one layer with ``F.linear`` (the long prefills that keep it)."""
    import torch.nn.functional as F

    name = layer.active_adapters[0]
    a, b = layer.lora_A[name].weight, layer.lora_B[name].weight
    return F.linear(F.linear(x, a.to(x.dtype)), (b * layer.scaling[name]).to(x.dtype))
