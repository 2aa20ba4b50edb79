"""Rollouts driven by the user's agent program through the gateway (``agent: python | command``).

``ProgramDriver.rollout`` opens the rollout's gateway route, runs the program with that route as
its OpenAI base URL, and turns what the gateway captured into an ordinary ``Rollout``: the
messages of the last request and its reply, the tool calls read from the messages (the program
ran them itself), the exact tokens (``Capture``), the program's final output. Graders, ``arft
show``, the viewer and the report read it as any other rollout.

How it ends (one line each):
* the program returned: ``ok`` / ``answer``;
* a request was over ``rollout.max_tokens``, or the program failed right after a reply cut by
  ``sampling.max_new_tokens`` (the Agents SDK raises on an ``incomplete`` response): the policy's
  doing, so ``truncated`` / ``max_tokens``, graded as arft's own loop grades a truncated rollout;
* it timed out, raised, exited non-zero, or never called the gateway: ``infra_failed``, with the
  reason (stderr's tail) in ``error`` — not graded, no reward, excluded from the loss.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator

from arft.app.gateway.capture import Capture
from arft.app.gateway.programs import (AgentProgram, AgentSetupError, ClientSettings, CommandProgram, ProgramResult,
                                       PythonProgram)
from arft.app.gateway.server import Gateway, Route
from arft.app.serve.chat import ServedModel
from arft.chat.formats import ChatFormat
from arft.engines.base import SamplingParams, TokenEngine
from arft.records import FinishReason, Rollout, RolloutStatus, Task, Timings, ToolCallRecord
from arft.rollout.runner import constrained_tool_calls
from arft.telemetry import NO_TELEMETRY, Telemetry

if TYPE_CHECKING:
    from arft.config import JobSpec

API_KEY = "arft-gateway"
"""The key agent programs are given: the gateway listens on 127.0.0.1 only and checks none."""


@dataclass
class ProgramDriver:
    """Drives each rollout with the agent program (the runner's ``driver``)."""

    gateway: Gateway
    program: AgentProgram
    model_name: str
    concurrency: int | None = None
    """Most programs running at once (``agent.concurrency``; None: as many as the runner starts)."""
    kinds: Counter[str] = field(default_factory=Counter)
    """Prompts of every rollout so far by how their ids were made (first, append, retry, split)."""
    _semaphore: asyncio.Semaphore | None = field(default=None, repr=False)

    async def rollout(self, task: Task, *, trace_id: str, run_id: str, sample_index: int,
                      step: int | None, seed: int | None) -> Rollout:
        route = self.gateway.open(trace_id, seed)
        client = ClientSettings(self.gateway.base_url(trace_id), API_KEY, self.model_name, trace_id)
        start = time.perf_counter()
        try:
            async with self._gate():
                result = await self.program.run(program_row(task), client)
        finally:
            self.gateway.close(trace_id)
        self.kinds.update(route.capture.kinds)
        return captured_rollout(task, route, result, client, run_id=run_id, sample_index=sample_index,
                                step=step, total_s=time.perf_counter() - start)


    @asynccontextmanager
    async def _gate(self) -> AsyncIterator[None]:
        if self.concurrency is None:
            yield
            return
        if self._semaphore is None:  # made on first use: it belongs to the running loop
            self._semaphore = asyncio.Semaphore(self.concurrency)
        async with self._semaphore:
            yield


def program_row(task: Task) -> dict[str, Any]:
    """The dataset row as the program gets it: ``messages`` (and ``tools``, ``tool_choice`` when
    the row has them) plus the row's other fields."""
    # Every message keeps its ``content`` key (null beside ``tool_calls``, as the dataset writes
    # it): LangChain's message conversion refuses an assistant message without one.
    row: dict[str, Any] = {"messages": [{"content": None, **m.to_openai()} for m in task.messages]}
    if task.tools is not None:
        row["tools"] = [dict(t) for t in task.tools]
    if task.tool_choice is not None:
        row["tool_choice"] = task.tool_choice
    return {**row, **task.item}


def _ending(route: Route, result: ProgramResult, client: ClientSettings
            ) -> tuple[RolloutStatus, FinishReason, str | None]:
    if route.capture.overflow or (result.error is not None and route.capture.cut and not result.timed_out):
        return "truncated", "max_tokens", result.error
    if result.timed_out:
        return "infra_failed", "timeout", result.error
    if result.error is not None:
        return "infra_failed", "infra_failed", result.error
    if route.requests == 0:
        return "infra_failed", "infra_failed", (
            f"the agent never called the gateway: point its OpenAI client at {client.base_url} "
            "(the base_url arft passes, or OPENAI_BASE_URL)")
    return "ok", "answer", None


def captured_rollout(task: Task, route: Route, result: ProgramResult, client: ClientSettings, *,
                     run_id: str, sample_index: int, step: int | None, total_s: float) -> Rollout:
    """The ``Rollout`` of one program run (see the module docstring)."""
    capture = route.capture
    status, finish, error = _ending(route, result, client)
    messages = capture.segments[-1].messages if capture.segments else list(task.messages)
    return Rollout(
        trace_id=capture.trace_id, task_id=task.id, sample_index=sample_index, run_id=run_id, step=step,
        messages=tuple(messages), tool_calls=tool_call_records(capture), n_turns=capture.turns,
        finish_reason=finish, status=status, error=error, item=task.item,
        output=result.output if status == "ok" else None, policy=capture.policy,
        timings=Timings(total_s=total_s), **capture.token_fields())


def tool_call_records(capture: Capture) -> tuple[ToolCallRecord, ...]:
    """The calls the policy made through the gateway that the program answered, read from every
    segment's messages (once each, by call id), in order; a call the program never answered, or
    one the gateway never returned (a worked example in the row), is not a record."""
    seen: set[str] = set()
    records: list[ToolCallRecord] = []
    for seg in capture.segments:
        outputs = {m.tool_call_id: m for m in seg.messages if m.role == "tool" and m.tool_call_id}
        turn = -1
        for m in seg.messages:
            turn += m.role == "assistant"
            for call in m.tool_calls or ():
                reply = outputs.get(call.id)
                if reply is None or call.id in seen or call.id not in capture.call_ids:
                    continue
                seen.add(call.id)
                records.append(ToolCallRecord(trace_id=capture.trace_id, call_id=call.id, name=call.function.name,
                                              arguments=call.function.arguments, output=reply.content or "",
                                              turn=max(turn, 0)))
    return tuple(records)


def build_program(job: JobSpec) -> AgentProgram:
    spec = job.agent
    if spec.type == "python":
        return PythonProgram.from_spec(spec, job.base_dir, job.rollout.concurrency)
    if spec.type == "command":
        return CommandProgram.from_spec(spec, job.base_dir)
    raise AgentSetupError(f"agent type {spec.type!r} is arft's own loop, not a program")


@asynccontextmanager
async def program_driver(job: JobSpec, engine: object, telemetry: Telemetry = NO_TELEMETRY
                         ) -> AsyncIterator[ProgramDriver]:
    """The job's agent program behind a running gateway over ``engine``, closed on the way out
    (``telemetry``: where the gateway's model turns go, into each rollout's trace)."""
    if not isinstance(engine, TokenEngine):
        raise AgentSetupError(
            f"agent type {job.agent.type!r} trains through arft's gateway, which needs a token engine "
            f"(engine.type transformers or vllm), not {type(engine).__name__}")
    fmt = ChatFormat(engine.tokenizer, worked_example=job.rollout.worked_example)
    constrain = constrained_tool_calls(job.rollout.constrained_tool_calls, engine)
    model = ServedModel(name=job.model, engine=engine, fmt=fmt, constrain=constrain,
                        max_tokens=job.rollout.max_tokens)
    params = SamplingParams.from_spec(job.sampling, parallel_tool_calls=job.rollout.parallel_tool_calls)
    program = build_program(job)
    try:
        async with Gateway(model, params, job.rollout.max_tokens, telemetry).running() as gateway:
            yield ProgramDriver(gateway, program, job.model, getattr(job.agent, "concurrency", None))
    finally:
        program.close()

