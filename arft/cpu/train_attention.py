"""Causal attention in the update on arft's AMX kernels.

PyTorch's CPU flash-attention backward computes its block products through small calls of the
matrix library, converting between bfloat16 and float32 around each: ~25 % of an update of the
embedded model on a 2-core AMX Xeon, at ~0.1 TFLOP/s. ``FlashAttention`` runs both passes on
``CpuKernels.train`` (``kernels/train_attention.cpp``): the forward as two long AMX products per
block of 32 queries around a float32 softmax of whole rows (returning the log-sum-exp), the
backward as FlashAttention-2 on AMX tiles; ~1.6x and ~4x PyTorch's on that CPU
(``bench/train_attention.py``), with errors against float64 like PyTorch's (dQ's a bfloat16
rounding more, dK's and dV's smaller; tested).

``attend`` is the trainer's call of the one attention function (``arft.cpu.attention``): a layer
that ``arft.cpu.patch`` marked (``MARK``) takes the kernels when it records a gradient or is one of
the trainer's own passes (``arft.cpu.patch.TRAINER_PASSES``: its old-logprob pass then
computes exactly what its update computes), runs in bfloat16 on a CPU whose kernels load, with
heads of a multiple of 32, no dropout, softcap, sinks or sliding window, and a mask that is causal
with right padding (the trainer's micro-batches, and the shared-prefix pass's queries after the
prefix); for every other call it says ``None`` and the attention function runs Hugging Face's
``sdpa`` unchanged. torch is imported lazily.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

from arft.cpu import kernels as cpu_kernels
from arft.cpu import patch

if TYPE_CHECKING:
    import torch

MARK = "_arft_train_attention"
"""The attribute that marks an attention layer for the kernel (``arft.cpu.patch`` sets it)."""
_SPECIAL = ("position_bias", "softcap", "s_aux", "sliding_window")
_PLANNED = "_arft_attention_plan"
"""The attribute a mask keeps its ``Plan`` under (``_plan``)."""


@functools.cache
def flash_attention() -> Any:
    """The autograd function ``FlashAttention`` (built on first use: torch is imported lazily)."""
    import torch
    from torch.autograd.function import once_differentiable

    class FlashAttention(torch.autograd.Function):
        """Causal softmax attention of ``q`` ``[B, Hq, Tq, D]`` over ``k``/``v`` ``[B, Hk, Tk,
        D]``, the queries the last ``Tq`` positions; ``lens`` ``[B]`` the keys each row has
        (``None``: all). Forward and backward on the AMX kernel."""

        @staticmethod
        def forward(ctx: Any, q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", lens: "torch.Tensor | None",
                    scale: float, kernels: cpu_kernels.CpuKernels) -> "torch.Tensor":
            out, lse = kernels.train.attention_forward(q, k, v, lens, scale)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.lens, ctx.scale, ctx.kernels = lens, scale, kernels
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx: Any, grad: "torch.Tensor") -> tuple["torch.Tensor | None", ...]:
            q, k, v, out, lse = ctx.saved_tensors
            if grad.stride(-1) != 1 or any(s % 2 for s in grad.stride()[:-1]):
                grad = grad.contiguous()
            gq, gk, gv = ctx.kernels.train.attention_backward(q, k, v, out, grad, lse, ctx.lens, ctx.scale)
            return gq, gk, gv, None, None, None

    return FlashAttention


def runs(kernels: cpu_kernels.CpuKernels | None) -> bool:
    """Whether the kernel runs here: loaded, on a CPU with AMX."""
    return kernels is not None and kernels.train.attention_backward_runs


def attend(module: "torch.nn.Module", query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor",
           attention_mask: "torch.Tensor | None", dropout: float, scaling: float | None,
           kwargs: dict[str, Any]) -> "torch.Tensor | None":
    """The trainer's call on the kernel (``[B, q, Hq, D]``) where it applies (module doc);
    ``None`` where it does not (``arft.cpu.attention`` then runs ``sdpa``)."""
    kernels = cpu_kernels.load() if getattr(module, MARK, False) else None  # unmarked: no kernel to load
    if kernels is None or not takes(module, query, key, value, dropout, kwargs, kernels):
        return None
    plan = _plan(attention_mask, query, key.shape[2])
    if plan is None:
        return None
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = flash_attention().apply(query, key, value, plan.lens, scale, kernels)
    return out.transpose(1, 2).contiguous()


def takes(module: "torch.nn.Module", query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor", dropout: float,
          kwargs: dict[str, Any], kernels: cpu_kernels.CpuKernels) -> bool:
    """Whether the call is one the kernels run (the mask aside): a marked causal layer (no
    ``is_causal=False``), a recorded gradient or the trainer's own pass, bfloat16 on the CPU
    (even strides), heads of a multiple of 32 up to 256, queries the last of the keys (at most
    ``kernels.train.max_scores`` scores a head), no dropout or score shaping."""
    import torch

    tensors = (query, key, value)
    return (getattr(module, MARK, False) and getattr(module, "is_causal", True) and kwargs.get("is_causal") is not False
            and kernels.train.attention_backward_runs
            and ((torch.is_grad_enabled() and any(x.requires_grad for x in tensors)) or bool(patch.TRAINER_PASSES))
            and not dropout and all(kwargs.get(k) is None for k in _SPECIAL)
            and all(x.dtype == torch.bfloat16 and x.device.type == "cpu" and x.dim() == 4 and x.stride(-1) == 1
                    and not any(s % 2 for s in x.stride()[:-1]) for x in tensors)
            and query.shape[-1] % 32 == 0 and query.shape[-1] <= 256 and key.shape[-1] == query.shape[-1]
            and key.shape == value.shape and query.shape[2] * key.shape[2] <= kernels.train.max_scores
            and 1 < query.shape[2] <= key.shape[2] and query.shape[1] % key.shape[1] == 0
            and query.shape[0] == key.shape[0])


class Plan(NamedTuple):
    """How the kernel runs a mask (``_plan``)."""

    lens: "torch.Tensor | None"
    """Each row's key count ``[B]`` (int64); ``None``: every row sees all keys."""


