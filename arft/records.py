"""Plain frozen records shared by every layer.

Each record is a pydantic model that round-trips through JSON unchanged
(``Record.model_validate_json(r.model_dump_json()) == r``). Nothing here imports torch,
an engine, a tool or a grader: records are the bottom layer.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Frozen(BaseModel):
    """Base for immutable records: extra keys are errors, instances are hashable-free values."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def json_object(value: object) -> Mapping[str, object]:
    """``value`` if it is a JSON object, else an empty one: how a reader walks JSON that a user (or a
    model) may have shaped differently, e.g. a message inside a grader's ``sample``."""
    return value if isinstance(value, Mapping) else {}


def json_list(value: object) -> Sequence[object]:
    """``value`` if it is a JSON array, else an empty one (see ``json_object``)."""
    return value if isinstance(value, list | tuple) else ()


def new_trace_id() -> str:
    """A fresh rollout id in the hosted format: ``trace_<uuid4 hex>``."""
    return "trace_" + uuid.uuid4().hex


class FunctionCall(Frozen):
    """The function part of a chat-completions tool call."""

    name: str
    arguments: str = "{}"
    """JSON-encoded arguments, exactly as the model produced them (after parsing to JSON)."""


class ToolCall(Frozen):
    """One tool call in chat-completions shape: ``{"id", "type": "function", "function"}``."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Frozen):
    """A chat message. ``tool_calls`` only on assistant messages, ``tool_call_id`` on tool ones."""

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The message as a chat-completions dict (no ``None`` fields)."""
        return self.model_dump(mode="json", exclude_none=True)


class Task(Frozen):
    """One dataset row: the prompt messages, the tools it may use, and the item graders read."""

    id: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] | None = None
    """Completions-format function schemas; when set, limits which job tools this task may call."""
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    """False: at most one tool call per assistant turn (as the chat-completions parameter);
    ``None``: the job's ``rollout.parallel_tool_calls``."""
    item: dict[str, Any] = Field(default_factory=dict)
    """Every other key of the row; graders read it as ``{{item.key}}``."""
    hint: str | None = None
    """Privileged text (``training.rescue``) appended to the last user message of the prompt the
    policy sees. Never in a rollout's messages: graders do not read it."""

    @property
    def prompt_messages(self) -> tuple[Message, ...]:
        """The messages the policy's prompt renders: ``messages``, the hint at the end of the last
        user message (a user message of its own when there is none)."""
        if self.hint is None:
            return self.messages
        messages = list(self.messages)
        last = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
        if last is None:
            return (*messages, Message(role="user", content=self.hint))
        m = messages[last]
        messages[last] = m.model_copy(update={"content": f"{m.content or ''}\n\n{self.hint}".strip()})
        return tuple(messages)


ToolStatus = Literal["ok", "tool_error", "parse_error", "refused", "infra_error"]


class ToolCallRecord(Frozen):
    """What happened when one tool call ran (or could not run)."""

    trace_id: str
    call_id: str
    name: str
    arguments: str
    output: str
    """The text the model sees as the tool's answer (an error message when it failed)."""
    status: ToolStatus = "ok"
    error: str | None = None
    """Why it failed, for the metrics; ``None`` when ``status == "ok"``."""
    http_status: int | None = None
    latency_s: float = 0.0
    turn: int = 0


class Score(Frozen):
    """A grader's verdict on one rollout. ``error`` is set whenever the score is not a real grade."""

    score: float
    sub_scores: dict[str, float] = Field(default_factory=dict)
    passed: bool | None = None
    error: str | None = None
    flags: tuple[str, ...] = ()
    latency_s: float = 0.0
    grader: str = ""


RolloutStatus = Literal["ok", "truncated", "infra_failed", "error"]
FinishReason = Literal[
    "answer",  # the model ended its turn without a tool call
    "max_episode_steps",  # the tool-call budget ended the rollout
    "max_turns",
    "max_tokens",  # the context/token budget ran out
    "timeout",  # wall-clock limit
    "infra_failed",  # a tool or the engine failed beyond retries
    "error",  # a bug or unexpected exception; see Rollout.error
]


class Timings(Frozen):
    """Seconds spent in each phase of a rollout (summed over turns)."""

    generate_s: float = 0.0
    tools_s: float = 0.0
    grade_s: float = 0.0
    total_s: float = 0.0


class PolicyStamp(Frozen):
    """Which weights sampled a completion: the training step they come from and a short content hash
    (``arft.models.weights_hash``: the adapter under LoRA, every weight of a full fine-tune). The
    proof that what an engine serves is what the trainer trained (docs/weights.md)."""

    version: int
    """The training step whose update produced these weights; 0 = the weights the run started from."""
    hash: str
    """The first 16 hex digits of a sha256 over the trainable tensors in name order."""


class TokenSegment(Frozen):
    """Exact tokens of one part of a trajectory that was not append-only: an agent program that
    rewrote its history (summarised, dropped messages) starts a new segment (docs/agents.md).
    Each segment trains as its own sequence with the rollout's advantage."""

    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]


