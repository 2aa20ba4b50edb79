"""What arft reads off a Hugging Face model: its device, its end-of-turn ids, the keywords its
forward pass takes and the state of its weights. torch is imported lazily."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from arft.models.peft_layers import unwrap

if TYPE_CHECKING:
    import torch


def forward_parameters(model: object) -> Any:
    """The parameters of ``model.forward`` (peft wrappers: their base model's)."""
    return inspect.signature(unwrap(model).forward).parameters


def cache_keyword(model: object) -> str:
    """The KV-cache keyword of ``model.forward``: ``cache`` since transformers 5.x renamed it,
    ``past_key_values`` before."""
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


def torch_device(device: str) -> "torch.device":
    import torch

    return torch.device(device)


def eos_ids(model: object, tokenizer: object) -> frozenset[int]:
    """End-of-turn ids: the tokenizer's eos plus every eos id of the model's generation config."""
    ids: set[int] = set()
    sources = [getattr(tokenizer, "eos_token_id", None),
               getattr(getattr(model, "generation_config", None), "eos_token_id", None)]
    for value in sources:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def forward_kwargs(model: object) -> tuple[str, dict[str, Any]]:
    """The cache keyword of this model's forward (renamed in transformers 5) and extra kwargs."""
    # prefill: the last position only
    extra = {"logits_to_keep": 1} if "logits_to_keep" in forward_parameters(model) else {}
    return cache_keyword(model), extra


def param_state(p: "torch.Tensor") -> tuple[int, int, int, Any]:
    """A parameter's identity, in-place version, storage address and dtype: changes when the
    parameter is written in place through autograd (optimizer steps, ``load_state_dict``,
    ``copy_``), replaced, given new ``.data`` or cast. Writes into ``.data`` in place (peft's
    adapter merge, ``p.data.add_``) and fused optimizers do not move the version: clear by hand."""
    return id(p), p._version, p.data_ptr(), p.dtype


def weights_fingerprint(model: "torch.nn.Module") -> tuple[tuple[int, int, int, Any], ...]:
    """``param_state`` of every parameter (see its limits)."""
    return tuple(param_state(p) for p in model.parameters())


def merged_copy(policy: object) -> Any:
    """A plain model with ``policy``'s current weights: a LoRA adapter merged into a copy of the
    base, or a fully fine-tuned model itself (the vLLM engine's merged sync writes a bf16 copy of
    it; the merged ``SnapshotEngine`` samples from it)."""
    import copy

    if hasattr(policy, "merge_and_unload"):
        return copy.deepcopy(policy).merge_and_unload()
    return policy
