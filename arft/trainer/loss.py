"""The policy-gradient loss: token-level clipped surrogate, optional k3 KL, truncated IS.

Only sampled assistant tokens count (the loss mask). Logits are computed only at those
positions (the vocabulary projection is the most expensive part of the update for a 49k
vocabulary), from the hidden states of the backbone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arft.trainer.shared_prefix import hidden_states

if TYPE_CHECKING:
    import torch

    from arft.config import TrainingSpec
    from arft.trainer.batching import Tensors


@dataclass(frozen=True)
class LossConfig:
    """The loss's settings, built by ``from_spec`` from ``job.training`` (its defaults and
    documentation live in ``arft.config.TrainingSpec``) and the sampling temperature."""

    clip_eps: float
    """PPO clip range of the ratio against the logprobs at sampling time."""
    clip_eps_high: float | None
    """Upper clip (DAPO 'clip-higher'); ``None`` = ``clip_eps``."""
    kl_coef: float
    """Weight of the k3 KL estimate to the reference policy (0 = no reference pass)."""
    tis_cap: float
    """Truncation of the importance weight trainer/engine logprobs (engine precision differs)."""
    temperature: float
    """The sampling temperature: logprobs are of logits / temperature, as the engine records."""

    @classmethod
    def from_spec(cls, spec: TrainingSpec, temperature: float) -> LossConfig:
        """The loss settings of ``spec`` (``job.training``); ``temperature`` is ``job.sampling``'s."""
        return cls(clip_eps=spec.clip_eps, clip_eps_high=spec.clip_eps_high, kl_coef=spec.kl_coef,
                   tis_cap=spec.tis_cap, temperature=temperature)


def _split(model: Any) -> tuple[Any, Any]:
    """(backbone returning hidden states, output projection) of a causal LM, peft-wrapped or not."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model, base.get_output_embeddings()


def token_logprobs(model: Any, mb: "Tensors", temperature: float, share_prefix: bool = True,
                   fused: bool = False) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Logprobs of the target tokens at masked positions (``[N]``) and the entropy there (``[N]``).
    ``share_prefix``: the rows' common prefix runs once (``arft.trainer.shared_prefix``);
    ``fused``: the log-softmax, gather and entropy in one pass on arft's CPU kernels where they
    run (``arft.cpu.ops.token_logprobs``; ``training.cpu_kernels``)."""
    from arft.cpu.ops import token_logprobs as logprobs_op

    backbone, head = _split(model)
    hidden = hidden_states(backbone, mb, share_prefix)
    sel = mb.target_mask.bool()
    h = hidden[:, :-1, :][sel]  # [N, H]: only the positions that predict sampled tokens
    return logprobs_op.token_logprobs(head(h), mb.targets[sel], temperature, fused)


@dataclass
class LossStats:
    """Sums over masked tokens (divide by the token count for means)."""

    tokens: float = 0.0
    clipped: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    ratio: float = 0.0
    tis_truncated: float = 0.0

    def add(self, other: "LossStats") -> None:
        for k in vars(self):
            setattr(self, k, getattr(self, k) + getattr(other, k))


def policy_loss(lp: "torch.Tensor", old_lp: "torch.Tensor", engine_lp: "torch.Tensor",
                adv: "torch.Tensor", cfg: LossConfig, ref_lp: "torch.Tensor | None" = None
                ) -> tuple["torch.Tensor", LossStats]:
    """Sum over tokens of the clipped surrogate (to be divided by the batch's token count).

    ``lp``: current logprobs (with grad); ``old_lp``: the trainer's logprobs before this batch's
    updates (no grad); ``engine_lp``: what the engine recorded at sampling; ``adv``: per token.
    """
    import torch

    ratio = torch.exp(lp - old_lp)
    high = cfg.clip_eps_high if cfg.clip_eps_high is not None else cfg.clip_eps
    clipped_ratio = ratio.clamp(1 - cfg.clip_eps, 1 + high)
    surrogate = torch.minimum(ratio * adv, clipped_ratio * adv)
    # Engine and trainer compute logprobs differently (precision, kernels): reweight by the
    # truncated ratio trainer-old / engine so the gradient stays on-policy for the trainer.
    tis = torch.exp(old_lp - engine_lp).clamp(max=cfg.tis_cap).detach()
    loss = -(tis * surrogate)
    stats = LossStats(
        tokens=float(lp.numel()),
        clipped=float(((ratio - clipped_ratio).abs() > 1e-8).float().sum()),
        ratio=float(ratio.detach().sum()),
        tis_truncated=float((torch.exp(old_lp - engine_lp) > cfg.tis_cap).float().sum()))
    if ref_lp is not None and cfg.kl_coef > 0:
        d = ref_lp - lp
        k3 = torch.exp(d) - d - 1  # unbiased, non-negative estimate of KL(pi || ref)
        loss = loss + cfg.kl_coef * k3
        stats.kl = float(k3.detach().sum())
    return loss.sum(), stats
