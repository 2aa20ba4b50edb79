"""What every grader shares: the ``sample`` namespace it reads, its protocol and its errors.

A grader is a pure function of ``(sample, item)``: ``sample`` is built from a finished rollout by
``build_sample`` and ``item`` is the task row's extra keys. The sample follows the hosted
service's names so hosted grader specs work unchanged, with one deliberate difference:

* ``output_tools`` holds **every** tool call the model made across the whole rollout, not just
  the calls in the final message (the hosted single-turn meaning). An agent's final message is
  usually a plain answer with no calls, so the hosted meaning would almost always be empty.

and one addition: ``trajectory``, the whole rollout (every message and tool call with its output,
status, error and latency) because a grader must be able to see everything the agent did.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import difflib
import json
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from arft.config.graders import as_written
from arft.errors import ArftError
from arft.records import Message, Rollout, Score


class GraderError(ArftError):
    """A grader spec that cannot be used; the message names the grader and the field."""

    hint = "check the grader spec on its own with: arft grader validate SPEC.json (--item ROW to resolve it)"


@runtime_checkable
class Grader(Protocol):
    """Scores one rollout. Pure: the same ``(sample, item)`` always gets the same ``Score``."""

    name: str

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        """Grade ``sample`` (see ``build_sample``) against the task's ``item``."""
        ...


def _final_assistant(rollout: Rollout) -> Message | None:
    for m in reversed(rollout.messages):
        if m.role == "assistant":
            return m
    return None


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None


def _choice_finish_reason(rollout: Rollout, final: Message | None) -> str:
    """The OpenAI-vocabulary finish reason where one fits, else arft's own reason."""
    if final is not None and final.tool_calls:
        return "tool_calls"
    return {"answer": "stop", "max_tokens": "length"}.get(rollout.finish_reason,
                                                          rollout.finish_reason)


def build_sample(rollout: Rollout, workspace: Path | None = None) -> dict[str, object]:
    """The ``sample`` namespace graders read, as plain JSON-compatible values.

    Keys: ``output_text`` (an agent program's final output, else the content of the final
    assistant message, '' when none),
    ``output_json`` (``output_text`` parsed as JSON, ``None`` when it is not JSON),
    ``output_tools`` (all tool calls of the rollout, chat-completions shape, in order),
    ``choices`` (``[{"index": 0, "message", "finish_reason"}]`` for the final assistant message)
    and ``trajectory`` (``trace_id``, ``messages``, ``tool_calls`` records, ``n_tool_calls``,
    ``n_turns``, ``parse_errors``, ``finish_reason``, ``status``), plus ``workspace``: the path
    of the rollout's workspace while it still exists (graders such as ``tests_pass`` copy it and
    run the task's tests there), else ``None``.
    """
    final = _final_assistant(rollout)
    output_text = (final.content or "") if final is not None else ""
    if rollout.output is not None:  # what the agent program returned is its answer
        output_text = rollout.output
    output_tools = [call.model_dump(mode="json")
                    for m in rollout.messages if m.role == "assistant"
                    for call in m.tool_calls or ()]
    final_dict = final.to_openai() if final is not None else {"role": "assistant", "content": ""}
    return {
        "output_text": output_text,
        "output_json": _parse_json(output_text),
        "output_tools": output_tools,
        "choices": [{"index": 0, "message": final_dict,
                     "finish_reason": _choice_finish_reason(rollout, final)}],
        "trajectory": {
            "trace_id": rollout.trace_id,
            "messages": [m.to_openai() for m in rollout.messages],
            "tool_calls": [r.model_dump(mode="json") for r in rollout.tool_calls],
            # Counted from the executed-call records (refused and failed calls included).
            "n_tool_calls": len(rollout.tool_calls),
            "n_turns": rollout.n_turns,
            "parse_errors": rollout.parse_errors,
            "finish_reason": rollout.finish_reason,
            "status": rollout.status,
        },
        "workspace": str(workspace) if workspace is not None else None,
    }


SpecT = TypeVar("SpecT", bound=BaseModel)


def validate_spec(model: type[SpecT], spec: BaseModel | dict[str, object]) -> SpecT:
    """Validate a grader spec (a dict, or a typed spec from ``arft.config``: one of ``model`` is
    returned as it is); errors become a ``GraderError`` naming the grader and each field."""
    if isinstance(spec, model):
        return spec
    if isinstance(spec, BaseModel):
        spec = as_written(spec)
    try:
        return model.model_validate(spec)
    except ValidationError as err:
        name = spec.get("name") if isinstance(spec.get("name"), str) else None
        label = f"grader {name!r} ({spec.get('type')})" if name else f"{spec.get('type')} grader"
        fields = list(model.model_fields)
        lines = [f"{label}: invalid spec"]
        for e in err.errors():
            where = ".".join(str(p) for p in e["loc"]) or "(spec)"
            msg = e["msg"]
            if e["type"] == "extra_forbidden":
                close = difflib.get_close_matches(str(e["loc"][-1]), fields, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                msg = f"unknown field ({hint}fields are: {', '.join(fields)})"
            lines.append(f"  field '{where}': {msg}")
        raise GraderError("\n".join(lines)) from None


async def warm_up_grader(grader: object) -> None:
    """Start what a grader would otherwise start on its first grade (a python grader's sandbox
    pool), when it offers ``warm_up``; never raises (a start that fails is retried, and reported,
    by the grade that needs it)."""
    method = getattr(grader, "warm_up", None)
    if callable(method):
        try:
            await method()
        except Exception:  # noqa: BLE001 - an early start is an optimisation, never a failure
            return


async def close_grader(grader: object) -> None:
    """Release what a grader holds (worker pools, HTTP clients) when it offers ``aclose``/``close``."""
    for attr in ("aclose", "close"):
        method = getattr(grader, attr, None)
        if callable(method):
            result = method()
            if inspect.isawaitable(result):
                await result
            return

