"""The update's elementwise steps as single passes on arft's CPU kernels (``CpuKernels.train``).

- **Token logprobs.** ``log_softmax(logits, dtype=float32)``, the gather of the sampled tokens and
  the entropy are five passes over ``[N, vocab]`` in float32 forward and three back, for a 49k
  vocabulary ~7 % of an update of the embedded model on a CPU whose matmuls are fast (AMX).
  ``TokenLogprobs`` is one pass (two reads of each row) forward and one back: the same float32
  arithmetic, the sums in another order.
- **The MLP's ``silu(gate) * up``.** Hugging Face's ``LlamaMLP`` runs silu and the product as two
  operations, and their gradient as three (silu's backward and two products). ``SiluMul`` is one
  pass each way; the forward is ``CpuKernels.silu_mul``, the gradient in float32 rounded once.
  ``set_fused(policy, on)`` gives every SiLU MLP of the policy (Llama, Qwen2/3, Mistral) this
  forward in passes autograd records and the trainer's own (``fused_lora.passes``), as
  ``fused_norm`` does for the norms.

- **The rotary embedding.** ``apply_rotary_pos_emb`` runs ``q * cos + rotate_half(q) * sin`` as
  five operations each way for queries and keys. ``Rotary`` is one pass each way (the same
  roundings; the gradient is the rotation by ``-sin``). ``set_fused`` puts it in Hugging Face's
  Llama, Qwen2/3 and Mistral modelling modules (their layers look the function up at each call),
  for passes autograd records and the trainer's own; other calls are the original's.

All run where ``training.cpu_kernels`` is on and the kernels load with AVX-512; anything else
(a GPU, other dtypes) is PyTorch's.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from arft.cpu import kernels as cpu_kernels
from arft.cpu import fused_lora
from arft.cpu.module_forwards import set_forwards

MLPS = ("LlamaMLP", "Qwen2MLP", "Qwen3MLP", "MistralMLP")
"""MLP classes whose forward is ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``."""
ROTARY_MODULES = tuple(f"transformers.models.{m}.modeling_{m}" for m in ("llama", "qwen2", "qwen3", "mistral"))
"""Modelling modules whose ``apply_rotary_pos_emb(q, k, cos, sin)`` the fused rotation replaces."""
_ROTARY_ON = [False]
"""Process-wide: the learner sets it at each update from its ``training.cpu_kernels``."""


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


def _rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *args: Any,
            original: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``apply_rotary_pos_emb`` with the fused rotation where it applies (module doc)."""
    kernels = cpu_kernels.load()
    if (_ROTARY_ON[0] and not args and kwargs.get("position_ids") is None
            and kwargs.get("unsqueeze_dim", 1) == 1 and kernels is not None and kernels.train.ops
            and (torch.is_grad_enabled() or fused_lora.in_passes()) and not (cos.requires_grad or sin.requires_grad)
            and all(x.device.type == "cpu" and x.dim() == 4 and x.dtype == cos.dtype and x.stride(-1) == 1
                    for x in (q, k))
            and cos.dtype in (torch.bfloat16, torch.float32) and cos.dim() == 3 and cos.stride(-1) == 1
            and cos.shape == sin.shape and cos.stride() == sin.stride() and _halves_equal(cos, sin)):
        return Rotary.apply(q, cos, sin, kernels), Rotary.apply(k, cos, sin, kernels)
    return original(q, k, cos, sin, *args, **kwargs)


def _halves_equal(cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether both halves of the last dimension of ``cos`` and ``sin`` agree (``cat(freqs,
    freqs)``, as Llama's), which the gradient as the rotation by ``-sin`` assumes."""
    half = cos.shape[-1] // 2
    return bool(torch.equal(cos[..., :half], cos[..., half:]) and torch.equal(sin[..., :half], sin[..., half:]))


def set_rotary(on: bool) -> int:
    """Put the fused rotation in the modelling modules loaded (``ROTARY_MODULES``; once) and turn it
    on or off; returns how many modules have it."""
    import sys

    kernels = cpu_kernels.load() if on else None
    _ROTARY_ON[0] = kernels is not None and kernels.train.ops
    n = 0
    for name in ROTARY_MODULES:
        module = sys.modules.get(name)
        current = getattr(module, "apply_rotary_pos_emb", None)
        if current is None:
            continue
        if not (isinstance(current, functools.partial) and current.func is _rotary):
            setattr(module, "apply_rotary_pos_emb", functools.partial(_rotary, original=current))
        n += 1
    return n if _ROTARY_ON[0] else 0


def fusable(module: Any) -> bool:
    """Whether ``module`` is one of the SiLU MLPs (``MLPS``) the fused function reproduces."""
    act = getattr(module, "act_fn", None)
    silu = isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"  # Hugging Face's ACT2FN["silu"]
    return (type(module).__name__ in MLPS and silu
            and all(hasattr(module, p) for p in ("gate_proj", "up_proj", "down_proj")))


def set_fused(policy: Any, on: bool = True) -> int:
    """Give every fusable MLP of ``policy`` the fused forward (``on``) or its own back, and turn
    the fused rotation on or off (``set_rotary``); returns how many MLPs have it now (0 where the
    kernels do not run here). Idempotent."""
    set_rotary(on)
    kernels = cpu_kernels.load() if on else None
    return set_forwards(policy, fusable, _mlp_forward, kernels is not None and kernels.small_ops and kernels.train.ops)


def _mlp_forward(module: Any, x: torch.Tensor) -> torch.Tensor:
    """The fused product where autograd records or in the trainer's passes, on matching dtypes on
    the CPU; the module's own forward elsewhere."""
    kernels = cpu_kernels.load()
    if kernels is None or not (torch.is_grad_enabled() or fused_lora.in_passes()) or x.device.type != "cpu":
        return type(module).forward(module, x)
    gate, up = module.gate_proj(x), module.up_proj(x)
    if gate.dtype != up.dtype or gate.dtype not in (torch.bfloat16, torch.float32) or gate.shape != up.shape:
        return module.down_proj(module.act_fn(gate) * up)
    return module.down_proj(SiluMul.apply(gate.contiguous(), up.contiguous(), kernels))
