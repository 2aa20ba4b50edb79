"""Runtime settings built from the job spec's defaults, the way the runner and the learner build
them (``from_spec``), with a few fields changed: for tests that drive an engine, a rollout or the
loss directly. The defaults themselves live in ``arft.config`` only."""

from __future__ import annotations

from typing import Any

from arft.config import RolloutSpec, SamplingSpec, TrainingSpec, auto
from arft.engines.base import SamplingParams
from arft.rollout.loop import RolloutLimits
from arft.trainer.loss import LossConfig


def sampling(**changes: Any) -> SamplingParams:
    """``SamplingParams`` of the default ``job.sampling`` with ``changes`` (spec fields and
    per-request fields such as ``seed``, ``stop``, ``grammar``)."""
    spec = {k: changes.pop(k) for k in list(changes) if k in SamplingSpec.model_fields and k != "seed"}
    return SamplingParams.from_spec(SamplingSpec(**spec), **changes)


def limits(**changes: Any) -> RolloutLimits:
    """``RolloutLimits`` of the default ``job.rollout`` (and ``max_episode_steps: auto``) with
    ``changes``."""
    steps = changes.pop("max_episode_steps", auto.max_episode_steps("auto"))
    return RolloutLimits.from_spec(RolloutSpec(**changes), steps)


def loss_config(temperature: float = 1.0, **changes: Any) -> LossConfig:
    """``LossConfig`` of the default ``job.training`` with ``changes``."""
    return LossConfig.from_spec(TrainingSpec(**changes), temperature)
