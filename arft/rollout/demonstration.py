"""Demonstrations as training tokens, laid out exactly as rollouts are sampled.

A demonstration is a conversation someone else wrote: a teacher's rollout, a logged production
trace, or the policy's own success. Supervised fine-tuning must see it in the same token layout
the policy samples in during RL, or the warm start teaches a format the rollouts never use. So a
demonstration is *replayed* through the rollouts' own ``TokenConversation``: the prompt is
rendered as a rollout's, each assistant turn is fed in as if the engine had sampled it (its text
in the format's call syntax, ending at the last call's close or at eos), and the tool results
are appended as rollouts append them. The loss mask is 1 exactly on the assistant's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arft.engines.base import SamplingParams
from arft.engines.scripted import ScriptedEngine
from arft.chat.formats import ChatFormat
from arft.chat.tool_prompt import ChatFormatError, ToolChoice
from arft.errors import ArftError
from arft.records import Message
from arft.rollout.conversation import TokenConversation


# ValueError too: the warm start (arft.app.expert_iteration) re-words a ValueError of its sft step (no
# demonstration left) as advice to sample more.
class DemoError(ArftError, ValueError):
    """A demonstration that cannot be laid out as a rollout, or demonstrations of which none is
    left to imitate (``arft sft``, the warm start); the reason says why."""


@dataclass(frozen=True)
class Demonstration:
    """One conversation to imitate: the prompt a rollout starts from and the turns after it."""

    task_id: str
    prompt: tuple[Message, ...]
    """The task's messages: what a rollout of this task starts from."""
    turns: tuple[Message, ...]
    """Assistant turns, and the tool results (or user messages) between them."""
    tools: tuple[dict[str, Any], ...] | None = None
    """The tool schemas offered (None: every tool of the job)."""
    tool_choice: str | dict[str, Any] | None = None
    reward: float | None = None
    """The grade it earned, when it comes from a graded run."""
    sub_scores: dict[str, float] = field(default_factory=dict)
    """The grader's parts (a ``multi`` grader's named graders), when graded."""
    token_ids: tuple[int, ...] = ()
    """The ids an engine recorded for it (token in, token out), when known."""
    loss_mask: tuple[int, ...] = ()
    trace_id: str = ""


@dataclass(frozen=True)
class DemoTokens:
    """A demonstration ready for the trainer: ids and a mask that is 1 on assistant tokens."""

    task_id: str
    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    recorded: bool
    """True: the engine's own ids were used; False: rendered from the messages."""


def split_at_first_assistant(messages: Sequence[Message]) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """(prompt, turns): the messages before the first assistant message, and the rest."""
    for i, m in enumerate(messages):
        if m.role == "assistant":
            return tuple(messages[:i]), tuple(messages[i:])
    return tuple(messages), ()


def _conversation(fmt: ChatFormat, max_tokens: int, tool_choice: ToolChoice, replies: list[str]) -> TokenConversation:
    engine = ScriptedEngine(fmt.tokenizer, lambda ids: replies.pop(0))
    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max_tokens)
    return TokenConversation(engine, fmt, params, max_tokens, tool_choice)


def start_ids(fmt: ChatFormat, demo: Demonstration, schemas: Sequence[dict[str, object]],
              tool_choice: ToolChoice, max_tokens: int) -> list[int]:
    """The prompt ids a rollout of ``demo``'s task starts from (a forced call's prefill included)."""
    conv = _conversation(fmt, max_tokens, tool_choice, [])
    conv.start(demo.prompt, schemas)
    return list(conv.token_ids)


async def replay(fmt: ChatFormat, demo: Demonstration, schemas: Sequence[dict[str, object]], tool_choice: ToolChoice,
                 max_tokens: int) -> DemoTokens:
    """Lay ``demo`` out as a rollout of the job would be (``fmt``: its ``ChatFormat``; ``schemas``:
    the tools shown; ``tool_choice``: the task's or the job's; ``max_tokens``: ``rollout.max_tokens``).

    Raises ``DemoError`` when it cannot be: no assistant turn, a turn where a tool result was
    expected, a first turn that does not make the call ``tool_choice`` forces, arguments that
    are not a JSON object, or more tokens than ``max_tokens``.
    """
    if not demo.turns or demo.turns[0].role != "assistant":
        raise DemoError("it has no assistant turn after the prompt: nothing to imitate")
    replies: list[str] = []
    conv = _conversation(fmt, max_tokens, tool_choice, replies)
    try:
        conv.start(demo.prompt, schemas)
        i = 0
        while i < len(demo.turns):
            replies.append(_turn_text(fmt, demo.turns[i], conv.prefill, i))
            turn = await conv.assistant_turn()
            if turn.finish in ("length", "context"):
                raise DemoError(f"it is longer than rollout.max_tokens ({max_tokens} tokens)")
            j = i + 1
            while j < len(demo.turns) and demo.turns[j].role != "assistant":
                j += 1
            if j > i + 1 and not conv.add_tool_results(demo.turns[i + 1:j]):
                raise DemoError(f"it is longer than rollout.max_tokens ({max_tokens} tokens)")
            i = j
    except ChatFormatError as e:
        raise DemoError(str(e)) from None
    fields = conv.token_fields()
    return DemoTokens(demo.task_id, fields["token_ids"], fields["loss_mask"], recorded=False)


def _turn_text(fmt: ChatFormat, message: Message, prefill: str, index: int) -> str:
    """The assistant turn as the engine would have sampled it after ``prefill``: its text, and the
    end-of-turn token when it makes no call (a call turn stops at the call's close)."""
    text = fmt.turn_text(message)
    if prefill:
        if not text.startswith(prefill):
            raise DemoError(f"turn {index}: tool_choice forces a call that starts {prefill!r}, but the "
                            f"demonstration's turn starts {text[:len(prefill) + 10]!r}")
        text = text[len(prefill):]
    if not message.tool_calls:
        text += fmt.tokenizer.eos_token or ""
    return text
