"""A transformers engine that samples from its own copy of the policy: async rollouts, and LoRA
merged into the weights.

With ``training.max_off_policy_steps`` above 0 the rollouts of the next step are generated while
the trainer updates the policy. Sampling from the policy being updated would mix weights within
one forward pass (and LoRA dropout would be on in training mode), so the engine gets a copy
made when the run starts, in eval mode and without gradients. ``sync`` writes the trainer's
trainable weights into it (the adapter, or every weight of a full fine-tune) between two forward
passes, the same contract as the vLLM engine's ``sync``: the in-flight rows go on with the new
weights, and every logprob recorded is the one the token was sampled with, which is what the
update's truncated importance weight needs.

Each sync stamps the engine (``PolicyStamp``: the step and the hash of the weights the copy now
holds; merged, of the adapter merged in), and every generation carries that stamp.

``merge_lora``: the copy is a plain model whose adapted weights are ``W + scale * B @ A`` (peft's
``get_delta_weight``), computed again from the frozen base at every ``sync``, so nothing drifts.
A decode step then runs one matrix product per linear layer instead of three, plus peft's
dropout, scaling and sum: 1.4-1.9x faster decode steps for the embedded model on the CPU
(``bench/lora_merged.py``). The merged weights keep the base's dtype: in bfloat16 the adapter's
small early deltas would round away, which is why ``engine.lora: auto`` merges float32 weights
only (``merges_lora``).

Memory: one more copy of the model in its training dtype (SmolLM2-135M in float32: 0.54 GB).
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from arft.config import JobError
from arft.cpu import threads as cpu_threads
from arft.models.hf_model import merged_copy
from arft.engines.transformers.engine import TransformersEngine
from arft.models.weights_hash import policy_hash
from arft.records import PolicyStamp

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def merges_lora(choice: str, policy: Any) -> bool:
    """Whether an engine over ``policy`` (a peft LoRA model, or a model trained in full) samples
    from merged weights under the job's ``engine.lora``: ``merged`` and ``adapter`` are what they
    say; ``auto`` merges float32 weights on the CPU (where peft's extra small matmuls cost most)."""
    import torch

    if not _lora_layers(policy) or choice == "adapter":
        return False
    if choice == "merged":
        return True
    weight = next(p for p in policy.parameters())
    return weight.device.type == "cpu" and weight.dtype == torch.float32


class SnapshotEngine(TransformersEngine):
    """A ``TransformersEngine`` over a copy of ``policy`` that changes only at ``sync``."""

    merged_lora = False
    """Whether the copy is a plain model with the policy's LoRA adapters merged into its weights."""

    @classmethod
    def of(cls, policy: Any, tokenizer: "PreTrainedTokenizerBase", merge_lora: bool = False,
           **kwargs: Any) -> "SnapshotEngine":
        """An engine over a frozen eval-mode copy of ``policy``, with its LoRA adapters merged into
        the weights when ``merge_lora`` (``kwargs``: the engine's)."""
        if merge_lora:
            _check_mergeable(policy)
        model = (merged_copy(policy) if merge_lora else copy.deepcopy(policy)).eval().requires_grad_(False)
        engine = cls(model, tokenizer, **kwargs)
        engine.merged_lora = merge_lora
        return engine

    async def sync(self, policy: Any, step: int) -> float:
        """Write ``policy``'s trainable weights (or, merged, base + adapter) into the engine's
        model; the seconds it took. ``step`` (the weights' version) is only named in errors."""
        start = time.perf_counter()
        write = _write_merged if self.merged_lora else _copy_trainable

        def write_and_stamp(model: Any) -> None:
            write(policy, model, step)
            # the stamp of what the copy now holds; merged, of the adapter it was merged from
            self.policy = PolicyStamp(version=step, hash=policy_hash(policy if self.merged_lora else model))

        await cpu_threads.to_thread(self.write_weights, write_and_stamp)
        return time.perf_counter() - start


def _lora_layers(policy: Any) -> dict[str, Any]:
    """The LoRA layers of a peft ``policy`` by their name in the model it wraps (what
    ``merge_and_unload`` leaves), or nothing for a model without adapters."""
    base = getattr(getattr(policy, "base_model", None), "model", None)
    if base is None:
        return {}
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}


def _check_mergeable(policy: Any) -> None:
    """Refuse a policy whose trainable weights are not all LoRA adapters (merging would leave the
    others behind)."""
    if not _lora_layers(policy):
        raise JobError("merge_lora: the policy has no LoRA layers to merge (a full fine-tune samples "
                       "from its own weights): set engine.lora to auto or adapter")
    others = [n for n, p in policy.named_parameters() if p.requires_grad and ".lora_" not in n]
    if others:
        raise JobError(f"merge_lora: the policy also trains {others[0]} (not a LoRA adapter), which a "
                       "merged copy would not follow: set engine.lora to adapter")


def _write_merged(policy: Any, model: Any, step: int) -> None:
    """Each adapted weight of ``model`` := the policy's frozen base + its active adapters' delta,
    in float32, then in the weight's dtype."""
    import torch

    mine = dict(model.named_modules())
    with torch.no_grad():
        for name, layer in _lora_layers(policy).items():
            if name not in mine:
                raise RuntimeError(f"the engine's merged copy of the policy has no layer {name} (weights "
                                   f"of step {step}): the policy's modules changed after the engine was made")
            weight = layer.get_base_layer().weight
            merged = weight.float() + sum(layer.get_delta_weight(a).float() for a in layer.active_adapters)
            mine[name].weight.copy_(merged)


def _copy_trainable(policy: Any, model: Any, step: int) -> None:
    import torch

    mine = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if not p.requires_grad:
                continue  # frozen (the base weights under LoRA): the copy has them already
            if name not in mine:
                raise RuntimeError(f"the engine's copy of the policy has no parameter {name} (weights of "
                                   f"step {step}): the policy's modules changed after the engine was made")
            mine[name].copy_(p)
