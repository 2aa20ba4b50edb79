"""The job spec: the hosted Agent RFT shape, unchanged, plus arft's own sections beside it.

A job file is YAML or JSON::

    model: smollm2-135m-instruct
    training_file: train.jsonl
    validation_file: val.jsonl
    method:
      type: reinforcement
      reinforcement:
        grader: {type: string_check, ...}
        tools: [{name: lookup, server_url: http://127.0.0.1:8000/lookup}]
        max_episode_steps: 6
        hyperparameters: {n_epochs: auto, batch_size: auto, eval_samples: 4}
    # arft's own sections (all optional, documented defaults):
    engine: {type: transformers}
    sampling: {temperature: 1.0}
    rollout: {max_turns: 6}
    logging: {wandb: {project: my-agent}, mlflow: {experiment: my-agent}}  # TensorBoard is on

Unknown or misspelt keys are errors that name the key, the file and the line. Input paths
(datasets, workspace templates, python tool files) resolve against the job file's folder;
``run_dir`` resolves against the current directory.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

EMBEDDED_MODEL = "smollm2-135m-instruct"


class Spec(BaseModel):
    """Base of every config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


Auto = Literal["auto"]


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
    """Accepted for compatibility; open-weight models without a reasoning switch ignore it."""

    def resolved(self, name: str) -> Any:
        """The value of ``name`` with ``"auto"`` replaced by arft's default."""
        defaults = {"n_epochs": 1, "batch_size": 4, "compute_multiplier": 1.0, "eval_interval": 5,
                    "eval_samples": 4, "learning_rate_multiplier": 1.0, "reasoning_effort": "medium"}
        value = getattr(self, name)
        return defaults[name] if value == "auto" else value


class EndpointToolSpec(Spec):
    """A tool served over HTTP with the hosted contract (POST function_call -> function_call_output)."""

    type: Literal["endpoint"] = "endpoint"
    name: str
    server_url: str
    headers: dict[str, str] = Field(default_factory=dict)
    description: str | None = None
    """Shown to the model; when absent, the dataset row's schema for this tool is used."""
    parameters: dict[str, Any] | None = None
    """JSON schema of the arguments; when absent, the dataset row's schema is used."""
    timeout_s: float = 30.0
    max_retries: int = 3
    """Retries after a 5xx, a timeout or a garbage answer before the rollout is infra-failed."""


class PythonToolSpec(Spec):
    """A Python function as a tool: ``module:attr`` or ``path/to/file.py:attr``."""

    type: Literal["python"]
    function: str
    name: str | None = None
    """Defaults to the function's name."""
    description: str | None = None
    """Defaults to the docstring's first paragraph."""
    timeout_s: float = 30.0


class ShellToolSpec(Spec):
    """A shell command runner in the rollout's own sandboxed workspace."""

    type: Literal["shell"]
    name: str = "shell"
    description: str | None = None
    timeout_s: float = 10.0
    memory_mb: int = 512
    max_output_chars: int = 4000


class McpToolSpec(Spec):
    """Every tool of an MCP server started over stdio."""

    type: Literal["mcp"]
    command: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    include: list[str] | None = None
    """Only these of the server's tools (default: all)."""
    name_prefix: str = ""
    timeout_s: float = 30.0


ToolSpec = Annotated[
    Union[EndpointToolSpec, PythonToolSpec, ShellToolSpec, McpToolSpec], Field(discriminator="type")
]


def _tool_type(raw: Any) -> Any:
    """The hosted shape has no ``type`` on its (endpoint) tools: a tool without one is an endpoint."""
    if isinstance(raw, dict) and "type" not in raw:
        return {"type": "endpoint", **raw}
    return raw


class Reinforcement(Spec):
    """``method.reinforcement`` of the hosted shape."""

    grader: dict[str, Any]
    """A grader spec (hosted catalogue: string_check, python, multi, endpoint, ...)."""
    tools: list[ToolSpec] = Field(default_factory=list)
    max_episode_steps: int | Auto = "auto"
    """Most tool calls in one rollout (auto: 10). See ``rollout.on_max_episode_steps``."""
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)
    response_format: dict[str, Any] | None = None

    @field_validator("tools", mode="before")
    @classmethod
    def _infer_tool_types(cls, v: Any) -> Any:
        return [_tool_type(t) for t in v] if isinstance(v, list) else v

    @field_validator("grader")
    @classmethod
    def _grader_has_type(cls, v: dict[str, Any]) -> dict[str, Any]:
        if "type" not in v:
            raise ValueError("a grader needs a 'type' (e.g. string_check, python, multi, endpoint)")
        return v

    @property
    def max_steps(self) -> int:
        return 10 if self.max_episode_steps == "auto" else self.max_episode_steps


class Method(Spec):
    type: Literal["reinforcement"]
    reinforcement: Reinforcement


