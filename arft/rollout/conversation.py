"""One conversation with an engine, as the rollout loop sees it.

Two kinds, one small interface (``assistant_turn`` / ``add_tool_results``):

* ``TokenConversation`` keeps the exact token ids: the prompt is rendered once, every sampled id
  is appended with mask 1 and its logprob, and tool results are *appended* as rendered tokens
  with mask 0 (token in, token out — nothing is ever decoded and re-tokenized). With
  ``constrain`` (or a ``"strict": true`` tool) every turn's tool calls are sampled under the
  row's tool-call grammar, on engines that support it; the positions the mask limited are kept
  in ``constrained_mask``.
* ``ChatConversation`` talks to a chat-level engine (OpenAI-compatible servers): messages in,
  message out, no token ids (evaluation only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Sequence

from arft.engines.base import ChatEngine, SamplingParams, TokenEngine, supports_constraints
from arft.seeds import turn_seed
from arft.records import Message, PolicyStamp


TurnFinish = Literal["eos", "stop", "length", "context"]
"""How a turn ended: ``eos`` | ``stop`` | ``length`` (cut by max_new_tokens) | ``context`` (no room left)."""


@dataclass
class AssistantTurn:
    """What one assistant turn produced."""

    message: Message
    parse_errors: list[str]
    finish: TurnFinish
    input_tokens: int = 0
    """Tokens of the prompt the turn sampled after (the whole conversation so far)."""
    output_tokens: int = 0
    """Tokens the turn sampled."""


class Conversation(Protocol):
    """What the rollout loop needs of a conversation: start it, take turns, read its tokens."""

    def start(self, messages: Sequence[Message], tools: Sequence[dict[str, object]]) -> None:
        """Open the conversation on the task's messages with the tools this row may call."""
        ...

    async def assistant_turn(self) -> AssistantTurn: ...

    def add_tool_results(self, messages: Sequence[Message]) -> bool:
        """Append tool results; False when they do not fit in the token budget."""
        ...

    def token_fields(self) -> dict[str, Any]:
        """The ``Rollout`` fields of the exact tokens (ids, loss mask, logprobs, constrained
        positions); empty when the engine exposes no tokens."""
        ...


def _first_turn_choice(tool_choice: str | dict[str, object] | None) -> tuple[Any, Any]:
    """(choice for the first turn, choice for later turns).

    ``required`` and a named tool force a call on the first turn only; forcing every turn would
    leave the model no way to answer. ``none`` and ``auto`` hold for the whole rollout.
    """
    if tool_choice in (None, "auto", "none"):
        return tool_choice, tool_choice
    return tool_choice, "auto"


