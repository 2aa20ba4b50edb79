"""The exact tokens of one rollout that an agent program drives through the gateway.

Token in, token out, as in arft's own loop (``arft.rollout.conversation.TokenConversation``): a
request's prompt ids are, when possible, the ids the policy already saw and sampled, never the
reply decoded and tokenized again. The rule (docs/agents.md):

* **append-only** — the request's messages are the previous request's messages, then the reply
  the gateway gave (compared by meaning: content, tool names, arguments as JSON), then only new
  ``tool`` or ``user`` messages, with the same tools listed: the prompt is the previous ids (the
  sampled ones included) plus the rendered new messages, exactly as arft's loop appends tool
  results;
* **retry** — the request repeats the previous request exactly (a client retry, or an agent
  asking again): the previous reply is dropped and sampled anew from the same ids;
* **split** — anything else (the agent summarised or dropped messages, changed its system prompt
  or its tools, inserted its own assistant turn): a new segment starts from the rendered
  conversation. Each segment trains as its own sequence with the rollout's advantage
  (``Rollout.segments``); splits are counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Sequence

from arft.chat.formats import Rendered
from arft.records import Message, TokenSegment

if TYPE_CHECKING:
    from arft.chat.formats import ChatFormat
    from arft.engines.base import Generation

PromptKind = Literal["first", "append", "retry", "split"]
"""How a request's prompt ids were made (see the module docstring)."""


@dataclass
class Segment:
    """One append-only stretch of a trajectory: its ids and the messages they render."""

    tools_key: str
    """The tools as listed to the model (JSON), which the prompt's system part renders."""
    messages: list[Message]
    """The conversation so far, the last reply included."""
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    constrained: list[int] = field(default_factory=list)
    """1 where a token was sampled under a tool-call grammar that excluded tokens."""
    prompt_len: int = 0
    """Ids of the first prompt (mask 0)."""
    ended_with_eos: bool = False
    last_prompt: int = 0
    """Where the last request's prompt ended: a retry rolls back to here."""
    last_request: int = 0
    """How many of ``messages`` the last request sent (the rest is its reply)."""

    def append(self, ids: Sequence[int], sampled: bool, logprobs: Sequence[float] = (),
               constrained: Sequence[bool] = ()) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([1 if sampled else 0] * len(ids))
        self.logprobs.extend(logprobs if sampled else [0.0] * len(ids))
        self.constrained.extend([int(c) for c in constrained] or [0] * len(ids))

    def rollback(self) -> None:
        """Forget the last reply (a retried request)."""
        end = self.last_prompt
        del self.token_ids[end:], self.loss_mask[end:], self.logprobs[end:], self.constrained[end:]
        del self.messages[self.last_request:]

    def frozen(self) -> TokenSegment:
        return TokenSegment(token_ids=tuple(self.token_ids), loss_mask=tuple(self.loss_mask),
                            logprobs=tuple(self.logprobs))


@dataclass
class Turn:
    """One request's prompt, ready for the engine."""

    rendered: Rendered
    kind: PromptKind


