"""Every ``"auto"`` of a job, resolved in one place: one function per setting.

A job may say ``"auto"`` wherever the hosted API accepts it (the hyperparameters,
``max_episode_steps``) and for some of arft's own settings. Where the choice depends on the
machine or the engine, the function takes that fact as an argument: a value, or a function of no
arguments when finding it out costs time (a bf16 timing, a CUDA probe) and only ``"auto"`` needs
it. So this module never imports torch, and the callers that know the fact pass it in.

``rollout.tool_choice: auto`` is not resolved here: it is the hosted value itself (the model
decides whether to call a tool) and reaches the chat template unchanged.
"""

from __future__ import annotations

from typing import Any, Callable

from arft.config.base import JobError


def hyperparameter(name: str, value: Any) -> Any:
    """``method.reinforcement.hyperparameters.<name>``: ``value``, or arft's choice for ``auto``.

    ``n_epochs`` 1, ``batch_size`` 4 tasks, ``compute_multiplier`` 1.0, ``eval_interval`` 5 steps,
    ``eval_samples`` 4 rollouts, ``learning_rate_multiplier`` 1.0, ``reasoning_effort`` medium.
    """
    defaults = {"n_epochs": 1, "batch_size": 4, "compute_multiplier": 1.0, "eval_interval": 5,
                "eval_samples": 4, "learning_rate_multiplier": 1.0, "reasoning_effort": "medium"}
    return defaults[name] if value == "auto" else value


def max_episode_steps(value: int | str) -> int:
    """``method.reinforcement.max_episode_steps``: ``auto`` allows 10 tool calls a rollout."""
    return 10 if value == "auto" else int(value)


def device(value: str, cuda_available: Callable[[], bool]) -> str:
    """``engine.device``: ``auto`` is ``cuda`` when ``cuda_available()``, else ``cpu``."""
    if value != "auto":
        return value
    return "cuda" if cuda_available() else "cpu"


def dtype(value: str, bf16_is_fast: Callable[[], bool]) -> str:
    """``engine.dtype`` as a torch dtype name: ``auto`` is ``bfloat16`` where ``bf16_is_fast()``
    (GPUs, CPUs with native bf16), else ``float32``."""
    if value != "auto":
        return value
    return "bfloat16" if bf16_is_fast() else "float32"


def bf16_autocast(value: bool | str, bf16_is_fast: Callable[[], bool]) -> bool:
    """``training.bf16_autocast``: ``auto`` is on where ``bf16_is_fast()``; CPUs without native
    bf16 emulate it, far slower than fp32 (docs/cpu.md)."""
    if value == "auto":
        return bf16_is_fast()
    return bool(value)


MICRO_BATCH_TOKENS = {"float32": 1536, "bfloat16": 4096}
"""``training.micro_batch_tokens: auto`` by the activations' dtype: bf16 values take half the
bytes, so both budgets hold about the same activation memory (measured peaks: docs/benchmarks.md)."""


def micro_batch_tokens(value: int | str | None, bf16_activations: bool) -> int | None:
    """``training.micro_batch_tokens``: ``auto`` is 4096 where the update's activations are
    bfloat16 (autocast or bf16 weights), else 1536 (``MICRO_BATCH_TOKENS``)."""
    if value != "auto":
        return value  # type: ignore[return-value]
    return MICRO_BATCH_TOKENS["bfloat16" if bf16_activations else "float32"]


def constrained_tool_calls(value: bool | str, engine_can_constrain: bool, engine_name: str) -> bool:
    """``rollout.constrained_tool_calls``: ``auto`` is on where the engine can constrain sampling.

    Raises ``JobError`` naming ``engine_name`` when the job asks for it (``true``) and the
    engine cannot.
    """
    if value == "auto":
        return engine_can_constrain
    if value and not engine_can_constrain:
        raise JobError(f"rollout.constrained_tool_calls is true but the {engine_name} "
                       "cannot constrain sampling: use engine.type: transformers, or set "
                       "rollout.constrained_tool_calls: auto (or false)")
    return bool(value)
