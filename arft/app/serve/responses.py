"""The OpenAI Responses API (``POST /v1/responses``) as a translation onto chat completions.

The OpenAI Agents SDK's default model class (``OpenAIResponsesModel``) calls this API. A request
becomes a ``ChatRequest`` (``to_chat``) and goes through ``arft.app.serve.chat`` unchanged, so
every rule of chat completions holds here too: the prompt is the rollouts' rendering, token ids in
and out, constrained tool calls, the same refusals. The reply is turned back into a ``response``
object (``response_object``) or, with ``stream: true``, into the Responses server-sent events
(``ResponseEvents``), built from the chat chunks.

arft keeps no response state: ``previous_response_id`` and ``conversation`` are refused (send
the whole ``input``, as the Agents SDK does by default). Only function tools are served; hosted
tools (web search, file search, ...) are refused by name, like any field arft cannot honour.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from typing import Any, AsyncIterator, Mapping, Sequence

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from arft.app.serve.chat import ChatRequest, ChatRequestError, ServedModel, complete, stream_chunks
from arft.app.serve.fingerprint import policy_headers, stamp_of
from arft.app.serve.server import Preparer, error, prepared, read_body, unknown_model, unless_disconnected
from arft.engines.base import EngineError

IGNORED = frozenset({"metadata", "store", "user", "service_tier", "prompt_cache_key", "prompt_cache_retention",
                     "prompt_cache_options", "safety_identifier", "stream_options", "reasoning", "background"})
"""Request fields that change nothing here (bookkeeping, or effort for reasoning models);
``background`` only at false (checked in ``check_fields``)."""
_STATELESS = ("previous_response_id", "conversation", "prompt")
"""Fields that refer to state kept by OpenAI's servers, which arft does not keep."""
_PARAMS = {"messages": "input", "max_tokens": "max_output_tokens", "response_format": "text.format"}
"""Chat-completions field -> the Responses field it came from (for an error's ``param``)."""
_TEXT_PARTS = ("input_text", "output_text", "text")


class ResponsesRequest(BaseModel):
    """The body of ``POST /v1/responses`` (the Responses fields arft honours)."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[Any]
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_output_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    text: dict[str, Any] | None = None
    include: list[str] | None = None
    truncation: str | None = None
    seed: int | None = None
    """An arft extension (as in chat completions): the sampling seed."""

    def check_fields(self) -> None:
        """Refuse what arft would otherwise ignore (``ChatRequestError`` naming the field)."""
        extra = self.model_extra or {}
        for key in _STATELESS:
            if extra.get(key) is not None:
                raise ChatRequestError(f"'{key}' is not supported: arft serve keeps no response state; send "
                                       "the whole conversation in 'input' each time", key)
        for key in extra:
            if key not in IGNORED and key not in _STATELESS:
                raise ChatRequestError(f"unrecognized request argument supplied: {key}", key)
        if extra.get("background"):
            raise ChatRequestError("'background' is not supported by arft serve; leave it out", "background")
        if self.truncation not in (None, "disabled"):
            raise ChatRequestError("truncation 'auto' is not supported: arft serve never drops input items; "
                                   "leave truncation out", "truncation")
        if "message.output_text.logprobs" in (self.include or ()):
            raise ChatRequestError("'message.output_text.logprobs' cannot be included here: use "
                                   "/v1/chat/completions with logprobs: true", "include")


def to_chat(req: ResponsesRequest) -> ChatRequest:
    """The chat-completions request that ``req`` means (``ChatRequestError`` naming the field)."""
    req.check_fields()
    body: dict[str, Any] = {"model": req.model, "messages": _messages(req), "stream": req.stream,
                            "temperature": req.temperature, "top_p": req.top_p, "seed": req.seed,
                            "max_tokens": req.max_output_tokens}
    if req.tools:
        body["tools"] = [_tool(t, i) for i, t in enumerate(req.tools)]
    if req.tool_choice is not None:
        body["tool_choice"] = _tool_choice(req.tool_choice)
    if req.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = req.parallel_tool_calls
    fmt = (req.text or {}).get("format")
    if fmt is not None:
        body["response_format"] = _response_format(fmt)
    if req.stream:  # the last chunk then carries the usage that response.completed reports
        body["stream_options"] = {"include_usage": True}
    return ChatRequest.model_validate(body)


def _messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    """``instructions`` and ``input`` as chat messages. A ``function_call`` item joins the assistant
    message just before it (the same turn), so a turn renders as it was sampled."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": req.instructions}] if req.instructions else []
    items = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ChatRequestError(f"{where} must be an object (a message or a function_call item)", "input")
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item.get("role"), "content": _text(item.get("content"), where)})
        elif kind == "function_call":
            call = {"id": _field(item, "call_id", where), "type": "function",
                    "function": {"name": _field(item, "name", where), "arguments": _field(item, "arguments", where)}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": _field(item, "call_id", where),
                             "content": _text(item.get("output"), where + ".output")})
        else:
            raise ChatRequestError(f"{where}: input items of type {kind!r} are not supported by arft serve; send "
                                   "message, function_call and function_call_output items", "input")
    return messages


