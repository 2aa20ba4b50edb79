"""The MLP's ``silu(gate) * up`` as one autograd function on arft's CPU kernels.

Hugging Face's ``LlamaMLP`` runs silu and the product as two operations, and their gradient as
three (silu's backward and two products). ``SiluMul`` is one pass each way; the forward is
``CpuKernels.silu_mul``, the gradient in float32 rounded once.

``forward(module, x)`` is the dispatch that ``arft.cpu.patch`` gives every ``fusable`` MLP (Llama,
Qwen2/3, Mistral): the fused product in passes autograd records and the trainer's own
(``arft.cpu.ops.recorded``), on matching dtypes on the CPU; the module's own forward elsewhere.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from arft.cpu import kernels as cpu_kernels
from arft.cpu import ops

MLPS = ("LlamaMLP", "Qwen2MLP", "Qwen3MLP", "MistralMLP")
"""MLP classes whose forward is ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``."""


class SiluMul(torch.autograd.Function):
    """``silu(gate) * up`` (silu rounded to the dtype first, as PyTorch's two operations round)."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor, kernels: cpu_kernels.CpuKernels) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        ctx.kernels = kernels
        return kernels.silu_mul(gate, up)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gate, up = ctx.saved_tensors
        dgate, dup = ctx.kernels.train.silu_mul_backward(gate.contiguous(), up.contiguous(),
                                                         grad.to(gate.dtype).contiguous())
        return dgate, dup, None


def fusable(module: Any) -> bool:
    """Whether ``module`` is one of the SiLU MLPs (``MLPS``) the fused function reproduces."""
    act = getattr(module, "act_fn", None)
    silu = isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"  # Hugging Face's ACT2FN["silu"]
    return (type(module).__name__ in MLPS and silu
            and all(hasattr(module, p) for p in ("gate_proj", "up_proj", "down_proj")))


def runs(kernels: cpu_kernels.CpuKernels | None) -> bool:
    """Whether the fused product runs on ``kernels`` (its forward and its backward)."""
    return kernels is not None and kernels.small_ops and kernels.train.ops


def forward(module: Any, x: torch.Tensor) -> torch.Tensor:
    """The fused product where autograd records or in the trainer's passes, on matching dtypes on
    the CPU; the module's own forward elsewhere."""
    kernels = cpu_kernels.load()
    if kernels is None or not ops.recorded() or x.device.type != "cpu":
        return type(module).forward(module, x)
    gate, up = module.gate_proj(x), module.up_proj(x)
    if gate.dtype != up.dtype or gate.dtype not in (torch.bfloat16, torch.float32) or gate.shape != up.shape:
        return module.down_proj(module.act_fn(gate) * up)
    return module.down_proj(SiluMul.apply(gate.contiguous(), up.contiguous(), kernels))
