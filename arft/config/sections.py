"""arft's own sections of a job, beside the hosted ``method``: sampling, rollout limits, the
tool-call budget, the RL trainer, where metrics go and scale-out (the engine section has its own
module, ``arft.config.engines``). Every one is optional."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator, NonNegativeFloat, field_validator

from arft.config.base import Auto, Spec
from arft.config.cassette import ToolCassetteSpec


class SamplingSpec(Spec):
    """How the model samples each assistant turn (``SamplingParams.from_spec`` reads it)."""

    temperature: float = 1.0
    """Softmax temperature; 0 is greedy. Training logprobs use the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling: sample from the smallest set of tokens whose probability reaches it
    (1.0: off)."""
    top_k: int = 0
    """Sample from the k most likely tokens only (0: off)."""
    max_new_tokens: int = 256
    """Most tokens the model may write in one assistant turn."""
    seed: int | None = None
    """Makes evaluation sampling reproducible (each rollout gets its own seed derived from it)."""


class RolloutSpec(Spec):
    """Limits of one episode and how many run at once (``RolloutLimits.from_spec`` reads it)."""

    max_turns: int = 8
    """Most assistant turns in a rollout."""
    max_tokens: int = 4096
    """Most tokens in the whole episode (prompt + all turns + tool outputs)."""
    timeout_s: float = 600.0
    """Wall-clock limit of one rollout, in seconds."""
    concurrency: int = 32
    """Rollouts running at once."""
    schedule: Literal["continuous", "lockstep"] = "continuous"
    """How turns meet the engine. ``continuous`` (default): a turn joins the engine's batch as
    soon as its tools answer. ``lockstep``: the turns of all rollouts in flight start together,
    in task order, so the batches (and the last bits of every logit) do not depend on tool
    latency: a run replays bit for bit on the transformers engine (docs/replay.md), at the price
    of each round waiting for its slowest tool call. Evaluations then run before, not beside,
    the next step's rollouts."""
    on_max_episode_steps: Literal["refuse", "end"] = "refuse"
    """When the tool-call budget is spent: 'refuse' answers further calls with a message (the
    model can still answer); 'end' stops the rollout."""
    tool_choice: str | dict[str, Any] = "auto"
    """auto | required | none | a tool name | {"type":"function","function":{"name":...}}, as in
    the hosted API; a row's own ``tool_choice`` wins. auto is passed on as is: the model decides."""
    parallel_tool_calls: bool = True
    """Several tool calls may share one assistant turn (they run concurrently), as the hosted
    API's ``parallel_tool_calls``; false ends a turn at its first call (a row's own
    ``parallel_tool_calls`` wins)."""
    worked_example: bool = True
    """Show a worked example of a tool call and its result in the tool system block (small
    models call tools only when shown one)."""
    constrained_tool_calls: bool | Auto = "auto"
    """Sample tool calls under a grammar of the row's tools: the name is one the row may call,
    the arguments are JSON valid against its schema, then the call closes; text outside calls
    stays free. ``auto`` (default): on when the engine supports it (transformers). A tool with
    ``"strict": true`` is constrained even when this is false, as in the hosted API."""
    schema_keywords: Literal["strict", "lenient"] | Auto = "auto"
    """A tool schema keyword constrained calls cannot enforce (a benchmark's ``optional``,
    ``not``, ``uniqueItems``...): ``strict`` stops the run with an error naming the tool and the
    keyword; ``lenient`` leaves it out of the call grammar, with one warning per tool naming it
    (the model still sees the schema as written). ``auto`` (default): lenient for the schemas
    dataset rows bring (their ``tools``: imported data you did not write), strict for the job's
    own tools. A ``format`` with no grammar (``int32``...) is left out with a warning in every
    mode; the enforced ones are in docs/constrained_tool_calls.md."""
    tool_output_max_chars: int = 4000
    """Characters of one tool output the model sees; a longer output is cut."""
    workspace: str | None = None
    """A template directory copied fresh into each rollout's workspace (shell tools run there).
    May name a folder per task with placeholders from the row: ``repos/{{ item.repo }}``."""
    tool_cassette: ToolCassetteSpec = Field(default_factory=ToolCassetteSpec)
    """Record every tool call, or replay them without the tools: ``off`` (default) | ``record``
    | ``replay``, or ``{mode, path, miss, latency}`` (docs/replay.md; ``arft eval/train
    --record DIR / --replay DIR``)."""


