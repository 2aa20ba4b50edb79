"""The generation protocol every engine speaks.

Two kinds of engine exist:

* ``TokenEngine`` — token ids in, sampled token ids + their logprobs out. Trainable: the rollout
  loop keeps the exact ids (token in, token out). ``transformers`` and vLLM engines.
* ``ChatEngine`` — chat messages in, an assistant message (with ``tool_calls``) out: any
  OpenAI-compatible server. Evaluation only: no token ids, so nothing to train on.

What only some engines can do is declared by a protocol of its own, which callers test with
``isinstance``: ``ConstrainsSampling`` / ``TakesGrammar`` (constrained sampling), ``SyncsWeights`` (samples from its own
copy of the policy, which ``sync`` updates), ``StampsPolicy`` (says which weights it samples from),
``WritesWeights`` (changes the weights it samples from in place, between two forward passes),
``StreamsTokens`` (hands out tokens as they settle), ``SubmitsTogether`` (takes many calls as one
admission: lockstep rollouts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, Sequence, runtime_checkable

from arft.chat.constraints import Grammar
from arft.errors import ArftError
from arft.records import Frozen, Message, PolicyStamp

if TYPE_CHECKING:
    from arft.config import SamplingSpec


class SamplingParams(Frozen):
    """How to sample one completion. The job's fields come from ``job.sampling`` through
    ``from_spec`` (their defaults and documentation live in ``arft.config.SamplingSpec``); the
    others are set per request."""

    temperature: float
    top_p: float
    top_k: int
    """0 disables top-k."""
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    """Stop strings. Generation ends after the token that completes one; those tokens are kept."""
    stop_unless_followed_by: tuple[str, ...] = ()
    """After a stop string, look a few tokens ahead: if the text that follows (leading whitespace
    aside) starts one of these, the stop is cancelled and generation goes on; otherwise the
    look-ahead tokens are dropped and the completion ends at the stop. Lets a model stopped at
    ``</tool_call>`` still put several calls in one turn (parallel calls)."""
    seed: int | None = None
    parallel_tool_calls: bool = True
    """Whether one assistant turn may hold several tool calls. A chat engine sends it as the
    chat-completions field; a token conversation honours it by stopping at the first call (no
    ``stop_unless_followed_by``)."""
    grammar: Grammar | None = None
    """Constrain the tool calls of this completion (a ``ToolGrammar``: text outside calls stays
    free) or the whole completion as JSON (a ``JsonGrammar``); engines with
    ``supports_constraints``, see ``arft.chat.constraints``."""

    @classmethod
    def from_spec(cls, spec: SamplingSpec, **request: Any) -> SamplingParams:
        """``spec`` (``job.sampling``) as request parameters; ``request`` sets the per-request
        fields (``stop``, ``stop_unless_followed_by``, ``seed``, ``grammar``). ``spec.seed`` is
        not copied: it seeds a run, from which each rollout derives its own."""
        return cls(temperature=spec.temperature, top_p=spec.top_p, top_k=spec.top_k,
                   max_new_tokens=spec.max_new_tokens, **request)


class Generation(Frozen):
    """One sampled completion.

    ``logprobs[i]`` is the log-probability of ``token_ids[i]`` under the distribution it was
    sampled from (logits / temperature, before top-p/top-k truncation), so a trainer that divides
    its logits by the same temperature reproduces it. Where a grammar mask excluded tokens
    (``constrained[i]``), that distribution is the masked one, renormalised over the allowed
    tokens: the honest behaviour-policy logprob (see docs/constrained_tool_calls.md).
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: Literal["eos", "stop", "length"]
    """``eos``: the model emitted an end-of-turn token (kept in ``token_ids``); ``stop``: a stop
    string matched; ``length``: ``max_new_tokens`` reached."""
    constrained: tuple[bool, ...] = ()
    """Per token: sampled under a grammar mask that excluded at least one token. Empty when the
    request had no grammar."""
    closed_calls: int = 0
    """Constrained calls the engine closed by the grammar's shortest completion because
    ``max_new_tokens`` was about to run out (their forced tokens are ``constrained``, logprob 0)."""
    policy: PolicyStamp | None = None
    """The weights that sampled it (version and content hash); None where the engine cannot say
    (an OpenAI-compatible server, a scripted engine, weights never stamped)."""


