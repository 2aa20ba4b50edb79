"""The policy of a weight-changing run: the model it trains, the engine that samples it, and
where its first weights come from (the job's model, or another run's checkpoint:
``training.init_from``).

The engine is ``arft.engines.factory``'s for the ``train`` role; after every update
``sync_engine`` puts the new weights into an engine that samples from its own copy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from arft.app.session import Session, SessionLearner
from arft.config import JobError, JobSpec, local_model
from arft.engines.base import SyncsWeights, TokenEngine
from arft.engines.factory import Policy, build_engine
from arft.models.loading import load_model
from arft.tracing.run_dir import RunDir
from arft.trainer.learner import wrap_policy
from arft.trainer.merge import run_job

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class PolicyEngine(NamedTuple):
    """The policy a run trains, the engine sampling from it, and their tokenizer."""

    policy: Any
    engine: TokenEngine
    tokenizer: Any


def policy_engine(job: JobSpec, model: Any, tokenizer: "PreTrainedTokenizerBase | None", max_batch_size: int | None,
                  run_dir: Path | None = None, on_status: Callable[[str], None] = lambda s: None
                  ) -> PolicyEngine:
    """The model the job names (or the one given) as a trainable policy, and an engine sampling
    from it (``arft.engines.factory``, role ``train``: a vLLM server with its log in ``run_dir``,
    or a transformers engine over the policy, over a merged copy, or over a snapshot)."""
    if model is None:
        local = local_model(job.engine)
        dtype = "float32" if job.training.finetune == "full" else local.dtype
        model, tokenizer = load_model(job.model_ref, dtype=dtype, device=local.device)
    policy = wrap_policy(model, job.training, job.seed)
    policy.eval()
    engine = build_engine(job, policy=Policy(policy, tokenizer), role="train", run_dir=run_dir,
                          max_batch_size=max_batch_size, on_status=on_status)
    return PolicyEngine(policy, engine, tokenizer)


async def sync_engine(s: Session, step: int) -> dict[str, float]:
    """Put the policy's weights into an engine that samples from its own copy (vLLM, the
    ``SnapshotEngine`` of async rollouts or merged LoRA, a Ray run's replicas); an engine sharing
    the policy needs nothing. The seconds it took, as a metric."""
    engine = s.run.engine
    if not isinstance(engine, SyncsWeights):
        return {}
    return {"time/weight_sync_s": await engine.sync(s.learner.policy, step)}


def init_path(job: JobSpec) -> Path | None:
    """``training.init_from`` as an absolute path (relative paths: the job file's folder)."""
    init = job.training.init_from
    if init is None:
        return None
    path = Path(init).expanduser()
    return path if path.is_absolute() else (job.base_dir / path).resolve()


def init_from_run(learner: SessionLearner, job: JobSpec, source: Path) -> Path:
    """Load the weights of ``source``'s latest checkpoint (a ``train`` or ``sft`` run) into the
    learner's policy; the optimizer starts fresh. Returns the checkpoint used.

    Raises ``JobError`` when the run has no checkpoint, or its model or adapter differ from
    ``job``'s (the weights would not fit, or would mean something else).
    """
    from safetensors.torch import load_file

    checkpoint = RunDir(source).latest_checkpoint()
    if checkpoint is None:
        raise JobError(f"training.init_from: {source} has no checkpoint yet (did its `arft sft` "
                       "or `arft train` finish a step?)")
    theirs = run_job(source)
    _check_compatible(job, theirs, source)
    learner.load_trainable_state(load_file(str(checkpoint / "trainable.safetensors")))
    return checkpoint


def _check_compatible(job: JobSpec, theirs: JobSpec, source: Path) -> None:
    if theirs.model_ref != job.model_ref:
        raise JobError(f"training.init_from: {source} trained {theirs.model_ref}, this job trains "
                       f"{job.model_ref}: start from a run of the same model")
    mine, other = job.training, theirs.training
    if other.finetune != mine.finetune:
        raise JobError(f"training.init_from: {source} is a {other.finetune} run and this job is "
                       f"{mine.finetune}: use the same training.finetune (or `arft merge` it and "
                       "make the merged model this job's model)")
    if mine.finetune == "lora" and other.lora != mine.lora:
        raise JobError(f"training.init_from: {source} trained a different adapter "
                       f"({other.lora.model_dump()}) than this job's training.lora "
                       f"({mine.lora.model_dump()}): use the same LoRA settings")


def apply_init_from(s: Session) -> None:
    """A fresh run with ``training.init_from`` starts from that run's weights."""
    source = init_path(s.run.job)
    if source is not None:
        checkpoint = init_from_run(s.learner, s.run.job, source)
        s.hooks.status(f"warm start from {checkpoint}")