def _field(item: dict[str, object], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ChatRequestError(f"{where} ({item.get('type')}) needs a string '{key}'", "input")
    return value


def _text(content: object, where: str) -> str:
    """A message's content or a call's output as text (text parts joined with newlines)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ChatRequestError(f"{where}: content must be a string or a list of input_text parts", "input")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS or not isinstance(part.get("text"), str):  # (a dict when kind is set)
            raise ChatRequestError(f"{where}.content[{j}]: content parts of type {kind!r} are not supported by "
                                   "arft serve (text only: input_text, output_text)", "input")
        texts.append(part["text"])
    return "\n".join(texts)


def _tool(tool: object, index: int) -> dict[str, object]:
    """A flat Responses function tool as a chat-completions tool."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise ChatRequestError(f"tools[{index}]: tools of type {kind!r} are not supported by arft serve; only "
                               "function tools ({\"type\": \"function\", \"name\", \"parameters\"})", "tools")
    assert isinstance(tool, dict)  # its type is "function"
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
    return {"type": "function", "function": function}


def _tool_choice(choice: str | dict[str, object]) -> str | dict[str, object]:
    if isinstance(choice, str):
        return choice
    name = choice.get("name")
    if choice.get("type") == "function" and isinstance(name, str):
        return {"type": "function", "function": {"name": name}}
    raise ChatRequestError(f"tool_choice {choice!r} is not supported by arft serve: use 'auto', 'none', "
                           "'required' or {\"type\": \"function\", \"name\": ...}", "tool_choice")


def _response_format(fmt: object) -> dict[str, object]:
    """``text.format`` as a chat ``response_format``."""
    if not isinstance(fmt, dict):
        raise ChatRequestError("text.format must be an object such as {\"type\": \"text\"}", "text.format")
    if fmt.get("type") != "json_schema":
        return {"type": fmt.get("type")}
    spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
    return {"type": "json_schema", "json_schema": spec}


async def respond(request: Request, by_name: Mapping[str, ServedModel], prepare: Preparer | None = None) -> Any:
    """``POST /v1/responses``: a response object, a stream of events, or an OpenAI-shaped error.
    Served as chat completions are: prepared off the event loop, a non-streamed generation
    cancelled when its client leaves, the weights named in the policy header."""
    req = await read_body(request, ResponsesRequest, "a Responses")
    if isinstance(req, JSONResponse):
        return req
    model = by_name.get(req.model)
    if model is None:
        return unknown_model(req.model, by_name)
    headers = policy_headers(stamp_of(model.engine))
    try:
        chat = to_chat(req)
        prep = await (prepare or prepared)(request, model, chat)
        if not req.stream:
            done = await unless_disconnected(request, complete(model, chat, prep))
            if done is None:
                return error(499, "the client disconnected", kind="client_closed")
            choice, finish = done["choices"][0], done["choices"][0]["finish_reason"]
            output = output_items(choice["message"], finish)
            return JSONResponse(response_object(req, model.name, output, finish, done["usage"]), headers=headers)
    except ChatRequestError as e:
        return error(e.status, str(e), _PARAMS.get(e.param or "", e.param), e.code)
    except EngineError as e:
        return error(500, f"generation failed: {e}", kind="server_error")
    events = ResponseEvents(req, model.name).translate(stream_chunks(model, chat, prep))
    return StreamingResponse(_sse(events), media_type="text/event-stream", headers=headers)


