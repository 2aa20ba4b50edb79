"""`arft merge`: turn a run's latest checkpoint into a plain Hugging Face model directory.

The result (safetensors weights, config, tokenizer and chat template) loads with
``AutoModelForCausalLM.from_pretrained(OUT_DIR)`` — no arft, no peft.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from arft.config import JobSpec
from arft.tracing.run_dir import RunDir
from arft.tracing.store import StoreError
from arft.trainer.checkpoints import CheckpointError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


WEIGHT_RUN_KINDS = ("train", "sft")
"""Store run kinds whose checkpoints hold weights (``training.init_from``, ``arft merge``)."""


def run_job(run_dir: Path) -> JobSpec:
    """The job a ``train`` or ``sft`` run was started with (from its store)."""
    with RunDir(run_dir).open_store() as store:
        runs = [r for r in store.runs() if r["kind"] in WEIGHT_RUN_KINDS]
    if not runs:
        raise StoreError(f"{run_dir} holds no training run: give a run directory made by "
                         "`arft train` or `arft sft`")
    return JobSpec.from_stored(runs[0]["job"])


def tuned_policy(run_dir: Path, model: "PreTrainedModel | None" = None,
                 tokenizer: "PreTrainedTokenizerBase | None" = None) -> tuple[JobSpec, Any, Any]:
    """``(job, policy, tokenizer)``: ``run_dir``'s latest checkpoint loaded into its base model,
    in float32 on the CPU: with LoRA the peft model, adapter not merged (``save_pretrained``
    writes the adapter folder); a full fine-tune's model itself (``model``/``tokenizer``: a
    base already loaded).

    Raises ``StoreError`` for a directory without a training run, ``CheckpointError`` for one
    without a checkpoint."""
    from safetensors.torch import load_file

    from arft.models.loading import load_model
    from arft.trainer.learner import wrap_policy

    job = run_job(run_dir)
    checkpoint = RunDir(run_dir).latest_checkpoint()
    if checkpoint is None:
        raise CheckpointError(f"{run_dir} has no checkpoint yet: train at least `checkpoint_every` steps")
    if model is None:
        model, tokenizer = load_model(job.model_ref, dtype="float32", device="cpu")
    model = model.float()
    policy = wrap_policy(model, job.training, job.seed)
    state = load_file(str(checkpoint / "trainable.safetensors"))
    if job.training.finetune == "lora":
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(policy, state)
    else:
        policy.load_state_dict(state)
    return job, policy.eval(), tokenizer


def tuned_model(run_dir: Path, model: "PreTrainedModel | None" = None,
                 tokenizer: "PreTrainedTokenizerBase | None" = None) -> tuple[JobSpec, Any, Any]:
    """``(job, model, tokenizer)``: ``tuned_policy`` with a LoRA adapter merged in (a plain model)."""
    job, policy, tokenizer = tuned_policy(run_dir, model, tokenizer)
    if job.training.finetune == "lora":
        return job, policy.merge_and_unload().eval(), tokenizer
    return job, policy, tokenizer


def merge_run(run_dir: Path, out_dir: Path, model: "PreTrainedModel | None" = None,
                 tokenizer: "PreTrainedTokenizerBase | None" = None) -> Path:
    """Write the merged model of ``run_dir``'s latest checkpoint to ``out_dir``."""
    import torch

    _, merged, tokenizer = tuned_model(run_dir, model, tokenizer)
    merged = merged.to(torch.bfloat16)
    merged.config.torch_dtype = torch.bfloat16
    out_dir.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)  # includes the chat template
    return out_dir
