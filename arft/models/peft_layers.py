"""What arft's own computations of a peft model need to know about it: the model under the
wrapper, its LoRA layers, and whether a layer's adapter is one they reproduce exactly.

The trainer's fused LoRA function (``arft.cpu.ops.lora``) and the engine's fused pass
(``arft.cpu.lora_products``) both compute ``base(x) + (x Aᵀ)(s B)ᵀ`` in place of peft's
forward; both take a layer only where that is what peft would compute. peft imports lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from peft.tuners.lora import LoraLayer


def unwrap(model: object) -> Any:
    """The transformers model under a peft wrapper (the model itself otherwise)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def is_lora(module: object) -> bool:
    """Whether ``module`` is a peft LoRA layer (it wraps a ``base_layer`` and holds ``lora_A``)."""
    return hasattr(module, "base_layer") and hasattr(module, "lora_A")


def plain_linear(module: object) -> bool:
    """Whether ``module`` computes ``F.linear`` with its own weight wherever a gradient is needed:
    a ``torch.nn.Linear``, or a subclass marked ``plain_linear`` (the engine's ``PackedLinear``)."""
    import torch

    kind = type(module)
    return kind is torch.nn.Linear or bool(getattr(kind, "plain_linear", False))


def active_adapter(layer: "LoraLayer") -> str | None:
    """The adapter ``layer`` applies now, where peft's switches (flipped for every layer at once:
    ``disable_adapter``, ``merge_adapter``, ``set_adapter``) and its mode leave one plain product:
    adapters on and not merged, one active adapter the layer holds, its dropout doing nothing
    (none, p = 0, or eval mode). Cheap: checked before every pass."""
    import torch

    active = layer.active_adapters
    if layer.disable_adapters or layer.merged or len(active) != 1 or active[0] not in layer.lora_A:
        return None
    dropout = layer.lora_dropout[active[0]]
    inert = not dropout.training or isinstance(dropout, torch.nn.Identity) or getattr(dropout, "p", None) == 0
    return active[0] if inert else None


def plain_adapter(layer: object) -> str | None:
    """The adapter of a peft LoRA ``layer`` whose forward is exactly ``base(x) + (x Aᵀ)(s B)ᵀ``:
    ``active_adapter``, with a plain linear base (weights not stored transposed), no variant
    (DoRA), no adapter bias, ``A`` and ``B`` plain linear layers without bias; else ``None``."""
    if not is_lora(layer):
        return None
    layer = cast("LoraLayer", layer)  # is_lora checked its attributes
    name = active_adapter(layer)
    if name is None or name not in layer.lora_B or getattr(layer, "fan_in_fan_out", False):
        return None
    a, b = layer.lora_A[name], layer.lora_B[name]
    if (name in getattr(layer, "lora_variant", {}) or getattr(layer, "lora_bias", {}).get(name, False)
            or not all(plain_linear(m) for m in (layer.base_layer, a, b)) or a.bias is not None or b.bias is not None):
        return None
    return name
