"""The model judge every model-judged grader shares: its client, prompts and parsing (its spec
fields, ``JudgeFields``, are in ``arft.config.judge``).

A judge is any OpenAI-compatible ``/chat/completions`` server (a hosted API or a locally served
model). ``JudgeClient`` reuses ``OpenAIEngine`` — its HTTP client, retries of 5xx/429/timeouts and
error messages — and only changes the request body: the hosted ``sampling_params`` fields that are
set, plus a ``response_format`` JSON schema asking for structured output. Servers that ignore
``response_format`` still work: ``parse_json_reply`` also reads JSON wrapped in prose or code
fences, and callers accept a bare value.

Where the judge lives (the user's contract): ``base_url`` from the spec, else ``$OPENAI_BASE_URL``,
else the OpenAI API; the key from ``api_key`` (a ``${ENV_VAR}`` reference, resolved by
``arft.secrets``), else from the environment variable *named* by ``api_key_env``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from arft.config import SamplingSpec
from arft.config.graders import ContentPart, InputMessage
from arft.config.judge import JudgeFields, JudgeSampling
from arft.engines.base import EngineError, SamplingParams
from arft.engines.openai_engine import OpenAIEngine
from arft.graders.base import GraderError
from arft.graders.templates import render_template
from arft.records import json_list, json_object, Message
from arft.secrets import SecretError, resolve

DEFAULT_BASE_URL = "https://api.openai.com/v1"

STEPS_SCHEMA: dict[str, object] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"description": {"type": "string"}, "conclusion": {"type": "string"}},
        "required": ["description", "conclusion"],
        "additionalProperties": False,
    },
}


class JudgeClient(OpenAIEngine):
    """``OpenAIEngine`` whose requests carry the judge's sampling fields and response format."""

    def __init__(self, base_url: str, model: str, api_key: str | None, *,
                 response_format: dict[str, object] | None, sampling: JudgeSampling,
                 timeout_s: float = 60.0, max_retries: int = 3, backoff_s: float = 0.5,
                 api_key_env: str = "OPENAI_API_KEY") -> None:
        super().__init__(base_url, model, api_key=api_key, timeout_s=timeout_s,
                         max_retries=max_retries, backoff_s=backoff_s)
        self.response_format = response_format
        self.sampling = sampling
        self.api_key_env = api_key_env
        self.has_key = bool(api_key)

    @classmethod
    def from_fields(cls, fields: JudgeFields, model: str,
                    response_format: dict[str, object] | None) -> "JudgeClient":
        """Build from a spec; reads ``base_url``/``$OPENAI_BASE_URL`` and the named key variable."""
        base_url = fields.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        try:
            api_key = (resolve(fields.api_key, f"judge {model!r}: api_key") if fields.api_key
                       else os.environ.get(fields.api_key_env) or None)
        except SecretError as e:
            raise GraderError(str(e)) from None
        return cls(base_url, model, api_key,
                   response_format=response_format, sampling=fields.sampling_params,
                   timeout_s=fields.timeout_s, max_retries=fields.max_retries,
                   backoff_s=fields.backoff_s, api_key_env=fields.api_key_env)

    def request_body(self, messages: Sequence[Message], tools: Sequence[dict[str, object]],
                     tool_choice: str | dict[str, object] | None,
                     params: SamplingParams) -> dict[str, object]:
        """The judge request: messages, the set sampling fields and ``response_format``."""
        body: dict[str, object] = {"model": self.model,
                                "messages": [m.to_openai() for m in messages]}
        body.update(self.sampling.body_fields())
        if self.response_format is not None:
            body["response_format"] = self.response_format
        return body

    async def ask(self, messages: Sequence[Message]) -> str:
        """The judge's reply text; raises ``JudgeError`` naming the server and the failure."""
        try:
            # request_body sends the judge's own sampling fields, not these
            reply = await self.chat(messages, (), None, SamplingParams.from_spec(SamplingSpec()))
        except EngineError as e:
            hint = "" if self.has_key else f" (note: ${self.api_key_env} is not set)"
            raise JudgeError(f"judge '{self.model}' failed: {e}{hint}") from None
        return reply.message.content or ""


class JudgeError(RuntimeError):
    """The judge could not be asked or its answer could not be used; the message says why."""


