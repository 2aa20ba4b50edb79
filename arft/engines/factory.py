"""Build the job's engine (torch, transformers, numpy and httpx clients load only when it is built)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from arft.config import JobSpec
from arft.engines.base import ChatEngine, TokenEngine


def build_engine(job: JobSpec, run_dir: Path | None = None,
                 on_status: Callable[[str], None] = lambda s: None) -> TokenEngine | ChatEngine:
    """The engine named by ``job.engine.type`` for ``job.model`` (``run_dir``: where a vLLM
    server's log goes)."""
    if job.engine.type == "vllm":
        from arft.engines.vllm_engine import VLLMEngine

        return VLLMEngine.from_job(job, run_dir or Path("."), on_status=on_status)
    if job.engine.type == "openai":
        from arft.engines.openai_engine import OpenAIEngine

        return OpenAIEngine.from_spec(job.model, job.engine)  # a served model's name, not a path
    from arft.engines.transformers_engine import TransformersEngine

    return TransformersEngine.from_spec(job.model_ref, job.engine)
