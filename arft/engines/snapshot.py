"""A transformers engine that samples from its own copy of the policy (async rollouts).

With ``training.max_off_policy_steps`` above 0 the rollouts of the next step are generated while
the trainer updates the policy. Sampling from the policy being updated would mix weights within
one forward pass (and LoRA dropout would be on in training mode), so the engine gets a copy
made when the run starts, in eval mode and without gradients. ``sync`` writes the trainer's
trainable weights into it (the adapter, or every weight of a full fine-tune) between two forward
passes, the same contract as the vLLM engine's ``sync``: the in-flight rows go on with the new
weights, and every logprob recorded is the one the token was sampled with, which is what the
update's truncated importance weight needs.

Memory: one more copy of the model in its training dtype (SmolLM2-135M in bf16: 0.27 GB).
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from arft.engines.transformers_engine import TransformersEngine


class SnapshotEngine(TransformersEngine):
    """A ``TransformersEngine`` over a copy of ``policy`` that changes only at ``sync``."""

    @classmethod
    def of(cls, policy: Any, tokenizer: Any, **kwargs: Any) -> "SnapshotEngine":
        """An engine over a frozen eval-mode copy of ``policy`` (``kwargs``: the engine's)."""
        model = copy.deepcopy(policy).eval().requires_grad_(False)
        return cls(model, tokenizer, **kwargs)

    async def sync(self, policy: Any, step: int) -> float:
        """Copy ``policy``'s trainable weights into the engine's model; the seconds it took.
        ``step`` (the weights' version) is only named in errors."""
        start = time.perf_counter()
        await asyncio.to_thread(self.write_weights, lambda model: _copy_trainable(policy, model, step))
        return time.perf_counter() - start


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