class BudgetSpec(Spec):
    """A soft tool-call budget: a penalty per unit beyond it, reported apart from the task reward."""

    unit: Literal["calls", "turns", "latency"] = "calls"
    """What the budget counts: ``calls`` (executed tool calls), ``turns`` (sequential tool rounds:
    parallel calls in one turn count once) or ``latency`` (critical-path seconds: per turn, the
    slowest of its calls, from ``tool_costs`` or the measured latencies)."""
    soft_limit: float | None = None
    """What a rollout may use without penalty, in ``unit`` (``None``: no budget)."""
    penalty: float = 0.05
    """Reward subtracted per unit over the limit (``linear``) or once (``step``)."""
    kind: Literal["linear", "step"] = "linear"
    """``linear``: ``penalty`` per unit over the limit; ``step``: ``penalty`` once when over."""
    tool_costs: dict[str, NonNegativeFloat] | None = None
    """Seconds charged per call of each tool for ``unit: latency`` (deterministic training);
    a tool not listed is charged its measured latency."""


class LoraSpec(Spec):
    """LoRA adapter settings (peft)."""

    r: int = 16
    """Rank of the adapter matrices."""
    alpha: int = 32
    """LoRA scaling numerator: the update is scaled by ``alpha / r``."""
    dropout: float = 0.0
    """Dropout on the adapter's input, as a probability."""
    target_modules: list[str] | str = "all-linear"
    """Module names that get adapters, or ``all-linear`` (every linear layer but the output)."""


class RescueSpec(Spec):
    """``training.rescue``: groups that teach nothing, sampled again (docs/training.md, "Rescue").
    A stuck group (``groups``: by default one whose rewards are all equal and below ``mark``)
    goes through two rungs, each optional: if its samples are near-identical, it is sampled again
    at ``explore_temperature``; if still stuck, with the privileged ``hint`` in its prompt (the
    grader never sees the hint). Explored rollouts that did better, and hinted ones that succeeded
    (reached ``mark``), replace some of the group's own, a hinted one trained as if sampled from
    the prompt without the hint. Evaluations never see either."""

    hint: str | None = None
    """A template over the row (``"The expected call is {{ item.expected_call }}"``), appended to
    the last user message of the hinted prompt; ``auto``: built from the item fields the grader
    reads. None: no hint rung."""
    explore_temperature: float | None = Field(default=None, gt=0)
    """The cheaper rung, tried first: a stuck group whose samples are near-identical is sampled
    again at this sampling temperature (its logprobs recorded under that distribution, which the
    loss's importance weight then corrects). None: no exploration rung."""
    similarity: float = Field(default=0.9, ge=0.0, le=1.0)
    """Near-identical: the mean pairwise similarity of the group's sampled tokens (normalised
    Indel, 1 = the same ids) at or above this."""
    groups: Literal["equal", "unsolved"] = "equal"
    """Which groups are stuck: ``equal``, those GRPO drops (every reward the same, all below
    ``mark``); ``unsolved``, every group none of whose rollouts reached ``mark``, partial credit
    or not (a group of 0, 0.25, 0, 0 teaches the partial behaviour, never the success)."""
    mark: float = 1.0
    """The success mark: only groups whose equal rewards are below it are rescued, and only hinted
    rollouts graded at or above it are imitated (an explored one need only do better than its group)."""
    samples: int | None = Field(default=None, ge=1)
    """Rollouts sampled again per stuck group, on each rung (default: the group size)."""
    keep_unhinted: int = Field(default=1, ge=1)
    """Rollouts of the group's own that stay (at least one: the contrast the advantage needs)."""
    unhinted: Literal["baseline", "train"] = "baseline"
    """What the group's own rollouts kept beside hinted successes do: ``baseline`` (default), they
    only set the baseline the successes' advantage is measured from and are not trained, so the
    update imitates the successes and pushes nothing down (the group was all failures: its own
    tokens hold no contrast but the hint's); ``train``, they train as in any group, pushed down
    against the successes (measured: docs/training.md, "Rescue")."""
    correction: Literal["tis", "none"] = "none"
    """How the hinted samples are weighted: ``none``, as if the policy without the hint had sampled
    them (their recorded logprobs are replaced by that policy's): biased towards imitation of the
    hinted successes, and the push that measured best (docs/training.md, "Rescue"); ``tis``, by the
    truncated importance ratio between the policy without the hint and the hinted policy that
    sampled them (the loss's own ``tis_cap`` truncation): the honest on-policy estimate, near 0
    on exactly the tokens the hint caused."""

    @model_validator(mode="after")
    def _a_rung(self) -> "RescueSpec":
        if self.hint is None and self.explore_temperature is None:
            raise ValueError("training.rescue needs a rung: a hint (a template over the row, or auto), "
                             "an explore_temperature, or both")
        return self


