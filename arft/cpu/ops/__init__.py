"""The update's ops on arft's CPU kernels, one file per op, as unsloth's ``kernels/`` folder has
them: each holds its autograd function (forward and backward on ``CpuKernels``) and its dispatch
(the fused function where it reproduces the call, PyTorch's or the module's own forward elsewhere).

- ``rms_norm``: Llama's RMSNorm;
- ``rotary``: the rotary embedding (``apply_rotary_pos_emb``);
- ``silu_mul``: the MLP's ``silu(gate) * up``;
- ``token_logprobs``: the sampled tokens' logprobs and entropy from the logits;
- ``lora``: a LoRA linear layer, base and adapter products with a written-out backward.

The ops patch nothing: ``arft.cpu.patch`` puts their dispatch into a model (``install`` /
``uninstall``). torch is imported lazily here (the op modules import it).
"""

from __future__ import annotations

from arft.cpu import patch


def recorded() -> bool:
    """Whether a call now takes an op's fused path: where autograd records, or in one of the
    trainer's own passes (``TRAINER_PASSES``: its old-logprob pass then computes exactly what its
    update computes, without a gradient)."""
    import torch

    return torch.is_grad_enabled() or bool(patch.TRAINER_PASSES)
