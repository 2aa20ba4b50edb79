"""The update's RMSNorm as one autograd function on arft's CPU kernels (``arft.cpu.kernels``).

Hugging Face's ``LlamaRMSNorm`` runs ``weight * (x * rsqrt(mean(x²) + eps))`` as six or more
tensor operations (casts, square, mean, add, rsqrt and two products), each a pass over the
activations that autograd records and walks back: ~12 % of an update of the embedded model on a
CPU whose bf16 matmuls are fast (AMX). ``RmsNorm`` computes the same in one pass of the kernel
(keeping each row's ``rsqrt``; in bfloat16, rounded where Hugging Face's norm rounds) and its
input gradient in one more: ``∂x = r (w ∂y) - x r³ mean(w ∂y x)``, in float32 and rounded once.
The weight's gradient, where it is trained (full fine-tuning), is ``Σ ∂y x r`` over the rows.

``forward(module, x)`` is the dispatch that ``arft.cpu.patch`` gives every ``fusable`` norm
(``LlamaRMSNorm`` and the same norm of Qwen2/Qwen3 and Mistral): the fused function on the CPU
where the kernels load, activations and weight in one dtype (float32 or bfloat16), in passes
autograd records and in the trainer's own (``arft.cpu.ops.recorded``); any other call (the engine
sampling through the policy, a GPU, mixed dtypes) is the module's own forward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from arft.cpu import kernels as cpu_kernels
from arft.cpu import ops

NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm")
"""Norm classes whose forward is ``weight * (x.float() * rsqrt(mean(x²) + eps)).to(dtype)``."""


class RmsNorm(torch.autograd.Function):
    """``weight * (x * rsqrt(mean(x²) + eps))`` over the last dimension of ``x`` (float32, or
    bfloat16 computed in float32 and rounded where Hugging Face's norm rounds); ``weight`` of
    ``x``'s dtype."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float,
                kernels: cpu_kernels.CpuKernels) -> torch.Tensor:
        rstd = torch.empty(x.shape[:-1], dtype=torch.float32)
        out, _ = kernels.rms_norm(x, weight.detach(), eps, rstd=rstd)
        ctx.save_for_backward(x, weight, rstd)
        ctx.kernels = kernels
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, rstd = ctx.saved_tensors
        grad = grad.to(x.dtype).contiguous()
        gx = ctx.kernels.rms_norm_backward(grad, x, weight.detach(), rstd) if ctx.needs_input_grad[0] else None
        gw = None
        if ctx.needs_input_grad[1]:
            gw = (grad.float() * x.float() * rstd.unsqueeze(-1)).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        return gx, gw, None, None


def fusable(module: "torch.nn.Module") -> bool:
    """Whether ``module`` is one of the RMSNorms (``NORMS``) the fused function reproduces."""
    return type(module).__name__ in NORMS and hasattr(module, "variance_epsilon") and hasattr(module, "weight")


def runs(kernels: cpu_kernels.CpuKernels | None) -> bool:
    """Whether the fused norm runs on ``kernels`` (loaded, with their AVX-512 small ops)."""
    return kernels is not None and kernels.small_ops


def forward(module: "torch.nn.Module", x: torch.Tensor) -> torch.Tensor:
    """The fused norm where it applies (module doc), the module's own forward elsewhere."""
    kernels = cpu_kernels.load()
    weight = module.weight
    if not ops.recorded() or kernels is None or weight.dtype != x.dtype or not kernels.fits(x):
        return type(module).forward(module, x)
    return RmsNorm.apply(x, weight, module.variance_epsilon, kernels)
