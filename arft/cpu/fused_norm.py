"""The update's RMSNorm as one autograd function on arft's CPU kernels (``arft.cpu.kernels``).

Hugging Face's ``LlamaRMSNorm`` runs ``weight * (x * rsqrt(mean(x²) + eps))`` as six or more
tensor operations (casts, square, mean, add, rsqrt and two products), each a pass over the
activations that autograd records and walks back: ~12 % of an update of the embedded model on a
CPU whose bf16 matmuls are fast (AMX). ``RmsNorm`` computes the same in one pass of the kernel
(keeping each row's ``rsqrt``; in bfloat16, rounded where Hugging Face's norm rounds) and its
input gradient in one more: ``∂x = r (w ∂y) - x r³ mean(w ∂y x)``, in float32 and rounded once.
The weight's gradient, where it is trained (full fine-tuning), is ``Σ ∂y x r`` over the rows.

``set_fused(policy, on)`` gives every ``LlamaRMSNorm`` (and the same norm of Qwen2/Qwen3 and
Mistral) of the policy this forward, or takes it away. The learner does it at every update: a
Hugging Face model's ``train()`` re-applies its hub kernels, which resets every norm's forward.
It runs on the CPU where the kernels load, activations and weight in one dtype (float32 or
bfloat16), in passes autograd records and in the trainer's own (``fused_lora.passes``, so the
old-logprob pass computes exactly what the update computes); any other call (the engine sampling
through the policy, a GPU, mixed dtypes) is the module's own forward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from arft.cpu import kernels as cpu_kernels
from arft.cpu import fused_lora
from arft.cpu.module_forwards import set_forwards

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


def fusable(module: Any) -> bool:
    """Whether ``module`` is one of the RMSNorms (``NORMS``) the fused function reproduces."""
    return type(module).__name__ in NORMS and hasattr(module, "variance_epsilon") and hasattr(module, "weight")


def set_fused(policy: Any, on: bool = True) -> int:
    """Give every fusable RMSNorm of ``policy`` the fused forward (``on``) or its own back;
    returns how many have it now (0 where the kernels do not load here). Idempotent; a norm
    whose forward something else replaced (a hub kernel) keeps that one."""
    kernels = cpu_kernels.load() if on else None
    return set_forwards(policy, fusable, _fused_forward, kernels is not None and kernels.small_ops)


def _fused_forward(module: Any, x: torch.Tensor) -> torch.Tensor:
    """The fused norm where it applies (module doc), the module's own forward elsewhere."""
    kernels = cpu_kernels.load()
    recorded = torch.is_grad_enabled() or fused_lora.in_passes()
    weight = module.weight
    if not recorded or kernels is None or weight.dtype != x.dtype or not kernels.fits(x):
        return type(module).forward(module, x)
    return RmsNorm.apply(x, weight, module.variance_epsilon, kernels)