class TrainingSpec(Spec):
    """arft's RL settings (GRPO-style), beside the hosted hyperparameters."""

    group_size: int = 8
    """Rollouts per task per step (scaled by ``compute_multiplier``)."""
    finetune: Literal["lora", "full"] = "lora"
    """``lora``: train adapters only (see ``lora``); ``full``: every weight, in float32."""
    lora: LoraSpec = Field(default_factory=LoraSpec)
    """The adapter's settings when ``finetune`` is ``lora``."""
    learning_rate: float | None = None
    """Base learning rate before ``learning_rate_multiplier`` (default: 1e-4 LoRA, 1e-5 full)."""
    warmup_steps: int = 1
    """Optimizer steps of linear learning-rate warmup."""
    lr_decay: Literal["cosine", "linear", "constant"] = "constant"
    """Learning-rate schedule after warmup (cosine and linear decay to 10 % at the last step)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global L2 norm."""
    micro_batch_size: int = Field(default=16, ge=1)
    """At most this many sequences per forward/backward; gradients accumulate over the whole
    batch. ``micro_batch_tokens`` is what bounds activation memory."""
    micro_batch_tokens: Annotated[int, Field(ge=1)] | Auto | None = "auto"
    """At most this many tokens run per forward/backward: the sequences times the longest, or
    with ``share_prefix`` the micro-batch's common prefix once plus every row's rest (padded). A
    longer sequence goes alone. Activation memory grows with it. ``auto``: 1536 where the
    update's activations are float32, 4096 where they are bf16 (half the bytes a value: about
    the same memory, measured in docs/benchmarks.md; ``arft.config.auto.micro_batch_tokens``); on
    a GPU raise it. ``null``: ``micro_batch_size``
    sequences whatever their length."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: far less memory, at the cost of running each
    layer's forward again during the backward."""
    share_prefix: bool = True
    """Run the tokens every sequence of a micro-batch starts with (a group's prompt, a shared
    system prompt or worked examples) once in the update's forward and backward passes instead
    of once per sequence: the same gradient, less compute. Off under gradient checkpointing."""
    fused_lora: bool = True
    """Run each LoRA linear layer of the update as one function (base and adapter products, a
    written-out backward) instead of peft's modules, which cast, scale and add the activations in
    passes of their own: the same gradient in fewer passes over the activations
    (``python -m bench run update_throughput --fused``; figures in docs/benchmarks.md). Layers
    with adapter dropout keep peft's forward."""
    cpu_kernels: bool = True
    """Run the update's elementwise steps and attention on arft's CPU kernels
    (``arft.cpu.kernels``, built on first use with the system's C++ compiler) instead of
    PyTorch's several passes each: RMSNorm, the rotary embedding, the MLP's ``silu(gate) * up``
    and the sampled tokens' logprobs and entropy in one pass each way (AVX-512), and causal
    attention's forward and backward on AMX tiles (bf16 on Intel Sapphire Rapids and later),
    the same gradient within bf16/float32 rounding (docs/cpu.md; figures in docs/benchmarks.md,
    ``python -m bench run update_throughput --kernels``). Where a kernel cannot run, PyTorch's
    does."""
    updates_per_batch: int = 1
    """Optimizer steps per batch of rollouts (minibatch passes; >1 uses the clipped ratio)."""
    normalize_std: bool = True
    """Divide advantages by the group's reward std (GRPO); False keeps reward − mean (Dr. GRPO)."""
    clip_eps: float = 0.2
    """PPO clip range of the probability ratio against the logprobs at sampling time."""
    clip_eps_high: float | None = None
    """Upper clip range (DAPO 'clip-higher'); ``None``: the same as ``clip_eps``."""
    kl_coef: float = 0.0
    """k3 KL to the reference (the base model: with LoRA, the adapter disabled); 0: no KL."""
    tis_cap: float = 2.0
    """Cap of the truncated importance weight between trainer and engine logprobs (their
    numerics differ slightly)."""
    bf16_autocast: bool | Auto = "auto"
    """bf16 autocast for the update: ``auto`` uses it where bf16 is fast (GPUs, and CPUs with
    native bf16, measured at start); CPUs without it emulate bf16, far slower than float32
    (docs/cpu.md)."""
    max_off_policy_steps: int = Field(default=0, ge=0, le=8)
    """Async rollouts: the rollouts of step N+1 are generated while step N updates, from weights
    at most this many steps older than the ones the update starts from. 0: synchronous, every
    step samples from the newest weights (and a resumed run repeats the uninterrupted one
    exactly). With 1 or 2 the engine samples from its own copy of the weights, which follows
    every update; the truncated importance weight (``tis_cap``) between the trainer's and the
    recorded logprobs corrects for the older sampler. Rollouts older than the bound are dropped
    and counted (``train/stale_dropped``)."""
    dynamic_sampling: int = Field(default=0, ge=0, le=8)
    """DAPO's dynamic sampling: up to this many extra rounds a step, each drawing the next tasks
    of the data order, one for each group whose training rewards were all equal (such a group
    has no advantage, so no gradient), until the batch has ``batch_size`` groups that teach
    something. The step trains on those; every task drawn is used up (the data order moves on
    past it) and counted (``train/groups_resampled``). 0: off."""
    checkpoint_every: int = 5
    """Steps between checkpoints (also one at the end)."""
    max_steps: int | None = None
    """Stop after this many steps (default: n_epochs over the training set)."""
    eval_tasks: int | None = Field(default=None, ge=1)
    """Evaluate during training on the first N validation tasks only (default: all of them).
    Keeps evals affordable on a CPU when the validation file is large."""
    rescue: RescueSpec | None = None
    """Privileged hints for zero-signal groups (off by default; see ``RescueSpec``)."""
    init_from: str | None = None
    """Start from the weights of another run's latest checkpoint: a warm start from ``arft sft``
    (or an earlier ``arft train``) of the same model and the same ``finetune`` / ``lora``
    settings. A run directory; relative paths resolve against the job file's folder."""


