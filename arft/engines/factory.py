"""Build the job's engine (torch, transformers, numpy and httpx clients load only when it is built)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from arft.config import EngineSpec, JobSpec
from arft.engines.base import ChatEngine, TokenEngine


def build_engine(job: JobSpec, run_dir: Path | None = None,
                 on_status: Callable[[str], None] = lambda s: None) -> TokenEngine | ChatEngine:
    """The engine named by ``job.engine.type`` for ``job.model`` (``run_dir``: where a vLLM
    server's log goes)."""
    if job.engine.type == "vllm":
        from arft.engines.vllm.engine import VLLMEngine

        return VLLMEngine.from_job(job, run_dir or Path("."), on_status=on_status)
    if job.engine.type == "openai":
        from arft.engines.openai_engine import OpenAIEngine

        return OpenAIEngine.from_spec(job.model, job.engine)  # a served model's name, not a path
    from arft.engines.transformers.engine import TransformersEngine

    return TransformersEngine.from_spec(job.model_ref, job.engine)


def transformers_options(spec: EngineSpec, max_batch_size: int | None = None) -> dict[str, Any]:
    """The ``TransformersEngine`` keywords the job's engine section sets (``max_batch_size``
    overrides the spec's)."""
    return {"max_batch_size": max_batch_size or spec.max_batch_size, "prefix_cache_mb": spec.prefix_cache_mb,
            "packed_linears": spec.packed_linears, "fused_decode": spec.fused_pass,
            "cpu_kernels": spec.cpu_kernels}