class EngineSpec(Spec):
    """Which engine generates. ``transformers`` is trainable; ``openai`` is for evaluation only."""

    type: Literal["transformers", "openai"] = "transformers"
    dtype: Literal["auto", "bfloat16", "float32", "float16"] = "auto"
    """auto: bfloat16 (measured faster on CPUs with bf16 support and on GPUs)."""
    device: str = "auto"
    """auto: cuda when available, else cpu."""
    max_batch_size: int = 32
    """Most concurrent requests the transformers engine puts in one forward pass."""
    base_url: str | None = None
    """openai engine: the server, e.g. http://127.0.0.1:8000/v1 (default: $OPENAI_BASE_URL)."""
    api_key_env: str = "OPENAI_API_KEY"
    """openai engine: the environment variable holding the API key (may be unset for local servers)."""
    served_model: str | None = None
    """openai engine: the model name to send (default: the job's ``model``)."""
    timeout_s: float = 120.0


class SamplingSpec(Spec):
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    """Most tokens the model may write in one assistant turn."""
    seed: int | None = None
    """Makes evaluation sampling reproducible (each rollout gets its own seed derived from it)."""


class RolloutSpec(Spec):
    """Limits of one episode and how many run at once."""

    max_turns: int = 8
    """Most assistant turns in a rollout."""
    max_tokens: int = 4096
    """Most tokens in the whole episode (prompt + all turns + tool outputs)."""
    timeout_s: float = 600.0
    """Wall-clock limit of one rollout."""
    concurrency: int = 32
    """Rollouts running at once."""
    on_max_episode_steps: Literal["refuse", "end"] = "refuse"
    """When the tool-call budget is spent: 'refuse' answers further calls with a message (the
    model can still answer); 'end' stops the rollout."""
    tool_choice: str | dict[str, Any] = "auto"
    """auto | required | none | a tool name | {"type":"function","function":{"name":...}}."""
    worked_example: bool = True
    """Show a worked example of a tool call and its result in the tool system block (small
    models call tools only when shown one)."""
    constrained_tool_calls: bool | Literal["auto"] = "auto"
    """Sample tool calls under a grammar of the row's tools: the name is one the row may call,
    the arguments are JSON valid against its schema, then the call closes; text outside calls
    stays free. ``auto`` (default): on when the engine supports it (transformers). A tool with
    ``"strict": true`` is constrained even when this is false, as in the hosted API."""
    tool_output_max_chars: int = 4000
    workspace: str | None = None
    """A template directory copied fresh into each rollout's workspace (shell tools run there).
    May name a folder per task with placeholders from the row: ``repos/{{ item.repo }}``."""


class BudgetSpec(Spec):
    """A soft tool-call budget: a penalty per call beyond it, reported apart from the task reward."""

    soft_limit: int | None = None
    penalty: float = 0.05
    kind: Literal["linear", "step"] = "linear"


class LoraSpec(Spec):
    """LoRA adapter settings (peft)."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] | str = "all-linear"


class TrainingSpec(Spec):
    """arft's RL settings (GRPO-style), beside the hosted hyperparameters."""

    group_size: int = 8
    """Rollouts per task per step (scaled by ``compute_multiplier``)."""
    finetune: Literal["lora", "full"] = "lora"
    lora: LoraSpec = Field(default_factory=LoraSpec)
    learning_rate: float | None = None
    """Base learning rate before ``learning_rate_multiplier`` (default: 1e-4 LoRA, 1e-5 full)."""
    warmup_steps: int = 1
    lr_decay: Literal["cosine", "linear", "constant"] = "constant"
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 4
    """Sequences per forward/backward; gradients accumulate over the whole batch. Activation
    memory grows with it (SmolLM2-135M: ~0.7 GB per 512-token sequence without checkpointing)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: far less memory, ~30 % more compute."""
    updates_per_batch: int = 1
    """Optimizer steps per batch of rollouts (minibatch passes; >1 uses the clipped ratio)."""
    normalize_std: bool = True
    """Divide advantages by the group's reward std (GRPO); False keeps reward − mean (Dr. GRPO)."""
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    kl_coef: float = 0.0
    """k3 KL to the reference (the base model: with LoRA, the adapter disabled)."""
    tis_cap: float = 2.0
    bf16_autocast: bool | Literal["auto"] = "auto"
    """bf16 autocast for the update: ``auto`` uses it where bf16 is fast (GPUs, and CPUs with
    native bf16, measured at start); on CPUs without it bf16 is emulated about 100x slower."""
    checkpoint_every: int = 5
    """Steps between checkpoints (also one at the end)."""
    max_steps: int | None = None
    """Stop after this many steps (default: n_epochs over the training set)."""
    eval_tasks: int | None = Field(default=None, ge=1)
    """Evaluate during training on the first N validation tasks only (default: all of them).
    Keeps evals affordable on a CPU when the validation file is large."""


