"""The requests and rows of ``TransformersEngine``: one ``generate`` call (``Request``), its
decoding state inside the batch (``Row``), and the rules that end a row (``FinishRules``: eos,
stop strings with a short look-ahead for continuation strings, length).

torch is imported lazily, inside the functions that need it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from arft.engines.base import Generation, SamplingParams
from arft.engines.call_closing import CallCloser, ClosingState
from arft.engines.grammar import ToolCallMasker
from arft.engines.transformers.sampling import RowSampling

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    import torch

LOOK_AHEAD_TOKENS = 8
"""Most tokens sampled after a stop string to see whether a continuation string follows."""


def checked_prompt(prompt_ids: Sequence[int], vocab_size: int) -> list[int]:
    """``prompt_ids`` as a list of ints; ``ValueError`` for an empty prompt or an id outside the vocabulary."""
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise ValueError("generate() needs at least one prompt token: render the chat first")
    bad = [t for t in prompt if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"prompt token ids {bad[:5]} are outside the model's vocabulary "
                         f"(size {vocab_size}): encode with this engine's tokenizer")
    return prompt


@dataclass
class Request:
    """One ``generate`` call: its prompt, params and the future its caller awaits."""

    prompt: list[int]
    params: SamplingParams
    future: asyncio.Future[Generation]
    loop: asyncio.AbstractEventLoop
    matcher: Any = None
    """The grammar matcher of a constrained request (advanced through its prefill)."""
    on_tokens: Callable[[tuple[int, ...]], None] | None = None
    """Streaming: called on the caller's event loop with each run of newly settled token ids."""
    delivered: bool = False

    def stream(self, tokens: tuple[int, ...]) -> None:
        """Hand newly settled tokens to ``on_tokens`` (safe from any thread; they arrive before
        the result, in order)."""
        if self.on_tokens is None or self.delivered or not tokens:
            return
        try:
            self.loop.call_soon_threadsafe(self.on_tokens, tokens)
        except RuntimeError:
            pass  # the caller's event loop is closed

    def deliver(self, outcome: Generation | BaseException) -> None:
        """Hand a result to the waiting caller, once (safe from any thread)."""
        if self.delivered:
            return
        self.delivered = True
        try:
            self.loop.call_soon_threadsafe(_settle, self.future, outcome)
        except RuntimeError:
            pass  # the caller's event loop is closed: nobody is waiting any more


@dataclass
class Row:
    """One request's decoding state inside the worker thread."""

    request: Request
    sampling: RowSampling
    generator: "torch.Generator | None"
    stop_window: int
    """How many trailing tokens to decode when looking for stop strings."""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    constrained: list[bool] = field(default_factory=list)
    finish: str | None = None
    scan_from: int = 0
    """Stop strings are looked for only in tokens from here on (after a cancelled stop)."""
    stop_at: int | None = None
    """While looking ahead after a stop: the number of tokens up to and including the stop."""
    streamed: int = 0
    """Tokens already handed to the request's ``on_tokens``."""
    closing: ClosingState = field(default_factory=ClosingState)
    """A call being closed before the budget runs out, and how many were."""

    def stream_settled(self) -> None:
        """Stream the tokens no look-ahead can take back: all of them, or up to a pending stop."""
        settled = len(self.tokens) if self.stop_at is None else self.stop_at
        if settled > self.streamed:
            self.request.stream(tuple(self.tokens[self.streamed:settled]))
            self.streamed = settled

    @property
    def next_position(self) -> int:
        """Position id of the last sampled token, which the next decode step feeds in."""
        return len(self.request.prompt) + len(self.tokens) - 1


def new_row(request: Request, device: "torch.device") -> Row:
    """The decoding state of a request that joins the batch (its own generator when seeded)."""
    import torch

    p = request.params
    generator = None
    if p.seed is not None and p.temperature > 0:
        generator = torch.Generator(device=device).manual_seed(p.seed)
    # Every token decodes to at least one byte, and a character is at most 4 bytes.
    window = 4 * max((len(s) for s in p.stop), default=0) + 4
    return Row(request, RowSampling(p.temperature, p.top_p, p.top_k), generator, window)