class WandbSpec(Spec):
    """Weights & Biases logging (needs ``pip install wandb`` and, online, ``wandb login``)."""

    project: str
    """The W&B project the run is logged to."""
    entity: str | None = None
    """The W&B team or user (default: your default entity)."""
    name: str | None = None
    """Run name (default: the run directory's name)."""
    tags: list[str] = Field(default_factory=list)
    """Tags of the W&B run."""
    mode: Literal["online", "offline"] = "online"
    """``offline`` writes under RUN_DIR/wandb; ``wandb sync`` uploads it later."""


class MlflowSpec(Spec):
    """MLflow logging (needs ``pip install 'arft[tracking]'``: mlflow-skinny + sqlalchemy)."""

    tracking_uri: str | None = None
    """A tracking server (``http://host:5000``) or store (``sqlite:///path/mlflow.db``); default
    ``sqlite:///RUN_DIR/mlflow.db`` (``mlflow ui --backend-store-uri`` that URI to browse it)."""
    experiment: str = "arft"
    """The MLflow experiment the run belongs to (created when missing)."""
    run_name: str | None = None
    """Default: the run directory's name."""


class OpenTelemetrySpec(Spec):
    """OpenTelemetry traces of a run (needs ``pip install 'arft[otel]'``). Where they go is the
    standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (and
    ``OTEL_EXPORTER_OTLP_HEADERS``) of the environment, read by the OpenTelemetry SDK; see
    docs/telemetry.md."""

    service_name: str = "arft"
    """The ``service.name`` the spans carry (what Jaeger or Tempo lists the run under)."""