@runtime_checkable
class TokenEngine(Protocol):
    """Token ids in, token ids + logprobs out. Concurrent calls may be batched together.

    An engine that honours ``SamplingParams.grammar`` is a ``TakesGrammar`` (read with
    ``supports_constraints(engine)``); others ignore grammars.
    """

    tokenizer: Any
    """A Hugging Face tokenizer (encode/decode, chat template)."""

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class ConstrainsSampling(Protocol):
    """An engine that says whether it masks sampling with ``SamplingParams.grammar``: a value,
    not only a type, because a wrapper copies its inner engine's (``supports_constraints``)."""

    supports_constraints: bool


@runtime_checkable
class TakesGrammar(ConstrainsSampling, Protocol):
    """A ``ConstrainsSampling`` engine that also compiles a grammar ahead of the first request."""

    def check_grammar(self, grammar: Grammar) -> None:
        """Compile ``grammar``; raise ``ConstraintError`` for a schema it cannot enforce."""
        ...


@runtime_checkable
class SyncsWeights(Protocol):
    """An engine that samples from its own copy of the policy (vLLM, ``SnapshotEngine``, a Ray
    run's replicas): ``sync`` puts the policy's current weights into it."""

    async def sync(self, policy: Any, step: int) -> float:
        """Load ``policy``'s weights (version ``step``); the seconds it took."""
        ...


@runtime_checkable
class StampsPolicy(Protocol):
    """An engine that says which weights it samples from now (``PolicyStamp``): the trainer
    compares it with what it just trained after every sync (``arft.app.policy``)."""

    async def policy_stamp(self) -> PolicyStamp | None:
        """The stamp of the weights the next completion samples from; None before any was set."""
        ...


@runtime_checkable
class WritesWeights(Protocol):
    """An engine whose model can be changed in place between two forward passes."""

    def write_weights(self, write: Callable[[Any], None]) -> None:
        """Call ``write(model)`` while no forward pass runs."""
        ...


@runtime_checkable
class StreamsTokens(Protocol):
    """An engine that hands out each run of settled token ids as it is sampled (``arft serve``'s
    streamed answers)."""

    supports_streaming: bool

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams,
                       on_tokens: Callable[[tuple[int, ...]], None] | None = None) -> Generation: ...


@dataclass(frozen=True)
class GenerateCall:
    """The arguments of one ``generate`` call, for ``SubmitsTogether``."""

    prompt_ids: Sequence[int]
    params: SamplingParams


@runtime_checkable
class SubmitsTogether(Protocol):
    """An engine that takes several calls as one admission: none of them runs before all are in,
    so its passes depend on the calls, not on when each arrived (``arft.rollout.lockstep``)."""

    def submit_together(self, calls: Sequence[GenerateCall]) -> list[asyncio.Future[Generation]]:
        """Queue every call at once, in order; a future per call, in the same order."""
        ...


def supports_constraints(engine: object) -> bool:
    """Whether ``engine`` masks sampling with ``SamplingParams.grammar``."""
    return isinstance(engine, ConstrainsSampling) and engine.supports_constraints is True


class ChatReply(Frozen):
    """An assistant message from a chat-level engine."""

    message: Message
    finish_reason: str
    completion_tokens: int = 0
    prompt_tokens: int = 0


@runtime_checkable
class ChatEngine(Protocol):
    """Chat messages in, one assistant message out (OpenAI-compatible servers)."""

    async def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        tool_choice: str | dict[str, Any] | None,
        params: SamplingParams,
    ) -> ChatReply: ...

    async def aclose(self) -> None: ...


class EngineError(ArftError):
    """The engine could not produce a completion (after its own retries): infrastructure failure."""