def json_schema_format(name: str, schema: dict[str, object]) -> dict[str, object]:
    """A chat-completions ``response_format`` asking for JSON that follows ``schema``."""
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def result_schema(result: dict[str, object]) -> dict[str, object]:
    """The hosted structured output ``{"steps": [{description, conclusion}], "result": ...}``."""
    return {"type": "object", "properties": {"steps": STEPS_SCHEMA, "result": result},
            "required": ["steps", "result"], "additionalProperties": False}


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_json_reply(text: str) -> Any | None:
    """The JSON in a judge's reply: the whole text, a fenced block, or the outermost ``{...}``.

    ``None`` when none of them is JSON (a bare word the caller may still read itself).
    """
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
    return None


def reply_result(text: str) -> Any:
    """The ``result`` of a structured reply; a JSON value or bare text without one is the result."""
    data = parse_json_reply(text)
    if isinstance(data, dict):
        if "result" not in data:
            raise JudgeError(f"the judge's JSON has no 'result' key: {clip(text)}")
        return data["result"]
    return data if data is not None else text.strip()


def clip(text: str, limit: int = 200) -> str:
    """``text`` shortened for an error message."""
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


# ---------------------------------------------------------------------------- hosted input messages

_ROLES = ("system", "developer", "user", "assistant")


def check_input(grader: str, messages: list[InputMessage]) -> None:
    """Reject input messages arft cannot send: raises ``GraderError`` naming grader and field."""
    if not messages:
        raise GraderError(f"grader {grader!r}: field 'input': needs at least one message")
    for i, m in enumerate(messages):
        if m.role not in _ROLES:
            raise GraderError(f"grader {grader!r}: field 'input.{i}.role': {m.role!r} is not one "
                              f"of {', '.join(_ROLES)}")
        parts = m.content if isinstance(m.content, list) else [m.content]
        for part in parts:
            if isinstance(part, ContentPart) and part.type not in ("input_text", "output_text",
                                                                   "text"):
                raise GraderError(f"grader {grader!r}: field 'input.{i}.content': part type "
                                  f"{part.type!r} is not supported (only text parts)")


def render_messages(messages: Sequence[InputMessage], sample: dict[str, object],
                    item: dict[str, object], instructions: str | None = None) -> list[Message]:
    """The judge's messages with every template rendered; raises ``TemplateError``.

    ``instructions`` (the expected output format) go to the end of a leading system/developer
    message, or in a new leading system message: one system message keeps chat templates happy.
    """
    out = [Message(role=m.role, content=render_template(m.template(), sample, item))
           for m in messages]
    if instructions:
        if out and out[0].role in ("system", "developer"):
            out[0] = Message(role=out[0].role, content=f"{out[0].content}\n\n{instructions}")
        else:
            out.insert(0, Message(role="system", content=instructions))
    return out


# ------------------------------------------------------------------------------ trajectory text

def _message_text(m: Mapping[str, object]) -> str:
    lines = [f"{str(m.get('role', '?')).upper()}:" + (f" {m['content']}" if m.get("content") else "")]
    for call in map(json_object, json_list(m.get("tool_calls"))):
        fn = json_object(call.get("function"))
        lines.append(f"  -> tool call {call.get('id', '')} {fn.get('name', '')}"
                     f"({fn.get('arguments', '')})")
    if m.get("role") == "tool" and m.get("tool_call_id"):
        lines[0] = f"TOOL RESULT for {m['tool_call_id']}:" + (f" {m['content']}"
                                                              if m.get("content") else "")
    return "\n".join(lines)


def transcript(sample: Mapping[str, object], max_chars: int) -> str:
    """The whole rollout as readable text (messages, tool calls and results, final answer).

    Over ``max_chars`` the middle is cut (the task and the end usually matter most) and the cut is
    stated. A sample without a trajectory gives just its final answer.
    """
    trajectory = json_object(sample.get("trajectory"))
    messages = json_list(trajectory.get("messages"))
    if messages:
        body = "\n\n".join(_message_text(json_object(m)) for m in messages)
        records = map(json_object, json_list(trajectory.get("tool_calls")))
        failed = [r for r in records if r.get("status") != "ok"]
        if failed:
            body += "\n\nFAILED TOOL CALLS: " + "; ".join(
                f"{r.get('call_id')} {r.get('name')}: {r.get('status')} ({r.get('error')})"
                for r in failed)
    else:
        body = "(no trajectory recorded)"
    body += f"\n\nFINAL ANSWER:\n{sample.get('output_text', '')}"
    if len(body) > max_chars:
        half = max_chars // 2
        body = (body[:half] + f"\n[... {len(body) - 2 * half} characters omitted ...]\n"
                + body[-half:])
    return body
