"""The whole job: the hosted fields (``model``, ``method.reinforcement``, ...) plus arft's sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (BaseModel, Field, FieldSerializationInfo, ValidationInfo, field_serializer, field_validator,
                      model_validator)

from arft.config import auto
from arft.config.agents import AgentSpec, ArftAgentSpec, with_agent_type
from arft.config.base import EMBEDDED_MODEL, Auto, Spec
from arft.config.graders import GraderSpec, as_written
from arft.config.monitors import MonitorsSpec
from arft.config.engines import EngineSpec, TransformersEngineSpec, its_own_options, with_engine_type
from arft.config.sections import BudgetSpec, ClusterSpec, LoggingSpec, RolloutSpec, SamplingSpec, TrainingSpec
from arft.config.tools import ToolSpec, with_tool_type


class Hyperparameters(Spec):
    """The hosted API's hyperparameters; ``"auto"`` lets arft choose (see ``resolved``)."""

    n_epochs: int | Auto = "auto"
    """Passes over the training set (auto: 1)."""
    batch_size: int | Auto = "auto"
    """Tasks per training step (auto: 4)."""
    compute_multiplier: float | Auto = "auto"
    """Scales the rollouts per task (group size) and exploration (auto: 1.0)."""
    eval_interval: int | Auto = "auto"
    """Training steps between evaluations (auto: 5)."""
    eval_samples: int | Auto = "auto"
    """Rollouts per validation task in an evaluation (auto: 4)."""
    learning_rate_multiplier: float | Auto = "auto"
    """Multiplies the trainer's base learning rate (auto: 1.0)."""
    reasoning_effort: Literal["low", "medium", "high", "default", "auto"] = "auto"
    """Accepted for compatibility (auto: medium); open-weight models without a reasoning switch
    ignore it."""

    def resolved(self, name: str) -> Any:
        """The value of ``name`` with ``"auto"`` replaced by arft's choice (``auto.hyperparameter``)."""
        return auto.hyperparameter(name, getattr(self, name))


class Reinforcement(Spec):
    """``method.reinforcement`` of the hosted shape."""

    grader: GraderSpec
    """The grader: one of the hosted catalogue (string_check, text_similarity, score_model,
    label_model, python, multi, endpoint) or an arft ``builtin`` design."""
    tools: list[ToolSpec] = Field(default_factory=list)
    """The tools the model may call (a tool without ``type`` is a hosted endpoint tool)."""
    max_episode_steps: int | Auto = "auto"
    """Most tool calls in one rollout (auto: 10). See ``rollout.on_max_episode_steps``."""
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)
    """The hosted hyperparameters (each ``auto`` by default)."""
    response_format: dict[str, Any] | None = None
    """Accepted for hosted jobs (a JSON schema for the final answer); arft does not enforce it."""

    @field_validator("tools", mode="before")
    @classmethod
    def _infer_tool_types(cls, v: Any) -> Any:
        return [with_tool_type(t) for t in v] if isinstance(v, list) else v

    @field_serializer("grader")
    def _grader_as_written(self, grader: BaseModel, info: FieldSerializationInfo) -> dict[str, Any]:
        # Stored runs keep the grader exactly as written: unset fields stay unset when re-read
        # (a multi child without a name is still named by its key).
        return grader.model_dump(mode=info.mode, exclude_unset=True)

    @property
    def grader_dict(self) -> dict[str, Any]:
        """The grader spec as the job wrote it, as plain data (for code that walks specs)."""
        return as_written(self.grader)

    @property
    def max_steps(self) -> int:
        """``max_episode_steps`` resolved (``auto.max_episode_steps``)."""
        return auto.max_episode_steps(self.max_episode_steps)


class Method(Spec):
    """``method`` of the hosted shape: only reinforcement fine-tuning is supported."""

    type: Literal["reinforcement"]
    """The fine-tuning method; ``reinforcement`` (Agent RFT)."""
    reinforcement: Reinforcement
    """The grader, tools and hyperparameters of the RL job."""


