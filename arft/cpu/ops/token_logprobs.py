"""The sampled tokens' logprobs and entropy in one pass on arft's CPU kernels.

``log_softmax(logits, dtype=float32)``, the gather of the sampled tokens and the entropy are five
passes over ``[N, vocab]`` in float32 forward and three back, for a 49k vocabulary ~7 % of an
update of the embedded model on a CPU whose matmuls are fast (AMX). ``TokenLogprobs`` is one pass
(two reads of each row) forward and one back: the same float32 arithmetic, the sums in another
order. ``token_logprobs`` is the dispatch: the fused function where the caller asks for it
(``training.cpu_kernels``) and the kernels run it, PyTorch's ``log_softmax`` elsewhere.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from arft.cpu import kernels as cpu_kernels


class TokenLogprobs(torch.autograd.Function):
    """Each row's logprob of its target under ``softmax(logits * inv_t)`` (with a gradient) and its
    entropy (without), float32 ``[N]``, from ``logits`` ``[N, V]`` (bfloat16 or float32)."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, inv_t: float,
                kernels: cpu_kernels.CpuKernels) -> tuple[torch.Tensor, torch.Tensor]:
        lp, entropy, lse = kernels.train.token_logprobs(logits, targets, inv_t)
        ctx.save_for_backward(logits, targets, lse)
        ctx.inv_t, ctx.kernels = inv_t, kernels
        ctx.mark_non_differentiable(entropy)
        return lp, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor, _: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        logits, targets, lse = ctx.saved_tensors
        return ctx.kernels.train.token_logprobs_backward(logits, targets, lse, grad, ctx.inv_t), None, None, None


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float,
                   fused: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The logprobs of ``targets`` under ``logits / temperature`` (``[N]``, float32) and the
    entropy there (no gradient): ``TokenLogprobs`` where ``fused`` and the kernels run it,
    PyTorch's ``log_softmax`` elsewhere."""
    kernels = cpu_kernels.load() if fused else None
    if (kernels is not None and kernels.train.ops and logits.device.type == "cpu" and logits.dim() == 2
            and logits.dtype in (torch.bfloat16, torch.float32) and logits.stride(-1) == 1):
        return TokenLogprobs.apply(logits, targets.contiguous(), 1.0 / max(temperature, 1e-6), kernels)
    if temperature != 1.0:  # at 1 the division would be a pass (and one back) over [N, vocab] for nothing
        logits = logits.float() / max(temperature, 1e-6)
    logp = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
    lp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp.exp() * logp).sum(-1)
    return lp, entropy
