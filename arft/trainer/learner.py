"""The learner: wraps the policy (LoRA or full), owns the optimizer and scheduler, runs updates.

``update(batch)`` sees only a ``TrainBatch`` (token ids, masks, engine logprobs, advantages).
With LoRA the reference policy for the KL term is the same model with the adapter disabled —
no second copy of the weights.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Iterator

from arft.config import JobError, TrainingSpec, auto
from arft.models.loading import bf16_is_fast
from arft.records import TrainBatch
from arft.trainer.batching import micro_batches, Tensors
from arft.trainer.checkpoints import CheckpointError
from arft.trainer.loss import LossConfig, LossStats, policy_loss, token_logprobs

if TYPE_CHECKING:
    import torch


def wrap_policy(model: Any, spec: TrainingSpec, seed: int) -> Any:
    """The trainable policy: a peft LoRA model (base weights frozen) or the model itself."""
    import torch

    if spec.finetune == "full":
        return model.float()  # full fine-tuning keeps fp32 master weights
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)  # adapter init is part of the run's determinism
    config = LoraConfig(r=spec.lora.r, lora_alpha=spec.lora.alpha, lora_dropout=spec.lora.dropout,
                        target_modules=spec.lora.target_modules, task_type="CAUSAL_LM")
    with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5: not ours
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)  # adapters are fp32 (autocast_adapter_dtype)


def patched_ops(spec: TrainingSpec) -> frozenset[str]:
    """The update's fused ops (``arft.cpu.patch``) the spec turns on: the CPU kernels' where
    ``training.cpu_kernels``, the fused LoRA layer where ``training.fused_lora`` (LoRA only)."""
    from arft.cpu import patch

    kernels = patch.KERNEL_OPS if spec.cpu_kernels else frozenset()
    return kernels | ({patch.LORA} if spec.finetune == "lora" and spec.fused_lora else frozenset())


def base_learning_rate(spec: TrainingSpec, multiplier: float) -> float:
    base = spec.learning_rate if spec.learning_rate is not None else (
        1e-4 if spec.finetune == "lora" else 1e-5)
    return base * multiplier


class Learner:
    """Optimizer + schedule + the update step over ``TrainBatch`` es."""

    def __init__(self, policy: Any, spec: TrainingSpec, lr: float, total_steps: int,
                 temperature: float, pad_id: int) -> None:
        import torch

        self.policy, self.spec, self.pad_id = policy, spec, pad_id
        if spec.gradient_checkpointing:
            _enable_checkpointing(policy)
        if spec.finetune == "lora":
            from arft.cpu import patch  # imports torch: not at module load

            patch.install(policy, train=True, ops=patched_ops(spec) & {patch.LORA})
        self.params = [p for p in policy.parameters() if p.requires_grad]
        if not self.params:
            raise JobError("the policy has no trainable parameters: check training.finetune / lora")
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=spec.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: _lr_factor(step, spec, max(total_steps, 1)))
        self.loss_cfg = LossConfig.from_spec(spec, temperature)
        self._ref: Any = None
        if spec.kl_coef > 0 and spec.finetune == "full":
            import copy

            self._ref = copy.deepcopy(policy).eval().requires_grad_(False)

    def update(self, batch: TrainBatch) -> dict[str, float]:
        """One or more optimizer steps on ``batch``; returns the update's metrics."""
        mbs = self._micro_batches(batch)
        total = sum(mb.n_tokens for mb in mbs)
        if total == 0:
            return {"update/tokens": 0.0}
        self._train_mode()
        old = [self._logprobs_no_grad(mb) for mb in mbs] if self.spec.updates_per_batch > 1 else None
        ref = [self._ref_logprobs(mb) for mb in mbs] if self.loss_cfg.kl_coef > 0 else None
        stats, norms = LossStats(), []
        for _ in range(self.spec.updates_per_batch):
            for i, mb in enumerate(mbs):
                with self._autocast():
                    lp, entropy = self._token_logprobs(self.policy, mb, self.loss_cfg.temperature)
                old_lp = old[i] if old is not None else lp.detach()
                adv = mb.advantages.unsqueeze(1).expand_as(mb.target_mask)[mb.target_mask.bool()]
                engine_lp = sampler_logprobs(mb, old_lp)
                loss, s = policy_loss(lp, old_lp, engine_lp, adv, self.loss_cfg,
                                      ref[i] if ref is not None else None)
                (loss / total).backward()
                s.entropy = float(entropy.sum())
                stats.add(s)
            norms.append(self._optimizer_step())
        self.scheduler.step()
        self.policy.eval()
        n = max(stats.tokens, 1.0)
        return {"update/tokens": total, "update/kl": stats.kl / n, "update/entropy": stats.entropy / n,
                "update/clip_fraction": stats.clipped / n, "update/ratio_mean": stats.ratio / n,
                "update/tis_truncated_fraction": stats.tis_truncated / n,
                "update/grad_norm": max(norms), "update/lr": self.optimizer.param_groups[0]["lr"]}

    @property
    def _share_prefix(self) -> bool:
        """Whether the passes run a micro-batch's common prefix once (``training.share_prefix``;
        not under gradient checkpointing, which runs without a cache)."""
        return self.spec.share_prefix and not self.spec.gradient_checkpointing

    def _token_logprobs(self, model: Any, mb: Tensors, temperature: float) -> tuple[Any, Any]:
        """``loss.token_logprobs`` as the spec says (the shared prefix, the CPU kernels)."""
        return token_logprobs(model, mb, temperature, self._share_prefix, self.spec.cpu_kernels)

    @property
    def micro_batch_tokens(self) -> int | None:
        """``training.micro_batch_tokens`` resolved: ``auto`` by the activations' dtype (bf16
        under autocast or with bf16 weights: 4096, else 1536)."""
        import torch

        bf16 = isinstance(self._autocast(), torch.autocast) or next(self.policy.parameters()).dtype == torch.bfloat16
        return auto.micro_batch_tokens(self.spec.micro_batch_tokens, bf16)

    def _micro_batches(self, batch: TrainBatch) -> list[Tensors]:
        """``batch`` split as the spec says; when the prefix is shared the token budget counts
        each micro-batch's common prefix once, as the passes run it."""
        spec = self.spec
        return micro_batches(batch, spec.micro_batch_size, self.pad_id, self.micro_batch_tokens,
                             self._share_prefix)

    def supervised_update(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step of supervised fine-tuning on ``batch``: the mean negative
        log-likelihood of the masked tokens (at temperature 1; advantages and old logprobs are
        ignored). Returns the step's metrics."""
        mbs = self._micro_batches(batch)
        total = sum(mb.n_tokens for mb in mbs)
        if total == 0:
            return {"sft/tokens": 0.0}
        self._train_mode()
        nll = 0.0
        for mb in mbs:
            with self._autocast():
                lp, _ = self._token_logprobs(self.policy, mb, 1.0)
            (-lp.sum() / total).backward()
            nll -= float(lp.detach().sum())
        norm = self._optimizer_step()
        self.scheduler.step()
        self.policy.eval()
        return {"sft/tokens": float(total), "sft/nll": nll / total, "update/grad_norm": norm,
                "update/lr": self.optimizer.param_groups[0]["lr"]}

    def _optimizer_step(self) -> float:
        """Clip the gradients, step the optimizer, clear them; returns the norm before clipping."""
        import torch

        norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.spec.max_grad_norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _train_mode(self) -> None:
        """The policy in training mode with arft's patches for the update (``arft.cpu.patch``:
        RMSNorms, MLP products, rotations and attention on the CPU kernels where
        ``training.cpu_kernels``, LoRA layers fused where ``training.fused_lora``): again at every
        update, since a Hugging Face model's ``train()`` re-applies its hub kernels, which puts
        every norm's own forward back."""
        from arft.cpu import patch

        self.policy.train()
        patch.install(self.policy, train=True, ops=patched_ops(self.spec))

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        import torch

        device = next(self.policy.parameters()).device.type
        if auto.bf16_autocast(self.spec.bf16_autocast, lambda: bf16_is_fast(device)):
            return torch.autocast(device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _logprobs_no_grad(self, mb: Tensors) -> Any:
        import torch

        from arft.cpu.patch import TRAINER_PASSES  # the update pass's arithmetic, for a ratio of 1

        with torch.no_grad(), self._autocast(), TRAINER_PASSES.on():
            return self._token_logprobs(self.policy, mb, self.loss_cfg.temperature)[0]

    def _ref_logprobs(self, mb: Tensors) -> Any:
        import torch

        with torch.no_grad(), self._autocast(), self._reference() as ref:
            return self._token_logprobs(ref, mb, self.loss_cfg.temperature)[0]

    @contextlib.contextmanager
    def _reference(self) -> Iterator[Any]:
        if self._ref is not None:
            yield self._ref
        else:  # LoRA: the base model is the policy with the adapter switched off
            with self.policy.disable_adapter():
                yield self.policy

    # ------------------------------------------------------------------ state

    def trainable_state(self) -> dict[str, Any]:
        """The weights that change: the adapter (LoRA) or the whole model (full)."""
        if self.spec.finetune == "lora":
            from peft import get_peft_model_state_dict

            return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.policy).items()}
        return {k: v.detach().clone() for k, v in self.policy.state_dict().items()}

    def load_trainable_state(self, state: dict[str, "torch.Tensor"]) -> None:
        load_trainable(self.policy, self.spec, state)

    def weights_hash(self) -> str:
        """The content hash of ``trainable_state`` (``arft.models.weights_hash``), without copying it."""
        from arft.models.weights_hash import policy_hash

        return policy_hash(self.policy)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "spec": asdict(self.loss_cfg)}

    def load_state_dict(self, state: dict[str, dict[str, object]]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def load_trainable(policy: Any, spec: TrainingSpec, state: dict[str, "torch.Tensor"]) -> None:
    """Load ``state`` (``Learner.trainable_state``: the adapter, or every weight) into ``policy``."""
    if spec.finetune == "lora":
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(policy, state)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise CheckpointError(f"checkpoint has adapter keys this model lacks: {unexpected[:3]}")
    else:
        policy.load_state_dict(state)


def _enable_checkpointing(policy: Any) -> None:
    """Activation checkpointing that works with frozen base weights (LoRA)."""
    base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    # transformers 5 renamed it (the old name warns); older releases only have the old one.
    kwargs = {"use_reentrant": False}
    if hasattr(base, "activation_checkpointing_enable"):
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    base.config.use_cache = False


def _lr_factor(step: int, spec: TrainingSpec, total: int) -> float:
    """Linear warmup, then constant / linear / cosine decay to 10 % at the last step."""
    if step < spec.warmup_steps:
        return (step + 1) / (spec.warmup_steps + 1)
    if spec.lr_decay == "constant":
        return 1.0
    progress = min((step - spec.warmup_steps) / max(total - spec.warmup_steps, 1), 1.0)
    if spec.lr_decay == "linear":
        return 1.0 - 0.9 * progress
    return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))


def sampler_logprobs(mb: Tensors, old_lp: "torch.Tensor") -> "torch.Tensor":
    """The logprobs of the distribution that sampled each trained token, as the loss's truncated
    importance weight needs them: the recorded ones, except in rows whose sampler is not known
    (``Tensors.behaviour_known`` False: a rescued rollout under ``correction: none``), which count
    as sampled by the trainer's own policy (``old_lp``: weight 1)."""
    import torch

    recorded = mb.old_logprobs[mb.target_mask.bool()]
    if mb.behaviour_known is None:
        return recorded
    known = mb.behaviour_known.unsqueeze(1).expand_as(mb.target_mask)[mb.target_mask.bool()]
    return torch.where(known, recorded, old_lp.detach())