class JobSpec(Spec):
    """A whole job: the hosted fields plus arft's sections."""

    model: str = EMBEDDED_MODEL
    """The embedded default, a Hugging Face id, a local directory, or a .gguf file."""
    training_file: str | None = None
    """The training set (JSONL, one task a line), relative to the job file."""
    validation_file: str | None = None
    """The validation set (JSONL), relative to the job file (default: evaluations use the
    training file)."""
    seed: int = 42
    """Seeds the training order, the LoRA adapter's initialisation and the rollouts' sampling."""
    suffix: str | None = None
    """Accepted for hosted jobs (a name suffix for the trained model)."""
    method: Method
    """The hosted ``method``: ``{type: reinforcement, reinforcement: {...}}``."""
    agent: AgentSpec = Field(default_factory=ArftAgentSpec)
    """Who drives a rollout: arft's own loop (``arft``, the default) or your agent program
    (``python`` / ``command``) through arft's gateway (docs/agents.md)."""
    engine: EngineSpec = Field(default_factory=TransformersEngineSpec)
    """Which engine generates the rollouts (``type``: transformers, vllm or openai, each with
    its own options)."""
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    """How each assistant turn is sampled."""
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    """Limits of one rollout and how many run at once."""
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    """A soft tool-call budget charged against the reward (default: none)."""
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    """The RL trainer's settings."""
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    """Where training metrics go besides the run store."""
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    """Scale-out (``cluster.ray``); by default everything runs in this process."""
    monitors: MonitorsSpec = Field(default_factory=MonitorsSpec)
    """The live monitors of ``arft train`` (docs/monitors.md): on by default, warn or stop on an alarm."""
    run_dir: str | None = None
    """Where runs are written (default: runs/<job name>-<time>), relative to the current dir."""
    base_dir: Path = Field(default=Path("."), exclude=True)
    """The job file's folder (set by the loader); input paths resolve against it."""

    @field_validator("agent", mode="before")
    @classmethod
    def _infer_agent_type(cls, v: Any) -> Any:
        return with_agent_type(v)

    @field_validator("engine", mode="before")
    @classmethod
    def _infer_engine_type(cls, v: Any, info: ValidationInfo) -> Any:
        if (info.context or {}).get("stored"):
            return its_own_options(v)
        return with_engine_type(v)

    @model_validator(mode="after")
    def _agent_runs_here(self) -> JobSpec:
        if self.agent.type != "arft" and self.training.rescue is not None:
            raise ValueError("training.rescue puts its hint in the prompt arft's own loop renders; an agent "
                             "program renders its own: remove training.rescue, or use agent type 'arft'")
        if self.training.rescue is not None and self.cluster.ray is not None:
            raise ValueError("training.rescue runs in this process's rollout runner; cluster.ray cannot use it "
                             "yet: remove one of them")
        if self.agent.type != "arft" and self.cluster.ray is not None:
            raise ValueError(f"agent type {self.agent.type!r} runs its programs beside this process's gateway; "
                             "cluster.ray cannot drive them yet: remove cluster.ray, or use agent type 'arft'")
        return self

    @model_validator(mode="after")
    def _lockstep_runs_here(self) -> JobSpec:
        if self.rollout.schedule != "lockstep":
            return self
        if self.cluster.ray is not None:
            raise ValueError("rollout.schedule: lockstep runs the rounds of one process's rollouts; the Ray "
                             "workers share their engine replicas: remove cluster.ray, or use schedule: continuous")
        if self.agent.type != "arft":
            raise ValueError(f"rollout.schedule: lockstep holds arft's own loop's turns; agent type "
                             f"{self.agent.type!r} sends its own requests: use schedule: continuous")
        if self.training.max_off_policy_steps > 0:
            raise ValueError("rollout.schedule: lockstep runs a step's rollouts after the previous update; "
                             "set training.max_off_policy_steps: 0, or use schedule: continuous")
        return self

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> JobSpec:
        """The job a run stored (``arft.app.run.job_record``). A run recorded before each engine
        type had its own spec stored every engine's options; those of other engines are dropped."""
        return cls.model_validate(data, context={"stored": True})

    @model_validator(mode="before")
    @classmethod
    def _drop_hosted_noise(cls, data: Any) -> Any:
        # Objects read back from the hosted API carry read-only fields; accept and ignore them.
        if isinstance(data, dict):
            data = dict(data)  # never modify the caller's dict
            for key in ("object", "id", "created_at", "status", "integrations", "metadata"):
                data.pop(key, None)
        return data

    @property
    def rl(self) -> Reinforcement:
        """``method.reinforcement``."""
        return self.method.reinforcement

    @property
    def model_ref(self) -> str:
        """``model`` with a relative local path (directory or .gguf) resolved against the job file."""
        local = self.base_dir / self.model
        try:
            is_local = (self.model != EMBEDDED_MODEL and not Path(self.model).is_absolute()
                        and local.exists())
        except OSError:  # a name too long to be a path (ENAMETOOLONG) names no local model
            is_local = False
        return str(local.resolve()) if is_local else self.model

    def path(self, value: str | None) -> Path | None:
        """An input path from the job resolved against the job file's folder."""
        if value is None:
            return None
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()
