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

``forward(layer, x)`` is the dispatch that ``arft.cpu.patch`` gives each ``fusable`` layer (a peft
LoRA linear layer with a ``torch.nn.Linear`` base, or a subclass marked ``plain_linear`` such as
the engine's ``PackedLinear``). It runs one plain adapter (no dropout, DoRA or other variant, no
adapter bias, frozen base) in passes autograd records and in the trainer's own
(``arft.cpu.ops.recorded``), and hands anything else to peft's own: other passes without
gradient (the engine sampling through the adapter keeps its packed products), adapters disabled
(the reference policy of the KL term), merged, mixed-adapter batches, several active adapters.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from arft.cpu import ops
from arft.models import peft_layers


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
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x2, z, weight, a, b = ctx.saved_tensors
        a_param, b_param = ctx.needs_input_grad[3], ctx.needs_input_grad[4]
        with torch.autocast(grad.device.type, enabled=False):
            g, w = grad.reshape(-1, grad.shape[-1]).to(x2.dtype), weight.to(x2.dtype)
            gz = g @ b  # [N, r]: the gradient at the adapter's bottleneck
            gx = (g @ w).addmm_(gz, a).view(ctx.x_shape).to(ctx.x_dtype) if ctx.needs_input_grad[0] else None
            ga = (gz.t() @ x2).float() if a_param else None
            # zᵀ g with zᵀ contiguous: ~1.6x oneDNN's gᵀ z (a transposed [N, out] operand) on a CPU
            gb = (z.t().contiguous() @ g).t().float() * ctx.scaling if b_param else None
        return gx, None, None, ga, gb, None


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the products run in: autocast's where it is on, else the input's."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def fusable(layer: Any) -> bool:
    """Whether ``layer`` is a peft LoRA linear layer the fused function may run: a plain linear
    base (``peft_layers.plain_linear``), weights not stored transposed. Which adapter it runs is
    checked at every call (``forward``)."""
    from peft.tuners.lora.layer import Linear

    return (type(layer) is Linear and peft_layers.plain_linear(layer.base_layer)
            and not getattr(layer, "fan_in_fan_out", False))


def forward(layer: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """The forward of a fused layer: one plain active adapter, in a pass autograd records or
    one of the trainer's; anything else goes to peft (the engine sampling through the adapter keeps
    its packed products)."""
    name = peft_layers.plain_adapter(layer) if ops.recorded() and not args and not kwargs else None
    if name is None or not _frozen_and_one_dtype(layer, x, name):
        return type(layer).forward(layer, x, *args, **kwargs)
    base = layer.base_layer
    return LoraLinear.apply(x, base.weight, base.bias, layer.lora_A[name].weight,
                            layer.lora_B[name].weight, layer.scaling[name])


def _frozen_and_one_dtype(layer: Any, x: torch.Tensor, name: str) -> bool:
    """What ``LoraLinear`` needs beyond a plain adapter (``peft_layers.plain_adapter``): frozen
    base weights, and (without autocast, where peft runs the adapter in its own dtype) one dtype
    for the input and weights."""
    base = layer.base_layer
    if base.weight.requires_grad or (base.bias is not None and base.bias.requires_grad):
        return False
    if torch.is_autocast_enabled(x.device.type):
        return True
    return x.dtype == base.weight.dtype == layer.lora_A[name].weight.dtype