class Rollout(Frozen):
    """One traced multi-turn episode of one task.

    ``token_ids``/``loss_mask``/``logprobs`` are aligned and cover the whole episode, prompt
    included: ``loss_mask[i] == 1`` exactly where token ``i`` was sampled by the engine, and
    ``logprobs[i]`` is its sampling logprob (0.0 where the mask is 0). They are empty for engines
    that do not expose tokens (the ``openai`` engine): such rollouts are for evaluation only.
    """

    trace_id: str
    task_id: str
    sample_index: int = 0
    run_id: str = ""
    step: int | None = None
    """The training step it belongs to: the step it trained (train rollouts, 1-based) or the step
    whose policy it evaluated (eval rollouts, 0 = the untrained baseline); None outside training."""
    messages: tuple[Message, ...]
    tool_calls: tuple[ToolCallRecord, ...] = ()
    token_ids: tuple[int, ...] = ()
    loss_mask: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    prompt_len: int = 0
    constrained_mask: tuple[int, ...] = ()
    """Aligned with ``token_ids``: 1 where the token was sampled under a tool-call grammar mask
    that excluded tokens (its ``logprobs`` entry is then the masked, renormalised logprob); empty
    when no turn was constrained."""
    constrained_calls: int = 0
    """Tool calls written under a tool-call grammar (valid by construction)."""
    closed_calls: int = 0
    """Of those, calls the engine closed by the grammar's shortest completion because the turn's
    ``max_new_tokens`` was about to run out (``Generation.closed_calls``)."""
    policy: PolicyStamp | None = None
    """The weights that sampled the rollout's last turn; None for engines that cannot say (the
    ``openai`` engine) and for rollouts recorded before stamps existed."""
    segments: tuple[TokenSegment, ...] = ()
    """The earlier segments of a trajectory whose history was rewritten (an agent program through
    the gateway); ``token_ids`` etc. are the last segment. Empty for append-only trajectories."""
    rescued: Literal["tis", "none", "explore"] | None = None
    """Put in a stuck group by ``training.rescue``. ``tis``/``none``: sampled with a privileged
    hint (``Task.hint``, never in ``messages``) and recorded as if sampled without it (``token_ids``
    start with the prompt without the hint); the value is how its recorded logprobs are weighted in
    the loss (``RescueSpec.correction``). ``explore``: sampled at ``explore_temperature``, its
    logprobs those of that distribution. None: an ordinary rollout."""
    output: str | None = None
    """An agent program's final output, as it returned it (JSON text for a JSON value); None for
    arft's own loop, whose output is its last assistant message (``output_text``)."""
    n_turns: int = 0
    parse_errors: int = 0
    finish_reason: FinishReason = "answer"
    status: RolloutStatus = "ok"
    error: str | None = None
    timings: Timings = Field(default_factory=Timings)
    score: Score | None = None
    item: dict[str, Any] = Field(default_factory=dict)

    @property
    def output_text(self) -> str:
        """An agent program's final output, else the content of the last assistant message ('' when
        there is none)."""
        if self.output is not None:
            return self.output
        for m in reversed(self.messages):
            if m.role == "assistant":
                return m.content or ""
        return ""

    @property
    def reward(self) -> float | None:
        """The rollout's real grade, or ``None`` when it was not graded (an infrastructure
        failure), or its grader failed. A grader error leaves a placeholder score that must never
        be read as a reward of 0 (DESIGN rule 4)."""
        if self.status == "infra_failed" or self.score is None or self.score.error is not None:
            return None
        return self.score.score

    @property
    def hinted(self) -> bool:
        """Sampled with a privileged hint by ``training.rescue`` (``rescued`` is ``tis`` or
        ``none``); an ``explore`` rollout was sampled without one, on-policy but hotter."""
        return self.rescued in ("tis", "none")

    @property
    def model_calls(self) -> tuple[ToolCallRecord, ...]:
        """The tool calls the model made: every record but unparseable ones (parse errors)."""
        return tuple(c for c in self.tool_calls if c.status != "parse_error")

    @property
    def n_sampled_tokens(self) -> int:
        return sum(self.loss_mask) + sum(sum(s.loss_mask) for s in self.segments)

    @property
    def token_segments(self) -> tuple[TokenSegment, ...]:
        """Every segment of exact tokens, earlier ones first, this rollout's own last (empty when
        the engine exposed no tokens)."""
        if not self.token_ids:
            return self.segments
        return (*self.segments, TokenSegment(token_ids=self.token_ids, loss_mask=self.loss_mask,
                                             logprobs=self.logprobs))


class TrainBatch(Frozen):
    """What the trainer sees: token ids, masks, old logprobs and advantages — nothing else."""

    input_ids: tuple[tuple[int, ...], ...]
    loss_mask: tuple[tuple[int, ...], ...]
    old_logprobs: tuple[tuple[float, ...], ...]
    advantages: tuple[float, ...]
    trace_ids: tuple[str, ...]
    behaviour_known: tuple[bool, ...] = ()
    """Per sequence: its recorded logprobs are those of the distribution that sampled it, and the
    loss reweights by them (truncated importance sampling). False: treat it as sampled by the
    trainer's policy (a rescued rollout with ``correction: none``). Empty: all True."""
