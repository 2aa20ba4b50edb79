"""One forward pass of ``TransformersEngine``'s model: the CPU fast paths it may take, chosen once.

- ``cascade``: the model runs arft's attention function (``arft.cpu.patch.install(model,
  train=False)``), which hands the engine's passes to ``arft.cpu.cascade`` (the engine passes the
  columns its rows share; masked prefills keep their key/value heads uncopied);
- ``packed``: linear layers on oneDNN with prepacked weights (``arft.cpu.packed_linear``);
- ``fused``: decode steps and prefills of a Llama-family model run ``arft.engines.transformers.fused_pass``
  instead of Hugging Face's forward (prefills without their padding: ``arft.engines.transformers.ragged``),
  and a decode step may share its pass with a prefill (``step_and_prefill``);
- ``kernel``: arft's CPU kernels in the fused pass (``arft.cpu.kernels``, built on first
  use): decode steps' attention over the rows' own columns (AVX-512, or float32 on AVX2), and on
  AVX-512 RMSNorm, rotary embeddings and the MLP's activation.

Each is on where the device and the model allow it and the engine's switch (for comparisons)
leaves it on; every other pass is the model's own forward with the cache it is given.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from arft.cpu import cascade
from arft.cpu import packed_linear
from arft.cpu import patch
from arft.engines.transformers.fused_pass import FusedPass
from arft.engines.transformers.kv_batch import PassInputs
from arft.models.hf_model import forward_kwargs
from arft.cpu.kernels import load as load_kernel

if TYPE_CHECKING:
    import torch


class ModelPass:
    """``pass_(ids, positions, mask, cache, shared)``: last-position logits ``[B, V]``; the
    cache grows in place."""

    def __init__(self, model: Any, on_cpu: bool, cascade_attention: bool = True, packed_linears: bool = True,
                 fused_pass: bool = True, cpu_kernels: bool = True) -> None:
        self.model = model
        self.cache_kwarg, self.kwargs = forward_kwargs(model)
        self.cascade = cascade_attention and on_cpu and patch.install(model, train=False).attention
        self.packed = packed_linears and on_cpu and packed_linear.enable(model) > 0
        self._fuse = fused_pass and self.packed
        self.kernel = load_kernel() if self._fuse and cpu_kernels else None
        """arft's CPU kernels for the fused pass (``None``: off, or they cannot run here)."""
        self.fused = FusedPass.of(model, self.kernel) if self._fuse else None
        self.mix = True
        """``step_and_prefill`` may run its two passes as one (off: for comparisons)."""

    def refresh(self) -> None:
        """Check again whether the fused pass reproduces the model (an adapter injected into
        it, a cast or a move since: it may no longer)."""
        self.fused = FusedPass.of(self.model, self.kernel) if self._fuse else None

    @property
    def mixes(self) -> bool:
        """Whether ``step_and_prefill`` runs its two passes as one (the fused path)."""
        return self.mix and self._fused_now()

    def _fused_now(self) -> bool:
        """Whether a pass now runs the fused pass: it took the model, no gradient is wanted,
        and its adapters (if any) are still as it took them (``FusedPass.runs_now``)."""
        import torch

        return self.fused is not None and not torch.is_grad_enabled() and self.fused.runs_now()

    def step_and_prefill(self, step: PassInputs, fill: PassInputs
                         ) -> tuple["torch.Tensor", "torch.Tensor", bool]:
        """A decode step of one batch and a prefill of another: their last-position logits, and
        whether they ran as one pass (where ``mixes``: the decode step's rows ride along the
        prefill's products) rather than two."""
        if self.mixes and _new_token_each_row(fill.ids, fill.mask):
            assert self.fused is not None
            return *self.fused.step_and_prefill(step, fill), True
        return self(*step), self(*fill), False

    def __call__(self, ids: "torch.Tensor", positions: "torch.Tensor", mask: "torch.Tensor", cache: Any,
                 shared: int = 0) -> "torch.Tensor":
        """``ids``/``positions`` ``[B, S]``, ``mask`` ``[B, T]`` over the cache and these tokens;
        ``shared``: leading columns every row holds the same (cascade attention reads them once)."""
        if self._fused_now() and _new_token_each_row(ids, mask):
            assert self.fused is not None
            return self.fused.logits(ids, positions, mask, cache, shared)
        extra = {cascade.KEYWORD: shared} if self.cascade else {}
        with packed_linear.packed_passes() if self.packed else contextlib.nullcontext():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                             **{self.cache_kwarg: cache}, **self.kwargs, **extra)
        return out.logits[:, -1, :]


def _new_token_each_row(ids: "torch.Tensor", mask: "torch.Tensor") -> bool:
    """Whether every row has a real token among ``ids`` (what the fused pass needs: ``RaggedRows``)."""
    return ids.shape[1] == 1 or bool(mask[:, -ids.shape[1]:].any(dim=1).all())
