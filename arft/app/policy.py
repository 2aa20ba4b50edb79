"""The policy of a weight-changing run: the model it trains, the engine that samples it, and
where its first weights come from (the job's model, or another run's checkpoint:
``training.init_from``).

The engine is ``arft.engines.factory``'s for the ``train`` role; after every update
``sync_engine`` puts the new weights into an engine that samples from its own copy, and checks
that the engine now samples from exactly them (their ``PolicyStamp``, docs/weights.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from arft.app.session import Session, SessionLearner
from arft.config import JobError, JobSpec, local_model
from arft.cpu import threads as cpu_threads
from arft.engines.base import StampsPolicy, SyncsWeights, TokenEngine
from arft.errors import ArftError
from arft.engines.factory import Policy, build_engine
from arft.models.loading import load_model
from arft.records import PolicyStamp
from arft.tracing.run_dir import RunDir
from arft.trainer.learner import wrap_policy
from arft.trainer.merge import run_job

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@runtime_checkable
class StampsReplicas(Protocol):
    """Several copies of the weights behind one engine (a Ray run's replicas), each with its stamp."""

    async def replica_stamps(self) -> Sequence[PolicyStamp | None]: ...


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


class StaleWeightsError(ArftError):
    """An engine samples from other weights than those the trainer just trained (a sync that did
    not happen or did not take): the next rollouts would train one policy on another's samples."""


async def sync_engine(s: Session, step: int) -> dict[str, float]:
    """Put the policy's weights into an engine that samples from its own copy (vLLM, the
    ``SnapshotEngine`` of async rollouts or merged LoRA, a Ray run's replicas), then check that
    every copy now holds them (``check_stamps``); an engine sharing the policy needs no sync and is
    stamped with its hash. Metrics: the seconds the sync and the check took."""
    engine = s.run.engine
    start = time.perf_counter()
    # hashed beside the sync: both only read the policy, which changes again only after both
    trained = asyncio.ensure_future(cpu_threads.to_thread(s.learner.weights_hash))
    values: dict[str, float] = {}
    try:
        if isinstance(engine, SyncsWeights):
            values["time/weight_sync_s"] = await engine.sync(s.learner.policy, step)
    finally:
        stamp = PolicyStamp(version=step, hash=await trained)  # awaited even when the sync failed
    if getattr(engine, "model", None) is s.learner.policy and hasattr(engine, "policy"):
        engine.policy = stamp  # the same tensors: nothing can differ, the generations carry the stamp
    await check_stamps(engine, stamp)
    values["time/weight_check_s"] = time.perf_counter() - start - values.get("time/weight_sync_s", 0.0)
    return values


async def check_stamps(engine: object, trained: PolicyStamp) -> None:
    """Raise ``StaleWeightsError`` when a copy of the weights ``engine`` samples from (each replica
    of a Ray run) is not ``trained``; engines that cannot say (an OpenAI-compatible server) pass."""
    if isinstance(engine, StampsReplicas):
        held = await engine.replica_stamps()
    elif isinstance(engine, StampsPolicy):
        held = [await engine.policy_stamp()]
    else:
        return
    for i, stamp in enumerate(held):
        if stamp != trained:
            where = f"engine replica {i}" if isinstance(engine, StampsReplicas) else "the engine"
            now = "unstamped weights" if stamp is None else f"weights {stamp.hash} (step {stamp.version})"
            raise StaleWeightsError(
                f"{where} samples from {now} but step {trained.version} trained {trained.hash}: its weight "
                "sync did not take, so the next rollouts would come from another policy than the one "
                "trained. The run stops here; see the engine's log (vLLM: RUN_DIR/vllm.log), then continue "
                "from the last checkpoint with `arft train --resume RUN_DIR` (docs/weights.md)")


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