@dataclass
class Capture:
    """Every model call of one rollout (one ``trace_id``), as exact tokens."""

    fmt: ChatFormat
    trace_id: str
    segments: list[Segment] = field(default_factory=list)
    turns: int = 0
    """Completions sampled (retries included)."""
    kinds: dict[str, int] = field(default_factory=lambda: {"first": 0, "append": 0, "retry": 0, "split": 0})
    overflow: bool = False
    """A request did not fit ``rollout.max_tokens``: the rollout ends as truncated."""
    constrained_calls: int = 0
    """Tool calls written under a tool-call grammar (as ``Rollout.constrained_calls``)."""
    call_ids: set[str] = field(default_factory=set)
    """The ids of the calls the policy made here: only they are the rollout's calls (a row's
    worked examples carry calls too)."""
    closed_calls: int = 0
    """Calls the engine closed for the budget (as ``Rollout.closed_calls``)."""
    cut: bool = False
    """The last reply was cut by ``max_new_tokens``: an agent that then fails failed on the policy's
    reply, not on its own (the rollout is truncated and graded, as in arft's loop)."""
    policy: Any = None
    """The policy stamp of the last generation (``Generation.policy``), when engines give one."""

    def prompt(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], choice: Any,
               full: Rendered) -> Turn:
        """The ids to sample this request from; ``full``: the whole conversation rendered (used
        for a first turn or a split)."""
        key = _tools_key(self.fmt, tools, choice)
        seg = self.segments[-1] if self.segments else None
        kind = _kind(seg, messages, key)
        if seg is not None and kind == "retry":
            seg.rollback()
            rendered = Rendered(list(seg.token_ids), full.prefill, full.text)
        elif seg is not None and kind == "append":
            cont = self.fmt.continuation_ids(seg.ended_with_eos, list(messages[len(seg.messages):]), choice)
            rendered = Rendered(seg.token_ids + cont.ids, cont.prefill, cont.text)
            seg.last_prompt = len(seg.token_ids)
            seg.append(cont.ids, sampled=False)
        else:
            seg = Segment(tools_key=key, messages=[])
            seg.append(full.ids, sampled=False)
            seg.prompt_len = len(full.ids)
            self.segments.append(seg)
            rendered = full
        seg.messages[:] = list(messages)
        seg.last_request = len(messages)
        self.kinds[kind] += 1
        return Turn(rendered, kind)

    def record(self, gen: Generation, reply: Message) -> None:
        """The sampled reply to the last ``prompt``: its ids (mask 1, with logprobs) and message."""
        seg = self.segments[-1]
        seg.append(gen.token_ids, sampled=True, logprobs=gen.logprobs, constrained=gen.constrained)
        if any(gen.constrained):
            self.constrained_calls += len(reply.tool_calls or ())
        self.call_ids.update(call.id for call in reply.tool_calls or ())
        self.closed_calls += getattr(gen, "closed_calls", 0)
        seg.ended_with_eos = gen.finish_reason == "eos"
        self.cut = gen.finish_reason == "length"
        seg.messages.append(reply)
        self.turns += 1
        self.policy = getattr(gen, "policy", None)

    @property
    def splits(self) -> int:
        return self.kinds["split"]

    def token_fields(self) -> dict[str, Any]:
        """The ``Rollout`` fields of the exact tokens: the last segment's, and the earlier ones."""
        if not self.segments:
            return {}
        last = self.segments[-1]
        return dict(token_ids=tuple(last.token_ids), loss_mask=tuple(last.loss_mask),
                    logprobs=tuple(last.logprobs), prompt_len=last.prompt_len,
                    constrained_mask=tuple(last.constrained) if any(last.constrained) else (),
                    constrained_calls=self.constrained_calls, closed_calls=self.closed_calls,
                    segments=tuple(s.frozen() for s in self.segments[:-1]))


def _tools_key(fmt: ChatFormat, tools: Sequence[dict[str, Any]], choice: Any) -> str:
    return json.dumps(fmt.listed_tools(tools, choice), sort_keys=True)


def _kind(seg: Segment | None, messages: Sequence[Message], key: str) -> PromptKind:
    if seg is None:
        return "first"
    if seg.tools_key != key:
        return "split"
    if not all(same_message(a, b) for a, b in zip(messages, seg.messages)):
        return "split"
    if len(messages) == seg.last_request and len(seg.messages) > seg.last_request:
        return "retry"
    new = messages[len(seg.messages):]
    if len(messages) <= len(seg.messages) or any(m.role not in ("tool", "user") for m in new):
        return "split"
    return "append"


def same_message(a: Message, b: Message) -> bool:
    """Whether two messages render the same for the model: role, content (None is ''), and each
    call's name and arguments (as JSON values: clients re-serialise them with other spacing).
    Call ids are not compared: the chat formats here do not render them."""
    if a.role != b.role or (a.content or "").strip() != (b.content or "").strip():
        return False
    calls_a, calls_b = a.tool_calls or (), b.tool_calls or ()
    if len(calls_a) != len(calls_b):
        return False
    return all(x.function.name == y.function.name and _json(x.function.arguments) == _json(y.function.arguments)
               for x, y in zip(calls_a, calls_b))


def _json(text: str) -> Any:
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return text
