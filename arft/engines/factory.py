"""The one place an engine is built: ``build_engine(job, *, policy, role)``.

Every command that samples gets its engine here, for its ``Role``:

* ``eval``: the job's engine, loaded from the job (``arft eval``, ``arft doctor``, ``open_run``):
  the transformers engine over the job's model, a vLLM server, or an OpenAI-compatible server;
* ``train``: an engine that samples the policy being trained in this process;
* ``replica``: a Ray engine replica over its own copy of the policy;
* ``serve``: a tuned or plain model behind ``arft serve``;
* ``expert_iteration``: best-of-K samples of the untrained policy (``arft train --warm-start``).

With a policy and ``engine.type: vllm``, ``train`` and ``replica`` start a vLLM server that
``sync`` keeps on the policy's weights. Otherwise a transformers engine samples the policy in
one of three ways (``Sampling``), decided here once for every role: ``merged`` (its own copy
whose weights are base + LoRA adapter, ``engine.lora``), ``snapshot`` (its own copy, for
rollouts that run ahead of the update, ``training.max_off_policy_steps``), or ``policy`` (the
policy itself). An engine with its own copy is a ``SyncsWeights``.

torch, transformers, numpy and httpx clients load only when an engine is built.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, Literal, NamedTuple, overload

from arft.config import JobSpec, TransformersEngineSpec, engine_as
from arft.engines.base import ChatEngine, TokenEngine

Role = Literal["eval", "train", "replica", "serve", "expert_iteration"]
"""What the engine is for (see the module docstring)."""
PolicyRole = Literal["train", "replica", "serve", "expert_iteration"]
"""The roles whose engine samples a model the caller holds."""


class Policy(NamedTuple):
    """A model the caller already holds (a peft LoRA policy, a model trained in full, a merged
    model) and its tokenizer."""

    model: Any
    tokenizer: Any


class Sampling(Enum):
    """How a transformers engine samples a policy."""

    POLICY = "policy"
    """From the policy itself (LoRA as peft adapter layers)."""
    SNAPSHOT = "snapshot"
    """From its own copy, synced after every update (rollouts that run ahead of the update)."""
    MERGED = "merged"
    """From its own copy with the LoRA adapter merged into the weights, merged again at every sync."""


def sampling(job: JobSpec | None, spec: TransformersEngineSpec, policy: Any, role: Role) -> Sampling:
    """How a transformers engine for ``role`` samples ``policy`` (the merged-LoRA rule, once)."""
    from arft.engines.transformers.snapshot import merges_lora

    if merges_lora(spec.lora, policy):
        return Sampling.MERGED
    if role == "train" and job is not None and job.training.max_off_policy_steps > 0:
        return Sampling.SNAPSHOT  # the next step samples while this one updates
    return Sampling.POLICY


@overload
def build_engine(job: JobSpec, *, policy: None = None, role: Literal["eval"], run_dir: Path | None = None,
                 on_status: Callable[[str], None] = ...) -> TokenEngine | ChatEngine: ...


@overload
def build_engine(job: JobSpec | None, *, policy: Policy, role: PolicyRole, run_dir: Path | None = None,
                 spec: TransformersEngineSpec | None = None, max_batch_size: int | None = None,
                 on_status: Callable[[str], None] = ...) -> TokenEngine: ...


def build_engine(job: JobSpec | None, *, policy: Policy | None = None, role: Role, run_dir: Path | None = None,
                 spec: TransformersEngineSpec | None = None, max_batch_size: int | None = None,
                 on_status: Callable[[str], None] = lambda s: None) -> TokenEngine | ChatEngine:
    """The engine of ``job`` for ``role`` (see the module docstring).

    ``policy``: the model to sample (every role but ``eval``). ``run_dir``: where a vLLM server's
    log and synced weights go. ``spec``: the transformers options to use instead of the job's
    (``serve``, which may have no job). ``max_batch_size`` overrides the spec's.
    """
    if policy is None:
        assert job is not None and role == "eval", "only an eval engine is built from the job alone"
        return _from_job(job, run_dir, on_status)
    if job is not None and job.engine.type == "vllm" and role in ("train", "replica"):
        from arft.engines.vllm.engine import VLLMEngine

        return VLLMEngine.from_job(job, run_dir or Path("."), policy.tokenizer, on_status)
    if spec is None:
        assert job is not None, "an engine without a job needs its spec"
        spec = engine_as(job.engine, "transformers")  # e.g. an openai job's warm start samples here
    return _over_policy(job, policy, role, spec, max_batch_size, on_status)


def _from_job(job: JobSpec, run_dir: Path | None, on_status: Callable[[str], None]) -> TokenEngine | ChatEngine:
    """The job's own engine over the job's model."""
    if job.engine.type == "vllm":
        from arft.engines.vllm.engine import VLLMEngine

        return VLLMEngine.from_job(job, run_dir or Path("."), on_status=on_status)
    if job.engine.type == "openai":
        from arft.engines.openai_engine import OpenAIEngine

        return OpenAIEngine.from_spec(job.model, job.engine)  # a served model's name, not a path
    from arft.engines.transformers.engine import TransformersEngine

    return TransformersEngine.from_spec(job.model_ref, job.engine)


def _over_policy(job: JobSpec | None, policy: Policy, role: Role, spec: TransformersEngineSpec,
                 max_batch_size: int | None, on_status: Callable[[str], None]) -> TokenEngine:
    """A transformers engine sampling ``policy`` as ``sampling`` decides."""
    from arft.engines.transformers.engine import TransformersEngine
    from arft.engines.transformers.snapshot import SnapshotEngine

    options = transformers_options(spec, max_batch_size)
    how = sampling(job, spec, policy.model, role)
    if how is Sampling.POLICY:
        return TransformersEngine(policy.model, policy.tokenizer, **options)
    if role == "train" and job is not None and job.training.max_off_policy_steps > 0 \
            and str(policy.model.device).startswith("cpu"):
        on_status("async rollouts on a CPU: generation and the update share its cores, so they "
                  "overlap little (bench/demo_vllm.py: 1.23x slower on 2 cores); they pay where "
                  "generation has its own device or tools are slow")
    return SnapshotEngine.of(policy.model, policy.tokenizer, merge_lora=how is Sampling.MERGED, **options)


def transformers_options(spec: TransformersEngineSpec, max_batch_size: int | None = None) -> dict[str, Any]:
    """The ``TransformersEngine`` keywords the job's engine section sets (``max_batch_size``
    overrides the spec's)."""
    return {"max_batch_size": max_batch_size or spec.max_batch_size, "prefix_cache_mb": spec.prefix_cache_mb,
            "packed_linears": spec.packed_linears, "fused_pass": spec.fused_pass,
            "cpu_kernels": spec.cpu_kernels}