class WandbSpec(Spec):
    """Weights & Biases logging (needs ``pip install wandb`` and, online, ``wandb login``)."""

    project: str
    entity: str | None = None
    name: str | None = None
    """Run name (default: the run directory's name)."""
    tags: list[str] = Field(default_factory=list)
    mode: Literal["online", "offline"] = "online"
    """``offline`` writes under RUN_DIR/wandb; ``wandb sync`` uploads it later."""


class MlflowSpec(Spec):
    """MLflow logging (needs ``pip install 'arft[tracking]'``: mlflow-skinny + sqlalchemy)."""

    tracking_uri: str | None = None
    """A tracking server (``http://host:5000``) or store (``sqlite:///path/mlflow.db``); default
    ``sqlite:///RUN_DIR/mlflow.db`` (``mlflow ui --backend-store-uri`` that URI to browse it)."""
    experiment: str = "arft"
    run_name: str | None = None
    """Default: the run directory's name."""


class LoggingSpec(Spec):
    """Where training metrics go besides the run store and metrics.jsonl (always written)."""

    tensorboard: bool = True
    """Event files in RUN_DIR/tensorboard (``tensorboard --logdir RUN_DIR``)."""
    wandb: WandbSpec | None = None
    mlflow: MlflowSpec | None = None


class JobSpec(Spec):
    """A whole job: the hosted fields plus arft's sections."""

    model: str = EMBEDDED_MODEL
    """The embedded default, a Hugging Face id, a local directory, or a .gguf file."""
    training_file: str | None = None
    validation_file: str | None = None
    seed: int = 42
    suffix: str | None = None
    method: Method
    engine: EngineSpec = Field(default_factory=EngineSpec)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    run_dir: str | None = None
    """Where runs are written (default: runs/<job name>-<time>), relative to the current dir."""
    base_dir: Path = Field(default=Path("."), exclude=True)
    """The job file's folder (set by the loader); input paths resolve against it."""

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
        return self.method.reinforcement

    @property
    def model_ref(self) -> str:
        """``model`` with a relative local path (directory or .gguf) resolved against the job file."""
        local = self.base_dir / self.model
        if self.model != EMBEDDED_MODEL and not Path(self.model).is_absolute() and local.exists():
            return str(local.resolve())
        return self.model

    def path(self, value: str | None) -> Path | None:
        """An input path from the job resolved against the job file's folder."""
        if value is None:
            return None
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()


class JobError(ValueError):
    """A job file that cannot be used; the message names the file, line and field."""


def _line_of(text: str, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML/JSON node at ``loc`` (or its nearest ancestor)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = node.start_mark.line + 1 if node is not None else None
    for depth, key in enumerate(loc):
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if k.value == key), None)
            if pair is None:
                return line
            if depth == len(loc) - 1:  # the field itself: report the line of its key
                return pair[0].start_mark.line + 1
            node = pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            continue  # discriminator tags etc. are not part of the document
        line = node.start_mark.line + 1
    return line


_TOOL_TAGS: dict[str, type[BaseModel]] = {
    "endpoint": EndpointToolSpec, "python": PythonToolSpec, "shell": ShellToolSpec, "mcp": McpToolSpec}


def _known_fields(loc: tuple[Any, ...]) -> list[str]:
    model: Any = JobSpec
    for key in loc[:-1]:
        if isinstance(key, str) and key in _TOOL_TAGS:  # a tool's discriminator tag in the loc
            model = _TOOL_TAGS[key]
            continue
        field = getattr(model, "model_fields", {}).get(key) if isinstance(key, str) else None
        if field is None:
            continue
        ann = field.annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else model
    return list(getattr(model, "model_fields", {}))


def _format_errors(path: Path, text: str, err: ValidationError) -> str:
    lines = [f"{path}: invalid job spec"]
    for e in err.errors():
        loc = tuple(e["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_of(text, tuple(p for p in loc if not (isinstance(p, str) and p in _TOOL_TAGS)))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(loc[-1]), _known_fields(loc), n=1)
            msg = f"unknown field '{loc[-1]}'" + (f" (did you mean '{close[0]}'?)" if close else "")
        lines.append(f"  {path}:{line or '?'}: {where}: {msg}")
    return "\n".join(lines)


def load_job(path: str | Path) -> JobSpec:
    """Read a YAML or JSON job file; errors name the file, line and field."""
    path = Path(path)
    if not path.exists():
        raise JobError(f"{path}: job file not found (pass the path of a YAML or JSON job spec)")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise JobError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}") from e
    if not isinstance(data, dict):
        raise JobError(f"{path}: a job spec must be a mapping at the top level")
    try:
        job = JobSpec.model_validate(data)
    except ValidationError as e:
        raise JobError(_format_errors(path, text, e)) from None
    return job.model_copy(update={"base_dir": path.resolve().parent})