def output_items(message: Mapping[str, object], finish: str | None = None) -> list[dict[str, Any]]:
    """A chat assistant message as Responses output items: a message (when there is text;
    ``incomplete`` when ``finish`` is ``length``), then one ``function_call`` per tool call."""
    items: list[dict[str, Any]] = []
    text, calls = message.get("content"), message.get("tool_calls")
    if isinstance(text, str) and text:
        items.append({"type": "message", "id": _id("msg"), "role": "assistant",
                      "status": "incomplete" if finish == "length" else "completed",
                      "content": [{"type": "output_text", "text": text, "annotations": []}]})
    for call in calls if isinstance(calls, list) else ():
        items.append({"type": "function_call", "id": _id("fc"), "call_id": call["id"],
                      "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                      "status": "completed"})
    return items


def response_object(req: ResponsesRequest, model: str, output: Sequence[Mapping[str, object]], finish: str | None,
                    usage: dict[str, int] | None, response_id: str | None = None, status: str | None = None
                    ) -> dict[str, Any]:
    """The ``response`` object: ``finish`` ``length`` makes it ``incomplete`` (max_output_tokens);
    ``status`` overrides (``in_progress`` while streaming)."""
    cut = finish == "length"
    return {
        "id": response_id or _id("resp"), "object": "response", "created_at": int(time.time()),
        "status": status or ("incomplete" if cut else "completed"), "model": model, "output": output,
        "incomplete_details": {"reason": "max_output_tokens"} if cut and status is None else None,
        "error": None, "instructions": req.instructions, "metadata": (req.model_extra or {}).get("metadata"),
        "tools": req.tools or [], "tool_choice": req.tool_choice or ("auto" if req.tools else "none"),
        "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
        "temperature": req.temperature, "top_p": req.top_p, "max_output_tokens": req.max_output_tokens,
        "previous_response_id": None, "reasoning": None, "store": False, "truncation": "disabled",
        "text": req.text or {"format": {"type": "text"}},
        "usage": None if usage is None else {
            "input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}},
    }


class ResponseEvents:
    """Turns one reply's ``chat.completion.chunk``s into the Responses stream events, each with
    its ``type`` and ``sequence_number``: ``response.created``, an ``output_item.added`` as each
    item starts, text and argument deltas, the ``.done`` events of every item at the end, and
    ``response.completed`` (``response.incomplete`` when cut by ``max_output_tokens``) whose
    output is exactly the items streamed."""

    def __init__(self, req: ResponsesRequest, model: str) -> None:
        self.req, self.model, self.id = req, model, _id("resp")
        self.sequence = 0
        self.items: list[dict[str, Any]] = []
        self.text_at: int | None = None  # the output index of the message item, once text came
        self.calls: dict[int, int] = {}  # a chunk's tool-call index -> its output index

    async def translate(self, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        """The events for ``chunks`` (an ``EngineError`` ends them with ``response.failed``)."""
        head = self._response(None, None, "in_progress")
        yield self._event("response.created", response=head)
        yield self._event("response.in_progress", response=head)
        finish, usage = None, None
        try:
            async for chunk in chunks:
                usage = chunk.get("usage") or usage
                for choice in chunk["choices"]:
                    finish = choice["finish_reason"] or finish
                    for event in self.feed(choice["delta"]):
                        yield event
        except EngineError as e:
            failed = self._response(None, None, "failed")
            failed["error"] = {"code": "server_error", "message": f"generation failed: {e}"}
            yield self._event("response.failed", response=failed)
            return
        for event in self._close("incomplete" if finish == "length" else "completed"):
            yield event
        kind = "response.incomplete" if finish == "length" else "response.completed"
        yield self._event(kind, response=self._response(finish, usage))

    def feed(self, delta: Mapping[str, object]) -> list[dict[str, Any]]:
        """The events of one chat delta (text, a new call, a call's arguments)."""
        text, calls = delta.get("content"), delta.get("tool_calls")
        events = self._text(text) if isinstance(text, str) and text else []
        for call in calls if isinstance(calls, list) else ():
            fn = call.get("function") or {}
            if call["index"] not in self.calls:
                self.calls[call["index"]] = len(self.items)
                events.append(self._added({"type": "function_call", "id": _id("fc"), "call_id": call["id"],
                                           "name": fn["name"], "arguments": "", "status": "in_progress"}))
            at = self.calls[call["index"]]
            if fn.get("arguments"):
                self.items[at]["arguments"] += fn["arguments"]
                events.append(self._event("response.function_call_arguments.delta", **self._where(at),
                                          delta=fn["arguments"]))
        return events

    def _text(self, text: str) -> list[dict[str, Any]]:
        """The events of more reply text (the message item and its text part first, once)."""
        events = []
        if self.text_at is None:
            self.text_at = len(self.items)
            events.append(self._added({"type": "message", "id": _id("msg"), "role": "assistant",
                                       "status": "in_progress", "content": []}))
            part = {"type": "output_text", "text": "", "annotations": []}
            self.items[self.text_at]["content"].append(part)
            events.append(self._event("response.content_part.added", **self._where(self.text_at), content_index=0,
                                      part=copy.deepcopy(part)))
        self.items[self.text_at]["content"][0]["text"] += text
        events.append(self._event("response.output_text.delta", **self._where(self.text_at), content_index=0,
                                  delta=text, logprobs=[]))
        return events

    def _close(self, status: str) -> list[dict[str, Any]]:
        """The ``.done`` events of every item, in output order."""
        events = []
        for at, item in enumerate(self.items):
            if item["type"] == "message":
                part = item["content"][0]
                events.append(self._event("response.output_text.done", **self._where(at), content_index=0,
                                          text=part["text"], logprobs=[]))
                events.append(self._event("response.content_part.done", **self._where(at), content_index=0,
                                          part=copy.deepcopy(part)))
                item["status"] = status
            else:
                events.append(self._event("response.function_call_arguments.done", **self._where(at),
                                          name=item["name"], arguments=item["arguments"]))
                item["status"] = "completed"
            events.append(self._event("response.output_item.done", output_index=at, item=copy.deepcopy(item)))
        return events

    def _added(self, item: dict[str, object]) -> dict[str, object]:
        self.items.append(item)
        return self._event("response.output_item.added", output_index=len(self.items) - 1, item=copy.deepcopy(item))

    def _where(self, at: int) -> dict[str, Any]:
        return {"item_id": self.items[at]["id"], "output_index": at}

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.sequence += 1
        return {"type": kind, "sequence_number": self.sequence - 1, **fields}

    def _response(self, finish: str | None, usage: dict[str, int] | None, status: str | None = None) -> dict[str, Any]:
        output = [] if status is not None else copy.deepcopy(self.items)
        return response_object(self.req, self.model, output, finish, usage, self.id, status)


async def _sse(events: AsyncIterator[dict[str, object]]) -> AsyncIterator[str]:
    """Server-sent events as OpenAI sends them: ``event: <type>`` then ``data: <json>``."""
    async for event in events:
        yield f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"
