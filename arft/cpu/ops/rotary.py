"""The rotary embedding as one autograd function on arft's CPU kernels.

Hugging Face's ``apply_rotary_pos_emb`` runs ``q * cos + rotate_half(q) * sin`` as five
operations each way for queries and keys. ``Rotary`` is one pass each way (the same roundings; the
gradient is the rotation by ``-sin``).

``apply_rotary_pos_emb(q, k, cos, sin, ..., original, on)`` is the dispatch: Llama, Qwen2/3 and
Mistral look the function up in their modelling module (``MODULES``) at each call, so
``arft.cpu.patch`` puts it there (once, keeping ``original``) and says with ``on`` whether the call
comes from a layer it was installed on. It takes the fused rotation where ``takes`` says the call is
one it reproduces; every other call is the ``original``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from arft.cpu import kernels as cpu_kernels
from arft.cpu import ops

MODULES = tuple(f"transformers.models.{m}.modeling_{m}" for m in ("llama", "qwen2", "qwen3", "mistral"))
"""Modelling modules whose ``apply_rotary_pos_emb(q, k, cos, sin)`` the fused rotation replaces."""


class Rotary(torch.autograd.Function):
    """``x`` ``[B, H, T, D]`` rotated by ``cos``/``sin`` ``[B or 1, T, D]`` (no gradient), as
    Hugging Face's ``apply_rotary_pos_emb``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                kernels: cpu_kernels.CpuKernels) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.kernels = kernels
        return kernels.train.rope(x, cos, sin)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        cos, sin = ctx.saved_tensors
        grad = grad.to(cos.dtype)
        grad = grad if grad.stride(-1) == 1 else grad.contiguous()
        return ctx.kernels.train.rope(grad, cos, sin, inverse=True), None, None, None


def runs(kernels: cpu_kernels.CpuKernels | None) -> bool:
    """Whether the fused rotation runs on ``kernels`` (its forward and its backward)."""
    return kernels is not None and kernels.train.ops


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *args: Any,
                         original: Callable[..., Any], on: Callable[[], bool], **kwargs: Any
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """``original(q, k, cos, sin, ...)`` with the fused rotation where ``on()`` and ``takes``."""
    kernels = cpu_kernels.load() if on() else None
    if runs(kernels) and takes(q, k, cos, sin, args, kwargs):
        assert kernels is not None
        return Rotary.apply(q, cos, sin, kernels), Rotary.apply(k, cos, sin, kernels)
    return original(q, k, cos, sin, *args, **kwargs)


def takes(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, args: tuple[Any, ...],
          kwargs: dict[str, Any]) -> bool:
    """Whether the fused rotation reproduces this call: Llama's arguments, a pass that records (or
    the trainer's own), and tensors the kernel rotates as Hugging Face does."""
    return _llamas_arguments(args, kwargs) and ops.recorded() and _rotatable(q, k, cos, sin)


def _llamas_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """No position ids and the heads' dimension second (``unsqueeze_dim`` 1), as Llama calls it."""
    return not args and kwargs.get("position_ids") is None and kwargs.get("unsqueeze_dim", 1) == 1


def _rotatable(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Queries and keys ``[B, H, T, D]`` on the CPU in the dtype of ``cos``/``sin`` (float32 or
    bfloat16, ``[B or 1, T, D]``, no gradient, laid out alike), each with unit stride in ``D``, and
    the angles' halves equal (``_halves_equal``)."""
    tensors_fit = all(x.device.type == "cpu" and x.dim() == 4 and x.dtype == cos.dtype and x.stride(-1) == 1
                      for x in (q, k))
    angles_fit = (not (cos.requires_grad or sin.requires_grad) and cos.dtype in (torch.bfloat16, torch.float32)
                  and cos.dim() == 3 and cos.stride(-1) == 1 and cos.shape == sin.shape
                  and cos.stride() == sin.stride())
    return tensors_fit and angles_fit and _halves_equal(cos, sin)


def _halves_equal(cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether both halves of the last dimension of ``cos`` and ``sin`` agree (``cat(freqs,
    freqs)``, as Llama's), which the gradient as the rotation by ``-sin`` assumes."""
    half = cos.shape[-1] // 2
    return bool(torch.equal(cos[..., :half], cos[..., half:]) and torch.equal(sin[..., :half], sin[..., half:]))
