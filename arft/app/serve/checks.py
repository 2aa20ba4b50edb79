"""Checks of a chat request against the served model, made before any model work.

* **The context window**: a prompt longer than the model's context (``context_window``: the
  model config's ``max_position_embeddings``, or the vLLM server's ``max_model_len``) is a 400 that
  gives both numbers. A huge prompt is refused before it is tokenized: every word (run of
  non-space characters) is at least one token, and no token is longer than the vocabulary's
  longest, so either count over the context already settles it (``check_prompt_size``). A prompt
  that fits is tokenized by the caller (off the event loop) and measured exactly
  (``fit_context``): an explicit ``max_tokens`` that does not fit beside it is a 400 too, the
  server's default is clamped to what is left.
* **Tool results**: a ``tool`` message must answer a call of an earlier assistant message, as the
  OpenAI API requires (``check_tool_results``).
* **Messages a server user can act on** (``for_server``): a constraint error names the server's
  option (``arft serve --no-constrain``), not the training setting.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from arft.errors import ArftError
from arft.records import Message

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class ChatRequestError(ArftError):
    """A request arft cannot serve: HTTP 400 (or ``status``) with the field named in ``param``."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


def context_window(engine: object) -> int | None:
    """The most tokens (prompt and reply) ``engine``'s model attends to, where it says; None when
    unknown (a scripted engine, a vLLM server arft did not start): then nothing is checked."""
    # Read, not declared: the engines predate this check, and each knows it in its own place.
    config = getattr(getattr(engine, "model", None), "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        return positions
    length = getattr(getattr(engine, "server", None), "max_model_len", None)
    return length if isinstance(length, int) and length > 0 else None


def longest_token(tokenizer: "PreTrainedTokenizerBase") -> int:
    """Characters in the vocabulary's longest token (byte-level tokens spell one character per
    byte, so a token never decodes to more characters than this)."""
    return max(max((len(t) for t in tokenizer.get_vocab()), default=1), 1)


def check_prompt_size(raw_messages: Sequence[Any], context: int | None,
                      tokenizer: "PreTrainedTokenizerBase") -> None:
    """Refuse messages that cannot fit ``context`` tokens whatever their tokenization: more words
    than the context, or more characters than ``context`` tokens of the longest kind."""
    if context is None:
        return
    words = chars = 0
    for text in _strings(raw_messages):
        words += len(text.split())
        chars += len(text)
    least = words
    if chars > context and words <= context:  # only a prompt this long needs the vocabulary's look
        least = max(words, -(-chars // longest_token(tokenizer)))
    if least > context:
        raise ChatRequestError(
            f"the prompt is at least {least:,} tokens ({words:,} words, {chars:,} characters); this "
            f"model's context is {context:,} tokens: shorten the messages", "messages",
            code="context_length_exceeded")


def fit_context(prompt_tokens: int, context: int | None, asked: int | None, default: int) -> int:
    """The reply's token budget beside a prompt of ``prompt_tokens``: ``asked`` (the request's
    ``max_tokens``; a 400 when it does not fit) or ``default`` clamped to the room left."""
    if context is None:
        return asked or default
    if prompt_tokens >= context:
        raise ChatRequestError(f"the prompt is {prompt_tokens:,} tokens; this model's context is "
                               f"{context:,} tokens: shorten the messages (or the tools)", "messages",
                               code="context_length_exceeded")
    room = context - prompt_tokens
    if asked is not None and asked > room:
        raise ChatRequestError(f"the prompt is {prompt_tokens:,} tokens and max_tokens asks for {asked:,} "
                               f"more; this model's context is {context:,} tokens: ask for at most "
                               f"{room:,}", "max_tokens", code="context_length_exceeded")
    return asked or min(default, room)


def check_tool_results(messages: Sequence[Message]) -> None:
    """Refuse a ``tool`` message whose ``tool_call_id`` no earlier assistant call has."""
    called: set[str] = set()
    for i, m in enumerate(messages):
        if m.role == "assistant":
            called.update(c.id for c in m.tool_calls or ())
        elif m.role == "tool" and m.tool_call_id not in called:
            raise ChatRequestError(f"messages[{i}]: a 'tool' message must answer a tool call of an earlier "
                                   f"assistant message; no call has the id {m.tool_call_id!r}", f"messages[{i}]")


_TRAINING_HINTS = (
    (re.compile(r"turn constraints off for this job \(rollout\.constrained_tool_calls: false\)"),
     "start arft serve with --no-constrain"),
    (re.compile(r"set rollout\.constrained_tool_calls: false"), "start arft serve with --no-constrain"),
)
_SOURCE_PLACE = re.compile(r"(\[\d\d:\d\d:\d\d\] )?/?[\w./-]+\.(cc|cpp|h|hpp):\d+: ?")


def for_server(message: str) -> str:
    """A constraint error's message as a server user needs it: no C++ source places, and the
    server's option where the job's setting was named."""
    message = _SOURCE_PLACE.sub("", message)
    for pattern, option in _TRAINING_HINTS:
        message = pattern.sub(option, message)
    return message


_UNRENDERED = frozenset({"id", "type", "tool_call_id", "role"})
"""Message keys whose values a chat template may leave out of the prompt: not counted."""


def _strings(value: object) -> Iterator[str]:
    """Every string inside ``value`` (message contents, parts, call names and arguments)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in _UNRENDERED:
                yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)