class FinishRules:
    """Whether a row is finished after its newest token: ``eos``, ``stop`` (a stop string, unless
    it sits inside a constrained call's arguments or a continuation string follows it),
    ``length``, or ``None`` to go on. Called once per sampled token."""

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", eos_ids: frozenset[int], masker: ToolCallMasker,
                 closer: CallCloser | None = None) -> None:
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.masker = masker
        self.closer = closer

    def finish_reason(self, row: Row) -> str | None:
        """The reason the row ends after its newest token, or None (see the class docstring)."""
        params = row.request.params
        if row.stop_at is not None:
            return self._look_ahead(row)
        if row.tokens[-1] in self.eos_ids:
            return "eos"
        if params.stop:
            # Checked after every token, so a match in the tail was completed by the newest token.
            start = max(row.scan_from, len(row.tokens) - row.stop_window)
            tail = self.tokenizer.decode(row.tokens[start:], skip_special_tokens=False)
            if any(s and s in tail for s in params.stop):
                matcher = row.request.matcher
                if matcher is not None and self.masker.in_call(matcher):
                    return None  # the stop string is part of an argument's value
                # A call closed for the budget leaves no room for another: end at its close.
                if params.stop_unless_followed_by and len(row.tokens) < params.max_new_tokens \
                        and not row.closing.closed_last:
                    row.stop_at = len(row.tokens)
                    return None
                return "stop"
        if len(row.tokens) >= params.max_new_tokens:
            return "length"
        return None

    def _fits(self, row: Row) -> bool:
        """Whether the call the look-ahead opened can still close within the budget (its
        shortest completion fits); one that cannot is dropped with the look-ahead, so the turn
        ends at the previous call's close instead of inside this one."""
        matcher = row.request.matcher
        if self.closer is None or not self.closer.enabled or matcher is None:
            return True
        tokens = self.closer.completion_tokens(matcher)
        return tokens is not None and len(tokens) <= row.request.params.max_new_tokens - len(row.tokens)

    def _look_ahead(self, row: Row) -> str | None:
        """After a stop: go on if a continuation string follows, else end at the stop."""
        assert row.stop_at is not None
        follow = row.request.params.stop_unless_followed_by
        ahead = str(self.tokenizer.decode(row.tokens[row.stop_at:], skip_special_tokens=False)).lstrip()
        if row.tokens[-1] not in self.eos_ids:
            opened = any(ahead.startswith(f) for f in follow)
            if opened and self._fits(row):  # e.g. a second <tool_call>: carry on
                row.stop_at, row.scan_from = None, len(row.tokens)
                return self.finish_reason(row)
            if opened:  # a call that cannot close in time: dropped with the look-ahead below
                row.closing.dropped += 1
            undecided = not opened and any(f.startswith(ahead) for f in follow)
            if undecided and len(row.tokens) - row.stop_at < LOOK_AHEAD_TOKENS \
                    and len(row.tokens) < row.request.params.max_new_tokens:
                return None
        # The look-ahead tokens were never part of the completion: drop them.
        del row.tokens[row.stop_at:], row.logprobs[row.stop_at:], row.constrained[row.stop_at:]
        return "stop"


def generation(row: Row, tokenizer: "PreTrainedTokenizerBase") -> Generation:
    """The finished row as the caller's ``Generation``."""
    text = tokenizer.decode(row.tokens, skip_special_tokens=False)
    return Generation(token_ids=tuple(row.tokens), logprobs=tuple(row.logprobs), text=text,
                      finish_reason=row.finish,
                      constrained=tuple(row.constrained), closed_calls=row.closing.calls)


def _settle(future: asyncio.Future[Generation], outcome: Generation | BaseException) -> None:
    if future.done():  # cancelled by its caller, or already failed
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