@dataclass
class TokenConversation:
    """A token-level conversation over a ``TokenEngine`` and a ``ChatFormat``."""

    engine: TokenEngine
    fmt: Any  # arft.chat.formats.ChatFormat (kept untyped to keep this module import-light)
    params: SamplingParams
    max_tokens: int
    tool_choice: str | dict[str, Any] | None = "auto"
    seed: int | None = None
    """Base seed of this rollout's sampling (turn t samples with ``seed + t``); None = random."""
    constrain: bool = False
    """Hold every tool call to its tool's schema (``rollout.constrained_tool_calls``); without
    it only ``"strict": true`` tools are held to theirs. Ignored by engines without support."""
    schema_keywords: str = "strict"
    """``strict`` | ``lenient``: a schema keyword the grammar cannot enforce is an error, or is
    left out of the grammar with a warning (``rollout.schema_keywords``, resolved per task)."""
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    constrained_mask: list[int] = field(default_factory=list)
    constrained_calls: int = 0
    """Tool calls parsed from turns sampled under the grammar."""
    closed_calls: int = 0
    """Calls the engine closed for the budget (``Generation.closed_calls``)."""
    prompt_len: int = 0
    policy: PolicyStamp | None = None
    """The stamp of the weights that sampled the latest turn (the rollout's ``policy``)."""
    _grammar: Any = None
    _prefill: str = ""
    _choice: Any = None
    _later_choice: Any = None
    _ended_with_eos: bool = False
    _turns: int = 0

    def start(self, messages: Sequence[Message], tools: Sequence[dict[str, object]]) -> None:
        """Render the prompt (and a forced prefill, for ``required`` / a named tool)."""
        self._choice, self._later_choice = _first_turn_choice(self.tool_choice)
        if self.tool_choice != "none" and supports_constraints(self.engine):
            self._grammar = self.fmt.tool_grammar(tools, self.constrain, self.schema_keywords)
        rendered = self.fmt.render_prompt(messages, tools, self._choice)
        self._append(rendered.ids, sampled=False)
        self._prefill = rendered.prefill
        self.prompt_len = len(self.token_ids)

    @property
    def prefill(self) -> str:
        """Text that ends the ids so far but belongs to the coming assistant turn (a forced call's
        opening): the turn's full text is this plus what is sampled."""
        return self._prefill

    def token_fields(self) -> dict[str, Any]:
        return dict(token_ids=tuple(self.token_ids), loss_mask=tuple(self.loss_mask),
                    logprobs=tuple(self.logprobs), prompt_len=self.prompt_len,
                    constrained_mask=tuple(self.constrained_mask) if any(self.constrained_mask) else (),
                    constrained_calls=self.constrained_calls, closed_calls=self.closed_calls,
                    policy=self.policy)

    def _append(self, ids: Sequence[int], sampled: bool, logprobs: Sequence[float] = (),
                constrained: Sequence[bool] = ()) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([1 if sampled else 0] * len(ids))
        self.logprobs.extend(logprobs if sampled else [0.0] * len(ids))
        self.constrained_mask.extend([int(c) for c in constrained] or [0] * len(ids))

    async def assistant_turn(self) -> AssistantTurn:
        room = self.max_tokens - len(self.token_ids)
        if room <= 0:
            return AssistantTurn(Message(role="assistant", content=""), [], "context")
        params = self.params.model_copy(update={
            "seed": None if self.seed is None else turn_seed(self.seed, self._turns),
            "max_new_tokens": min(self.params.max_new_tokens, room),
            **self.fmt.turn_stops(self.params.stop, self.params.parallel_tool_calls),
            "grammar": None if self._grammar is None else self._grammar.with_prefill(self._prefill),
        })
        n_prompt = len(self.token_ids)
        gen = await self.engine.generate(self.token_ids, params)
        self._turns += 1
        self.policy = gen.policy
        self._append(gen.token_ids, sampled=True, logprobs=gen.logprobs, constrained=gen.constrained)
        self._ended_with_eos = gen.finish_reason == "eos"
        self.closed_calls += gen.closed_calls
        parsed = self.fmt.parse(self._prefill, gen.text, self._choice)
        if self._grammar is not None:
            self.constrained_calls += len(parsed.tool_calls)
        message = Message(role="assistant", content=parsed.content,
                          tool_calls=tuple(parsed.tool_calls) or None)
        finish: TurnFinish = gen.finish_reason
        if finish == "length" and len(self.token_ids) >= self.max_tokens:
            finish = "context"
        return AssistantTurn(message, list(parsed.errors), finish, n_prompt, len(gen.token_ids))

    def add_tool_results(self, messages: Sequence[Message]) -> bool:
        self._choice = self._later_choice
        rendered = self.fmt.continuation_ids(self._ended_with_eos, messages, self._choice)
        if len(self.token_ids) + len(rendered.ids) >= self.max_tokens:
            return False
        self._append(rendered.ids, sampled=False)
        self._prefill = rendered.prefill
        return True


@dataclass
class ChatConversation:
    """A message-level conversation over a ``ChatEngine`` (no token ids: evaluation only)."""

    engine: ChatEngine
    params: SamplingParams
    max_tokens: int
    tool_choice: str | dict[str, Any] | None = "auto"
    seed: int | None = None
    """Base seed of this rollout's requests (turn t asks for ``seed + t``, for servers that honour
    a seed); None = none sent."""
    messages: list[Message] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    tokens_used: int = 0
    _choice: Any = None
    _later_choice: Any = None
    _turns: int = 0

    def start(self, messages: Sequence[Message], tools: Sequence[dict[str, object]]) -> None:
        self.messages = list(messages)
        self.tools = list(tools)
        self._choice, self._later_choice = _first_turn_choice(self.tool_choice)

    async def assistant_turn(self) -> AssistantTurn:
        if self.tokens_used >= self.max_tokens:
            return AssistantTurn(Message(role="assistant", content=""), [], "context")
        params = self.params.model_copy(update={
            "seed": None if self.seed is None else turn_seed(self.seed, self._turns)})
        reply = await self.engine.chat(self.messages, self.tools, self._choice if self.tools else None,
                                       params)
        self._turns += 1
        self.tokens_used = reply.prompt_tokens + reply.completion_tokens
        self.messages.append(reply.message)
        finishes: dict[str, TurnFinish] = {"stop": "eos", "tool_calls": "stop", "length": "length"}
        finish = finishes.get(reply.finish_reason, "eos")
        return AssistantTurn(reply.message, [], finish, reply.prompt_tokens, reply.completion_tokens)

    def add_tool_results(self, messages: Sequence[Message]) -> bool:
        self._choice = self._later_choice
        self.messages.extend(messages)
        return True

    def token_fields(self) -> dict[str, Any]:
        return {}
