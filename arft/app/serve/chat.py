"""OpenAI chat completions over a token engine: one request in, one assistant message out.

``ChatRequest`` is the request body of ``POST /v1/chat/completions`` (the fields arft honours;
any other field is refused by name rather than silently ignored, except the bookkeeping fields
listed in ``IGNORED``). A request is turned into the same things a rollout uses:

* the prompt: ``ChatFormat.render_prompt`` of the messages, the tools and ``tool_choice`` (with
  the prefilled start of a forced call), so a tuned agent sees exactly the prompt it was trained
  on;
* the sampling: ``SamplingParams`` with the chat format's stop at a call's close, parallel calls
  unless ``parallel_tool_calls`` is false, and the tool-call grammar when the served model is
  constrained (``ServedModel.constrain``) or a tool is ``"strict": true``;
* the reply: ``ChatFormat.parse`` splits the sampled text into content and ``tool_calls``.

A reply cut by ``max_tokens`` keeps its complete calls as ``tool_calls`` and drops the call it
was writing (its text is not returned as content), with ``finish_reason`` ``length``. Any other
turn whose call block could not be parsed is returned as plain content, exactly as written, with
no ``tool_calls``: nothing is repaired. A prompt over the model's context, a ``tool`` message that
answers no call, and fields arft cannot honour are refused before any model work
(``arft.app.serve.checks``).
``stream_chunks`` yields the same reply as ``chat.completion.chunk`` objects (``StreamSplitter``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

from pydantic import BaseModel, ConfigDict, Field

from arft.app.serve.checks import (ChatRequestError, check_prompt_size, check_tool_results, context_window,
                                   fit_context, for_server)
from arft.app.serve.stream import StreamSplitter
from arft.data.dataset import RowError, parse_messages, parse_tools
from arft.engines.base import (Generation, SamplingParams, StreamsTokens, TakesGrammar, TokenEngine,
                               supports_constraints)
from arft.chat.formats import ChatFormat, Rendered
from arft.chat.constraints import ConstraintError, Grammar, JsonGrammar, check_schema
from arft.chat.tool_prompt import ChatFormatError, parse_tool_choice
from arft.chat.toolcalls import END_OF_TURN_MARKERS, TOOL_CALL_OPEN, ParsedTurn, strip_end_of_turn
from arft.app.serve.fingerprint import fingerprint, stamp_of
from arft.errors import ArftError
from arft.records import Message
from arft.seeds import choice_seed

IGNORED = frozenset({"user", "metadata", "store", "service_tier", "prompt_cache_key",
                     "safety_identifier", "stream_options", "reasoning_effort", "verbosity"})
"""Request fields that change nothing here (bookkeeping, or effort for reasoning models)."""
_NEUTRAL = {"frequency_penalty": 0, "presence_penalty": 0, "logit_bias": None}
"""Fields arft cannot honour: accepted only at their neutral value."""
_MESSAGE_NOISE = ("refusal", "annotations", "audio", "function_call", "reasoning_content")
"""Keys an OpenAI client sends back on assistant messages it got from a server (mostly null)."""


__all__ = ["ChatRequest", "ChatRequestError", "Prepared", "ServedModel", "StreamSplitter", "complete",
           "prepare", "reply_message", "stream_chunks"]


# ValueError too: what `arft serve` cannot serve was a ValueError to served_models' callers before
# this class existed, and its tests still catch it so.
class ServeError(ArftError, ValueError):
    """What ``arft serve`` was asked to serve cannot be served (an engine it cannot serve with, a
    tuned model named like its base, a full fine-tune's base beside it under vLLM); the message
    says what to change."""


class ChatRequest(BaseModel):
    """The body of ``POST /v1/chat/completions`` (chat-completions fields arft honours)."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[Any]
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def check_fields(self) -> None:
        """Refuse fields arft would otherwise ignore (``ChatRequestError`` naming the field)."""
        for key, value in (self.model_extra or {}).items():
            if key in IGNORED:
                continue
            if key in _NEUTRAL:
                if value in (_NEUTRAL[key], None, {}):
                    continue
                raise ChatRequestError(f"'{key}' is not supported by arft serve; leave it out", key)
            raise ChatRequestError(f"unrecognized request argument supplied: {key}", key)
        if self.stream and self.n > 1:
            raise ChatRequestError("n > 1 cannot be streamed here: send n requests, or stream: false", "n")
        if self.top_logprobs:  # the engines return the sampled token's logprob, not the alternatives
            raise ChatRequestError("top_logprobs above 0 is not supported by arft serve: the engine gives "
                                   "the logprob of each sampled token only; send 0 or leave it out", "top_logprobs")
        if self.stream and self.logprobs:
            raise ChatRequestError("logprobs cannot be streamed by arft serve: send stream: false to get "
                                   "them", "logprobs")


@dataclass
class ServedModel:
    """One model name the server answers to: a token engine and the chat format it was trained in."""

    name: str
    engine: TokenEngine
    fmt: ChatFormat
    constrain: bool = True
    """Hold every tool call to its tool's schema (as the rollouts that trained it were); without
    it only ``"strict": true`` tools are."""
    max_tokens: int = 1024
    """Default and ceiling of ``max_tokens`` per reply."""
    created: int = field(default_factory=lambda: int(time.time()))
    context: int | None = None
    """Most tokens of prompt and reply together (default: what the engine's model says,
    ``checks.context_window``; None there: not checked)."""

    def __post_init__(self) -> None:
        self.context = self.context or context_window(self.engine)


@dataclass
class Prepared:
    """A request as the engine sees it."""

    rendered: Rendered
    params: SamplingParams
    choice: Any
    user_stops: tuple[str, ...]
    messages: tuple[Message, ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    on_reply: Callable[[Generation, Message], None] | None = None
    """Told the generation and the reply of choice 0 (the gateway records a rollout's tokens)."""
    completion_tokens: int | None = None
    """Tokens sampled for the reply (all choices), once it is done: for the access log."""

    def replied(self, gen: Generation, message: dict[str, Any]) -> None:
        if self.on_reply is not None:
            if message.get("content") is None and not message.get("tool_calls"):
                message = {**message, "content": ""}  # cut before any text: a reply all the same
            self.on_reply(gen, parse_messages([message])[0])


def prepare(model: ServedModel, req: ChatRequest) -> Prepared:
    """Check ``req`` and render it for ``model`` (``ChatRequestError`` naming the bad field)."""
    req.check_fields()
    check_prompt_size(req.messages, model.context, model.fmt.tokenizer)  # before tokenizing a huge prompt
    messages = _parsed(lambda: parse_messages([_clean(m) for m in req.messages]), "messages")
    check_tool_results(messages)
    tools = list(_parsed(lambda: parse_tools(req.tools), "tools")) if req.tools else []
    choice = req.tool_choice if req.tool_choice is not None else ("auto" if tools else "none")
    stops = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    if len(stops) > 4 or not all(stops):
        raise ChatRequestError("'stop' takes up to 4 non-empty strings", "stop")
    asked = req.max_completion_tokens or req.max_tokens
    if asked and asked > model.max_tokens:
        raise ChatRequestError(f"max_tokens {asked} is above this server's limit of {model.max_tokens} "
                               "(arft serve --max-tokens)", "max_tokens")
    try:
        kind = parse_tool_choice(choice)[0]
        rendered = model.fmt.render_prompt(messages, tools, choice)
    except ChatFormatError as e:
        raise ChatRequestError(str(e), "tool_choice") from None
    wanted = fit_context(len(rendered.ids), model.context, asked, model.max_tokens)
    grammar: Grammar | None = json_grammar(model, req.response_format, bool(tools) and kind != "none")
    try:
        if grammar is None and tools and kind != "none" and supports_constraints(model.engine):
            grammar = model.fmt.tool_grammar(tools, model.constrain)
        if grammar is not None:
            assert isinstance(model.engine, TakesGrammar), "a grammar is made only for an engine that takes one"
            model.engine.check_grammar(grammar)
            grammar = grammar.with_prefill(rendered.prefill)
    except ConstraintError as e:
        raise ChatRequestError(for_server(str(e)), "response_format" if isinstance(grammar, JsonGrammar)
                               else "tools") from None
    params = SamplingParams(
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p, top_k=0, max_new_tokens=wanted,
        **model.fmt.turn_stops(stops, req.parallel_tool_calls), seed=req.seed,
        parallel_tool_calls=req.parallel_tool_calls, grammar=grammar)
    return Prepared(rendered, params, "none" if isinstance(grammar, JsonGrammar) else choice, stops,
                    messages=tuple(messages), tools=tuple(tools))


def json_grammar(model: ServedModel, response_format: dict[str, Any] | None, calls: bool) -> JsonGrammar | None:
    """The whole-reply grammar of ``response_format`` (None for ``text``); ``calls``: the request
    may call tools, which a JSON reply cannot."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind not in ("json_object", "json_schema"):
        raise ChatRequestError(f"response_format type {kind!r} is unknown: use text, json_object or "
                               "json_schema", "response_format")
    if calls:
        raise ChatRequestError("a JSON response_format and tool calls cannot be combined in one "
                               "request: send tool_choice 'none', or leave response_format out", "response_format")
    if not supports_constraints(model.engine):
        raise ChatRequestError(f"the engine serving {model.name!r} cannot constrain a reply to JSON: "
                               "leave response_format out", "response_format")
    if kind == "json_object":
        return JsonGrammar()
    spec = (response_format or {}).get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise ChatRequestError("response_format json_schema needs {\"name\": ..., \"schema\": {...}}",
                               "response_format")
    name = f"response_format {spec.get('name', 'schema')!r}"
    try:
        check_schema(name, spec["schema"], subject=name)
    except ConstraintError as e:
        raise ChatRequestError(for_server(str(e)), "response_format") from None
    return JsonGrammar(json_schema=spec["schema"], name=name)


def _parsed(parse: Callable[[], Any], param: str) -> Any:
    """``parse()``, with the dataset checks' ``RowError`` as a ``ChatRequestError`` on ``param``."""
    try:
        return parse()
    except RowError as e:
        raise ChatRequestError(str(e), param) from None


def _clean(message: Any) -> Any:
    """A message without the null / server-only keys clients echo back (``refusal``, ...)."""
    if not isinstance(message, dict):
        return message
    return {k: v for k, v in message.items() if v is not None and k not in _MESSAGE_NOISE}


def reply_message(model: ServedModel, prep: Prepared, gen: Generation,
                  call_ids: list[str] | None = None) -> tuple[dict[str, Any], str]:
    """``(assistant message dict, finish_reason)`` of a generation (see the module docstring).
    ``call_ids``: ids already streamed for the first calls, kept."""
    text = gen.text
    for stop in prep.user_stops:  # the caller's stop sequence is not part of the answer
        if gen.finish_reason == "stop" and text.endswith(stop):
            text = text[: -len(stop)]
    parsed = model.fmt.parse(prep.rendered.prefill, text, prep.choice)
    cut = gen.finish_reason == "length"
    if parsed.errors and cut:  # the call max_tokens cut is dropped; the complete ones before it stay
        parsed = _before_last_call(model, prep, text) or parsed
    if parsed.errors:  # an unreadable call block: the turn as written, nothing repaired
        raw = strip_end_of_turn(prep.rendered.prefill + text, END_OF_TURN_MARKERS).strip()
        return {"role": "assistant", "content": raw or None}, "length" if cut else "stop"
    calls = []
    for i, call in enumerate(parsed.tool_calls):
        cid = call_ids[i] if call_ids and i < len(call_ids) else call.id
        calls.append({"id": cid, "type": "function",
                      "function": {"name": call.function.name, "arguments": call.function.arguments}})
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if calls:
        message["tool_calls"] = calls
        return message, "length" if cut else "tool_calls"
    return message, "length" if cut else "stop"


def _before_last_call(model: ServedModel, prep: Prepared, text: str) -> ParsedTurn | None:
    """The turn without its last call block (the one ``max_tokens`` cut); None when what is left
    does not parse either."""
    whole = prep.rendered.prefill + text
    if TOOL_CALL_OPEN not in whole:
        return None
    parsed = model.fmt.parse("", whole[: whole.rfind(TOOL_CALL_OPEN)], prep.choice)
    return None if parsed.errors else parsed


def _logprobs(model: ServedModel, gen: Generation) -> dict[str, Any]:
    tok = model.fmt.tokenizer
    content = []
    for token, lp in zip(gen.token_ids, gen.logprobs):
        text = str(tok.decode([token]))
        content.append({"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []})
    return {"content": content}


async def complete(model: ServedModel, req: ChatRequest, prep: Prepared | None = None) -> dict[str, Any]:
    """The ``chat.completion`` answer to ``req`` (``n`` choices sampled concurrently; ``prep``:
    already prepared)."""
    prep = prep or prepare(model, req)
    params = [prep.params if prep.params.seed is None or i == 0 else
              prep.params.model_copy(update={"seed": choice_seed(prep.params.seed, i)}) for i in range(req.n)]
    gens = await asyncio.gather(*(model.engine.generate(prep.rendered.ids, p) for p in params))
    choices = []
    for i, gen in enumerate(gens):
        message, finish = reply_message(model, prep, gen)
        if i == 0:
            prep.replied(gen, message)
        choices.append({"index": i, "message": message, "finish_reason": finish,
                        "logprobs": _logprobs(model, gen) if req.logprobs else None})
    completion = prep.completion_tokens = sum(len(g.token_ids) for g in gens)
    return {"id": _completion_id(), "object": "chat.completion", "created": int(time.time()),
            "model": model.name, "system_fingerprint": fingerprint(gens[0].policy), "choices": choices,
            "usage": _usage(len(prep.rendered.ids), completion)}


async def stream_chunks(model: ServedModel, req: ChatRequest, prep: Prepared) -> AsyncIterator[dict[str, Any]]:
    """The answer to ``req`` (already ``prepare``d: its errors come before any chunk) as
    ``chat.completion.chunk`` objects, token by token where the engine streams
    (``supports_streaming``), else all at once when it is done."""
    head = {"id": _completion_id(), "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model.name, "system_fingerprint": fingerprint(stamp_of(model.engine))}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    queue: asyncio.Queue[tuple[int, ...] | None] = asyncio.Queue()
    if isinstance(model.engine, StreamsTokens) and model.engine.supports_streaming:
        job = asyncio.ensure_future(model.engine.generate(prep.rendered.ids, prep.params,
                                                          on_tokens=queue.put_nowait))
    else:
        job = asyncio.ensure_future(model.engine.generate(prep.rendered.ids, prep.params))
    job.add_done_callback(lambda _: queue.put_nowait(None))
    splitter = StreamSplitter(prep.rendered.prefill, early_names=prep.params.grammar is not None)
    tokens: list[int] = []
    try:
        yield chunk({"role": "assistant", "content": ""})
        while (item := await queue.get()) is not None:
            tokens.extend(item)
            text = str(model.fmt.tokenizer.decode(tokens, skip_special_tokens=False))
            if not text.endswith("\ufffd"):  # a character split across tokens: wait for the rest
                for delta in splitter.feed(text):
                    yield chunk(delta)
        gen = job.result()
    finally:
        job.cancel()  # a client that went away stops the generation
    prep.completion_tokens = len(gen.token_ids)
    message, finish = reply_message(model, prep, gen, splitter.call_ids)
    prep.replied(gen, message)
    for delta in splitter.finish(message):
        yield chunk(delta)
    yield chunk({}, finish)
    if (req.stream_options or {}).get("include_usage"):
        yield {**head, "choices": [], "usage": _usage(len(prep.rendered.ids), len(gen.token_ids))}


def _completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
