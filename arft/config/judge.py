"""The fields every model-judged grader shares (``score_model``, ``label_model``, and the
``fact_recall`` and ``judge_hack_check`` designs): the hosted ``model``/``sampling_params`` and
where arft finds the judge."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field

from arft.config.base import Spec


class JudgeSampling(Spec):
    """The hosted ``sampling_params``; only the fields that are set are sent."""

    temperature: float | None = Field(default=None, ge=0)
    """The judge's sampling temperature (default: the server's)."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    """The judge's nucleus-sampling mass (default: the server's)."""
    max_completions_tokens: int | None = Field(
        default=None, gt=0,
        validation_alias=AliasChoices("max_completions_tokens", "max_completion_tokens"))
    """Most tokens of the judge's answer; the hosted spelling, sent as chat-completions
    ``max_completion_tokens``."""
    seed: int | None = None
    """Sent as the request's ``seed`` (servers that honour it answer reproducibly)."""
    reasoning_effort: str | None = None
    """e.g. ``minimal``, ``low``, ``medium``, ``high``; passed through for reasoning judges."""

    def body_fields(self) -> dict[str, Any]:
        """The set fields under their chat-completions names."""
        fields = self.model_dump(exclude_none=True)
        if "max_completions_tokens" in fields:
            fields["max_completion_tokens"] = fields.pop("max_completions_tokens")
        return fields


class JudgeFields(Spec):
    """Spec fields of every model-judged grader (hosted ``model``/``sampling_params`` + arft's)."""

    model: str | None = None
    """The judge model's name as the server knows it."""
    sampling_params: JudgeSampling = Field(default_factory=JudgeSampling)
    """The hosted sampling fields of the judge's requests."""
    base_url: str | None = None
    """arft: the judge server (``.../v1``); default ``$OPENAI_BASE_URL``, else the OpenAI API."""
    api_key_env: str = "OPENAI_API_KEY"
    """arft: the *name* of the environment variable holding the judge's API key."""
    api_key: str | None = None
    """arft: the judge's API key as a ``${ENV_VAR}`` reference, resolved at start (a literal
    key works too and is stored as ``***``); wins over ``api_key_env``."""
    timeout_s: float = Field(default=60.0, gt=0)
    """arft: seconds per judge request."""
    max_retries: int = Field(default=3, ge=0)
    """arft: retries of a 5xx, 429, timeout or unreadable answer (a 4xx fails at once)."""
    backoff_s: float = Field(default=0.5, ge=0)
    """arft: seconds of the first wait between retries; doubles after each failed try."""