class LoggingSpec(Spec):
    """Where training metrics go besides the run store and metrics.jsonl (always written)."""

    tensorboard: bool = True
    """Event files in RUN_DIR/tensorboard (``tensorboard --logdir RUN_DIR``)."""
    wandb: WandbSpec | None = None
    """Also log to Weights & Biases (default: off)."""
    mlflow: MlflowSpec | None = None
    """Also log to MLflow (default: off)."""
    opentelemetry: OpenTelemetrySpec | None = None
    """Export a span per training step, rollout, model turn, tool call, grade and weight sync over
    OTLP (default: off). ``true`` or ``{service_name: ...}``; docs/telemetry.md."""

    @field_validator("opentelemetry", mode="before")
    @classmethod
    def _otel_flag(cls, value: Any) -> Any:
        """``opentelemetry: true`` is the section with its defaults; ``false`` is off."""
        if value is True:
            return {}
        return None if value is False else value


class RaySpec(Spec):
    """Scale-out on a Ray cluster (``arft train JOB --ray ADDRESS`` sets ``address``)."""

    address: str | None = None
    """The cluster: ``auto`` (the one ``ray start`` made on this machine), ``HOST:PORT``,
    ``ray://HOST:10001``, or ``local`` (a cluster started for this run alone)."""
    rollout_workers: int = Field(default=2, ge=1)
    """Rollout worker actors. Each runs whole rollouts with its own tools, sandboxes and grader,
    so tool traffic stays on its node."""
    engine_replicas: int = Field(default=1, ge=1)
    """Engine actors: each holds a copy of the model and serves the workers assigned to it (a
    rollout's turns all go to its worker's replica)."""
    worker_cpus: float = Field(default=1.0, gt=0)
    """CPUs reserved for each rollout worker."""
    worker_concurrency: int | None = Field(default=None, ge=1)
    """Rollouts one worker runs at once (default: ``rollout.concurrency`` split across the
    workers). Set it to a worker's own capacity (its sandboxes, its tools' limits) so that more
    workers run more rollouts at once."""
    engine_cpus: float = Field(default=1.0, gt=0)
    """CPUs reserved for each engine replica."""
    engine_gpus: float = Field(default=0.0, ge=0)
    """GPUs for each engine replica (0 on a CPU cluster)."""
    learner_cpus: float = Field(default=1.0, gt=0)
    """CPUs reserved for the learner actor."""
    learner_gpus: float = Field(default=0.0, ge=0)
    """GPUs for the learner actor."""
    max_restarts: int = Field(default=2, ge=0)
    """Restarts of a worker or engine actor that died; its unfinished rollouts run again."""
    rollout_timeout_s: float = Field(default=3600, gt=0)
    """A rollout that has not returned after this long is marked ``infra_failed``."""


class ClusterSpec(Spec):
    """Where a run's parts run besides this process (default: all of it here)."""

    ray: RaySpec | None = None
    """Rollout workers, engine replicas and the learner as Ray actors."""
