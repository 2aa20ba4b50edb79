"""Causal attention in the update on arft's AMX kernels.

PyTorch's CPU flash-attention backward computes its block products through small calls of the
matrix library, converting between bfloat16 and float32 around each: ~25 % of an update of the
embedded model on a 2-core AMX Xeon, at ~0.1 TFLOP/s. ``FlashAttention`` runs both passes on
``CpuKernels.train`` (``kernels/train_attention.cpp``): the forward as two long AMX products per
block of 32 queries around a float32 softmax of whole rows (returning the log-sum-exp), the
backward as FlashAttention-2 on AMX tiles; ~1.6x and ~4x PyTorch's on that CPU
(``bench/train_attention.py``), with errors against float64 like PyTorch's (dQ's a bfloat16
rounding more, dK's and dV's smaller; tested).

``set_fused(policy, on)`` marks the policy's attention layers and gives the model the attention
function ``attention`` (registered with Hugging Face as ``NAME``; the engine's cascade attention
hands it the calls it does not take itself). A marked layer's call takes the kernels when it
records a gradient or is one of the trainer's own passes (``arft.cpu.trainer_pass.TRAINER_PASSES``:
its old-logprob pass then computes exactly what its update computes), runs in bfloat16 on a CPU
whose kernels load, with heads of a multiple of 32, no dropout, softcap, sinks or sliding window,
and a mask that is causal with right padding (the trainer's micro-batches, and the shared-prefix
pass's queries after the prefix); every other call is Hugging Face's ``sdpa`` unchanged. torch
is imported lazily.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from arft.cpu import kernels as cpu_kernels
from arft.cpu.trainer_pass import TRAINER_PASSES

if TYPE_CHECKING:
    import torch

NAME = "arft_train"
"""The attention function's name in Hugging Face's ``AttentionInterface``."""
MARK = "_arft_train_attention"
"""The attribute that marks an attention layer for the kernel (``set_fused``)."""
_SPECIAL = ("position_bias", "softcap", "s_aux", "sliding_window")
MAX_SCORES = 1 << 24
"""Queries × keys a head at most (16k × 1k, 4k × 4k): the backward keeps a head's dSᵀ, 2 bytes a
score, per thread; longer sequences run ``sdpa``."""
_LAST: list[Any] = []
"""The last mask planned, with its plan: a forward passes one mask to every layer."""


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


def attention(module: Any, query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor",
              attention_mask: "torch.Tensor | None", dropout: float = 0.0, scaling: float | None = None,
              **kwargs: Any) -> tuple["torch.Tensor", None]:
    """Hugging Face attention-function signature: ``query`` ``[B, Hq, q, D]``, ``key``/``value``
    ``[B, Hk, T, D]``; returns ``[B, q, Hq, D]``. The kernel where it applies (module doc), else
    Hugging Face's ``sdpa``."""
    kernels = cpu_kernels.load() if getattr(module, MARK, False) else None  # unmarked: no kernel to load
    if kernels is not None and takes(module, query, key, value, dropout, kwargs, kernels):
        plan = _plan(attention_mask, query, key.shape[2])
        if plan is not None:
            scale = scaling if scaling is not None else query.shape[-1] ** -0.5
            out = flash_attention().apply(query, key, value, plan[0], scale, kernels)
            return out.transpose(1, 2).contiguous(), None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  **kwargs)


def takes(module: Any, query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor", dropout: float,
          kwargs: dict[str, Any], kernels: cpu_kernels.CpuKernels) -> bool:
    """Whether the call is one the kernels run (the mask aside): a marked causal layer (no
    ``is_causal=False``), a recorded gradient or the trainer's own pass, bfloat16 on the CPU
    (even strides), heads of a multiple of 32 up to 256, queries the last of the keys (at most
    ``MAX_SCORES`` scores a head), no dropout or score shaping."""
    import torch

    tensors = (query, key, value)
    return (getattr(module, MARK, False) and getattr(module, "is_causal", True) and kwargs.get("is_causal") is not False
            and kernels.train.attention_backward_runs
            and ((torch.is_grad_enabled() and any(x.requires_grad for x in tensors)) or bool(TRAINER_PASSES))
            and not dropout and all(kwargs.get(k) is None for k in _SPECIAL)
            and all(x.dtype == torch.bfloat16 and x.device.type == "cpu" and x.dim() == 4 and x.stride(-1) == 1
                    and not any(s % 2 for s in x.stride()[:-1]) for x in tensors)
            and query.shape[-1] % 32 == 0 and query.shape[-1] <= 256 and key.shape[-1] == query.shape[-1]
            and key.shape == value.shape and query.shape[2] * key.shape[2] <= MAX_SCORES
            and 1 < query.shape[2] <= key.shape[2] and query.shape[1] % key.shape[1] == 0
            and query.shape[0] == key.shape[0])


def _plan(mask: "torch.Tensor | None", query: "torch.Tensor", tk: int) -> tuple[Any] | None:
    """For Hugging Face's boolean ``mask`` ``[B or 1, 1, Tq, Tk]`` (``None``: sdpa's causal over
    ``Tq == Tk``): ``(lens,)``, each row's key count (``lens`` ``None``: all), where the mask is
    causal with the queries last and right padding; ``None`` where it is any other."""
    b, tq = query.shape[0], query.shape[2]
    if mask is None:  # sdpa's is_causal: top-left, which is causal with the queries last only at Tq == Tk
        return (None,) if tq == tk else None
    last = _LAST[0] if _LAST else None  # one read: another thread may replace it
    if last is not None and last[0] is mask and last[1] == (mask._version, b, tk):
        return last[2]
    plan = _masked_plan(mask, b, tq, tk)
    _LAST[:] = [(mask, (mask._version, b, tk), plan)]
    return plan


def _masked_plan(mask: "torch.Tensor", b: int, tq: int, tk: int) -> tuple[Any] | None:
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
    return (None,) if bool((lens == tk).all()) else (lens.to(torch.int64).expand(b).contiguous(),)

def set_fused(policy: Any, on: bool = True) -> int:
    """Mark the attention layers of ``policy`` for the kernel (``on``), or unmark them; returns
    how many are marked now (0 where the kernel does not run here). A model that runs ``sdpa``
    gets ``attention`` (which is ``sdpa`` for every call it does not take); one with another
    implementation keeps it (the engine's cascade attention hands its other calls here)."""
    kernels = cpu_kernels.load() if on else None
    runs = kernels is not None and kernels.train.attention_backward_runs
    if runs:
        _use(policy)
    n = 0
    for module in policy.modules():
        if hasattr(module, "is_causal") and hasattr(module, "scaling"):  # Hugging Face's attention layers
            if runs:
                setattr(module, MARK, True)
            else:
                module.__dict__.pop(MARK, None)
            n += bool(getattr(module, MARK, False))
    return n


def _use(policy: Any) -> None:
    model = next((m for m in policy.modules() if hasattr(m, "set_attn_implementation") and hasattr(m, "config")), None)
    if model is not None and getattr(model.config, "_attn_implementation", None) == "sdpa":
        register()
        model.set_attn_implementation(NAME)


@functools.cache
def register() -> None:
    """Register ``attention`` with Hugging Face as ``NAME``, with ``sdpa``'s masks."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
