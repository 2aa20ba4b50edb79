"""A LoRA linear layer as one autograd function: the update's adapters without peft's casts.

peft's ``lora.Linear`` runs ``base(x) + lora_B(lora_A(dropout(x))) * scaling``. Under bf16
autocast that casts the activations to the adapter's float32 and back for every adapter, scales
and adds the whole output in a pass of its own, and autograd walks the same steps back. On a CPU
whose bf16 matmuls are fast (AMX) those passes cost as much as the matmuls.

``LoraLinear`` computes the same ``y = x Wᵀ + (x Aᵀ)(s B)ᵀ`` in the compute dtype: the product
with ``B`` adds into the base product (``addmm``), and the backward pass is written out:
``∂x = ∂y W + (∂y sB) A``, ``∂A = (∂y sB)ᵀ x``, ``∂B = s ∂yᵀ (x Aᵀ)``. Five products and no
elementwise pass over the activations. The adapter's parameters, their float32 gradients and
the state dict stay peft's.

``set_fused(policy, on)`` gives each plain LoRA linear layer of a peft model (one adapter, no
dropout, no DoRA or other variant, a ``torch.nn.Linear`` base, or a subclass marked
``plain_linear`` such as the engine's ``PackedLinear``) the fused forward, or takes it away. The
fused forward runs only where autograd records (the update's passes) and hands anything else to
peft's own: passes without gradient (the engine sampling through the adapter keeps its packed
products), adapters disabled (the reference policy of the KL term), merged, mixed-adapter
batches, several active adapters.
"""

from __future__ import annotations

from typing import Any

import torch

_FUSED = "_arft_fused_forward"  # marks an instance whose forward is the fused one


class LoraLinear(torch.autograd.Function):
    """``x Wᵀ + b + (x Aᵀ)(scaling · B)ᵀ`` with a hand-written backward; W and b are frozen."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float) -> torch.Tensor:
        dtype = _compute_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            x2 = x.reshape(-1, x.shape[-1]).to(dtype)
            w, a, b = weight.to(dtype), lora_a.to(dtype), (lora_b * scaling).to(dtype)
            z = x2 @ a.t()  # [N, r]
            y = (x2 @ w.t() if bias is None else torch.addmm(bias.to(dtype), x2, w.t())).addmm_(z, b.t())
        ctx.save_for_backward(x2, z, weight, a, b)  # the frozen weight itself, not a cast copy
        ctx.scaling, ctx.x_shape, ctx.x_dtype = scaling, x.shape, x.dtype
        return y.view(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x2, z, weight, a, b = ctx.saved_tensors
        a_param, b_param = ctx.needs_input_grad[3], ctx.needs_input_grad[4]
        with torch.autocast(grad.device.type, enabled=False):
            g, w = grad.reshape(-1, grad.shape[-1]).to(x2.dtype), weight.to(x2.dtype)
            gz = g @ b  # [N, r]: the gradient at the adapter's bottleneck
            gx = (g @ w).addmm_(gz, a).view(ctx.x_shape).to(ctx.x_dtype) if ctx.needs_input_grad[0] else None
            ga = (gz.t() @ x2).float() if a_param else None
            gb = (g.t() @ z).float() * ctx.scaling if b_param else None
        return gx, None, None, ga, gb, None


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the products run in: autocast's where it is on, else the input's."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def fusable(layer: Any) -> bool:
    """Whether ``layer`` is a plain peft LoRA linear layer the fused function computes exactly:
    a ``torch.nn.Linear`` base (or a ``plain_linear`` subclass), every adapter without dropout or
    variant (DoRA), weights not stored transposed."""
    from peft.tuners.lora.layer import Linear

    base = type(getattr(layer, "base_layer", None))
    if type(layer) is not Linear or not (base is torch.nn.Linear or getattr(base, "plain_linear", False)):
        return False
    if getattr(layer, "fan_in_fan_out", False) or getattr(layer, "lora_variant", {}):
        return False
    return all(isinstance(d, torch.nn.Identity) for d in layer.lora_dropout.values())


def set_fused(policy: Any, on: bool = True) -> int:
    """Give every fusable LoRA layer of ``policy`` the fused forward (``on``) or peft's back;
    returns how many layers have it now. Idempotent."""
    n = 0
    for layer in policy.modules():
        if not fusable(layer):
            continue
        if on and _FUSED not in layer.__dict__:
            layer.forward = _fused_forward.__get__(layer)
            layer.__dict__[_FUSED] = True
        elif not on and _FUSED in layer.__dict__:
            del layer.__dict__["forward"], layer.__dict__[_FUSED]
        n += on
    return n


def _fused_forward(layer: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """The forward of a fused layer; anything but one plain active adapter under autograd goes to peft."""
    active = layer.active_adapters
    if (not torch.is_grad_enabled() or args or kwargs or layer.disable_adapters or layer.merged or len(active) != 1
            or active[0] not in layer.lora_A or not _same_dtype(layer, x)):
        return type(layer).forward(layer, x, *args, **kwargs)
    name, base = active[0], layer.base_layer
    return LoraLinear.apply(x, base.weight, base.bias, layer.lora_A[name].weight,
                            layer.lora_B[name].weight, layer.scaling[name])


def _same_dtype(layer: Any, x: torch.Tensor) -> bool:
    """Without autocast peft runs the adapter in its own dtype: fused only where that is the
    input's and the base weight's dtype too (so the products are the ones peft would run)."""
    if torch.is_autocast_enabled(x.device.type):
        return True
    name = layer.active_adapters[0]
    return x.dtype == layer.base_layer.weight.dtype == layer.lora_A[name].weight.dtype