def _plan(mask: "torch.Tensor | None", query: "torch.Tensor", tk: int) -> Plan | None:
    """For Hugging Face's boolean ``mask`` ``[B or 1, 1, Tq, Tk]`` (``None``: sdpa's causal over
    ``Tq == Tk``): its ``Plan`` where the mask is causal with the queries last and right padding;
    ``None`` where it is any other. A forward passes one mask to every layer: the mask keeps its
    plan (``_PLANNED``), made once while the mask is unchanged."""
    b, tq = query.shape[0], query.shape[2]
    if mask is None:  # sdpa's is_causal: top-left, which is causal with the queries last only at Tq == Tk
        return Plan(None) if tq == tk else None
    key = (mask._version, b, tk)
    kept = mask.__dict__.get(_PLANNED)
    if kept is not None and kept[0] == key:
        return kept[1]
    plan = _masked_plan(mask, b, tq, tk)
    mask.__dict__[_PLANNED] = (key, plan)  # on the mask itself: it goes when the mask goes
    return plan


def _masked_plan(mask: "torch.Tensor", b: int, tq: int, tk: int) -> Plan | None:
    import torch

    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[0] not in (1, b) \
            or tuple(mask.shape[2:]) != (tq, tk) or mask.device.type != "cpu":
        return None
    lens = mask[:, 0, -1].sum(-1)  # the last query sees every real key
    i = torch.arange(tq).unsqueeze(1) + (tk - tq)
    j = torch.arange(tk)
    want = (j <= i) & (j < lens.view(-1, 1, 1))
    if not torch.equal(mask[:, 0], want):
        return None
    return Plan(None) if bool((lens == tk).all()) else Plan(lens.to(torch.int64).expand(b).contiguous())
