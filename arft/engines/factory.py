"""Build the job's engine (torch, transformers, numpy and httpx clients load only when it is built)."""

from __future__ import annotations

from arft.config import JobSpec
from arft.engines.base import ChatEngine, TokenEngine


def build_engine(job: JobSpec) -> TokenEngine | ChatEngine:
    """The engine named by ``job.engine.type`` for ``job.model``."""
    if job.engine.type == "openai":
        from arft.engines.openai_engine import OpenAIEngine

        return OpenAIEngine.from_spec(job.model, job.engine)  # a served model's name, not a path
    from arft.engines.transformers_engine import TransformersEngine

    return TransformersEngine.from_spec(job.model_ref, job.engine)
