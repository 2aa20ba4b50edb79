"""Run many rollouts concurrently, grade each one and store it: the shared core of eval and train."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence

from arft.config import JobError, JobSpec, auto
from arft.engines.base import ChatEngine, SamplingParams, supports_constraints, TakesGrammar, TokenEngine
from arft.seeds import sample_seed
from arft.graders.registry import grade_rollout
from arft.graders.templates import render_template, TemplateError
from arft.chat.constraints import SchemaKeywords
from arft.chat.formats import ChatFormat
from arft.records import new_trace_id, Rollout, Task
from arft.rollout.conversation import ChatConversation, Conversation, TokenConversation
from arft.rollout.lockstep import Lockstep
from arft.rollout.loop import RolloutLimits, run_rollout
from arft.telemetry import NO_TELEMETRY, Telemetry
from arft.sandbox.workspace import WorkspaceError, create_workspace, remove_workspace
from arft.together import together
from arft.tools.registry import Toolbox
from arft.tracing.store import RunStore


def workspace_template(pattern: str | None, base_dir: Path, task: Task | None) -> Path | None:
    """The folder copied into ``task``'s workspaces: ``rollout.workspace`` with its ``{{ item.* }}``
    placeholders filled from the task's row (one repository per task), relative to the job file.

    Raises ``WorkspaceError`` naming the task when the folder does not exist or a placeholder has no
    value in the row.
    """
    if pattern is None:
        return None
    where = f"task {task.id}: " if task is not None else ""
    try:
        rendered = render_template(pattern, {}, task.item if task is not None else {})
    except TemplateError as e:
        raise WorkspaceError(f"{where}rollout.workspace: {e}; give every row that field") from None
    path = Path(rendered).expanduser()
    path = path if path.is_absolute() else (base_dir / path).resolve()
    if not path.is_dir():
        raise WorkspaceError(f"{where}rollout.workspace: {path} is not a directory; point it at a folder "
                             "to copy into each rollout's workspace (placeholders: {{ item.field }})")
    return path


def constrained_tool_calls(option: bool | str, engine: object) -> bool:
    """``rollout.constrained_tool_calls`` resolved for ``engine`` (``auto.constrained_tool_calls``
    told whether it can constrain sampling)."""
    return auto.constrained_tool_calls(option, supports_constraints(engine), type(engine).__name__)


def check_tool_grammar(engine: TokenEngine | ChatEngine, chat_format: ChatFormat,
                       schemas: Sequence[dict[str, object]], constrain: bool,
                       keywords: SchemaKeywords = "strict") -> None:
    """Compile the job's tool-call grammar now, so a schema the constraint cannot enforce stops the
    run before any rollout (``ConstraintError`` naming the tool and the schema keyword; with
    ``keywords="lenient"``, the one warning per tool comes now)."""
    grammar = chat_format.tool_grammar(schemas, constrain, keywords)
    if grammar is not None and isinstance(engine, TakesGrammar):
        engine.check_grammar(grammar)


class RolloutDriver(Protocol):
    """Who drives a rollout other than arft's own loop: the user's agent program through the
    gateway (``arft.app.gateway.driver``). It returns the ungraded rollout; the runner grades and
    stores it as any other."""

    async def rollout(self, task: Task, *, trace_id: str, run_id: str, sample_index: int,
                      step: int | None, seed: int | None) -> Rollout: ...


@dataclass
class RolloutRunner:
    """Everything needed to turn (task, sample index) into a graded, stored Rollout."""

    engine: TokenEngine | ChatEngine
    toolbox: Toolbox
    grader: Any  # arft.graders.base.Grader
    limits: RolloutLimits
    params: SamplingParams
    max_tokens: int
    tool_choice: str | dict[str, Any] | None
    chat_format: Any = None  # arft.chat.formats.ChatFormat, for token engines
    store: RunStore | None = None
    """Where every graded rollout is written; None keeps rollouts in memory only."""
    workspace_root: Path | None = None
    workspace: str | None = None
    """``rollout.workspace``: a template folder, or a pattern with ``{{ item.* }}`` placeholders."""
    base_dir: Path = Path(".")
    concurrency: int = 32
    constrain: bool = False
    """Constrained tool calls for every tool (``rollout.constrained_tool_calls`` resolved)."""
    schema_keywords: SchemaKeywords | Literal["auto"] = "auto"
    """``rollout.schema_keywords``; ``keywords_for`` resolves it per task."""
    driver: RolloutDriver | None = None
    """The job's agent program (``agent: python | command``); None: arft's own loop."""
    telemetry: Telemetry = NO_TELEMETRY
    """Where each rollout's spans go (``logging.opentelemetry``; a no-op by default)."""
    schedule: Literal["continuous", "lockstep"] = "continuous"
    """``rollout.schedule``: lockstep runs ``run_many``'s rollouts in rounds (``arft.rollout.lockstep``)."""

    @classmethod
    def from_job(cls, job: JobSpec, engine: TokenEngine | ChatEngine, toolbox: Toolbox, grader: object,
                 *, store: RunStore | None = None, workspace_root: Path | None = None) -> "RolloutRunner":
        """A runner with the job's limits, sampling and workspace settings (``workspace_root``:
        where per-rollout workspaces are made, the run directory's ``workspaces/``)."""
        chat_format = None
        if isinstance(engine, TokenEngine):
            chat_format = ChatFormat(engine.tokenizer, worked_example=job.rollout.worked_example)
        constrain = constrained_tool_calls(job.rollout.constrained_tool_calls, engine)
        if chat_format is not None and supports_constraints(engine):
            check_tool_grammar(engine, chat_format, [t.schema for t in toolbox.tools.values()], constrain,
                               "lenient" if job.rollout.schema_keywords == "lenient" else "strict")
        pattern = job.rollout.workspace
        if pattern is not None and "{{" not in pattern:
            workspace_template(pattern, job.base_dir, None)  # a fixed folder: check it now
        return cls(
            engine=engine, toolbox=toolbox, grader=grader, chat_format=chat_format, store=store,
            limits=RolloutLimits.from_spec(job.rollout, job.rl.max_steps),
            params=SamplingParams.from_spec(job.sampling, parallel_tool_calls=job.rollout.parallel_tool_calls),
            max_tokens=job.rollout.max_tokens, tool_choice=job.rollout.tool_choice,
            workspace_root=workspace_root,
            workspace=pattern, base_dir=job.base_dir, concurrency=job.rollout.concurrency,
            constrain=constrain, schema_keywords=job.rollout.schema_keywords, schedule=job.rollout.schedule)

    def keywords_for(self, task: Task) -> SchemaKeywords:
        """``schema_keywords`` for ``task``'s schemas: ``auto`` is lenient for a row's own
        ``tools`` (data the user did not write) and strict for the job's tools."""
        if self.schema_keywords != "auto":
            return self.schema_keywords
        return "lenient" if task.tools is not None else "strict"

    def conversation(self, task: Task, seed: int | None = None,
                     engine: TokenEngine | ChatEngine | None = None) -> Conversation:
        """``task``'s conversation with the runner's engine (or ``engine``: a lockstep seat's)."""
        engine = self.engine if engine is None else engine
        choice = task.tool_choice if task.tool_choice is not None else self.tool_choice
        params = self.params
        if task.parallel_tool_calls is not None and task.parallel_tool_calls != params.parallel_tool_calls:
            params = params.model_copy(update={"parallel_tool_calls": task.parallel_tool_calls})
        if isinstance(engine, TokenEngine):
            return TokenConversation(engine, self.chat_format, params, self.max_tokens, choice,
                                     seed=seed, constrain=self.constrain,
                                     schema_keywords=self.keywords_for(task))
        return ChatConversation(engine, params, self.max_tokens, choice, seed=seed)

    async def run_one(self, task: Task, sample_index: int, *, run_id: str = "", step: int | None = None,
                      seed: int | None = None, engine: TokenEngine | None = None) -> Rollout:
        """One rollout of ``task``: run, grade, store. ``run_id`` and ``step`` are stamped on the
        record (``Rollout.step``: the training step it belongs to); ``seed``: see
        ``TokenConversation``; ``engine``: a lockstep seat's, instead of the runner's."""
        trace_id = new_trace_id()
        workspace = self._workspace(trace_id, task)
        trace = self.telemetry.rollout(trace_id, run_id=run_id, task_id=task.id, sample_index=sample_index,
                                       step=step)
        try:
            with trace:
                if self.driver is not None:
                    rollout = await self.driver.rollout(task, trace_id=trace_id, run_id=run_id,
                                                        sample_index=sample_index, step=step, seed=seed)
                else:
                    rollout = await run_rollout(self.conversation(task, seed, engine), task, self.toolbox.lookup,
                                                self.limits, trace_id=trace_id, run_id=run_id,
                                                sample_index=sample_index, workspace=workspace, step=step,
                                                trace=trace)
                if rollout.status != "infra_failed":  # never grade (or fake-zero) an infra failure
                    with trace.grade() as span:
                        score = await grade_rollout(self.grader, rollout, workspace)
                        span.graded(score)
                    rollout = rollout.model_copy(update={
                        "score": score,
                        "timings": rollout.timings.model_copy(update={"grade_s": score.latency_s})})
                trace.done(rollout)
        finally:
            if workspace is not None:
                remove_workspace(workspace)
        if self.store is not None:
            self.store.add_rollout(rollout)
        return rollout

    def _workspace(self, trace_id: str, task: Task) -> Path | None:
        if self.workspace is None and not self.toolbox.needs_workspace:
            return None
        if self.workspace_root is None:
            raise ValueError("tools need a workspace: give the runner a run directory")
        template = workspace_template(self.workspace, self.base_dir, task)
        return create_workspace(self.workspace_root, template, trace_id)

    async def run_many(self, tasks: Sequence[Task], samples: int, *, run_id: str = "",
                       step: int | None = None, seed: int | None = None,
                       on_done: Callable[[Rollout], None] | None = None) -> list[Rollout]:
        """``samples`` rollouts of every task, at most ``concurrency`` at once, in task order
        (``run_id``, ``step``: stamped on each, see ``run_one``).

        With ``seed``, rollout (i, k) samples from seed ``sample_seed(seed, samples, i, k)``: the
        same seed reproduces the same rollouts whatever else runs concurrently.
        """
        if self.chat_format is not None and supports_constraints(self.engine) and self.driver is None:
            for task in {json.dumps(t.tools, sort_keys=True): t for t in tasks if t.tools}.values():
                check_tool_grammar(self.engine, self.chat_format, task.tools or (), self.constrain,
                                   self.keywords_for(task))
        gate = asyncio.Semaphore(self.concurrency)
        lockstep = self._lockstep(len(tasks) * samples)

        async def one(i: int, task: Task, k: int) -> Rollout:
            rollout_seed = None if seed is None else sample_seed(seed, samples, i, k)
            if lockstep is not None:
                async with lockstep.seat(i * samples + k) as engine:
                    rollout = await self.run_one(task, k, run_id=run_id, step=step, seed=rollout_seed,
                                                 engine=engine)
            else:
                async with gate:
                    rollout = await self.run_one(task, k, run_id=run_id, step=step, seed=rollout_seed)
            if on_done is not None:
                on_done(rollout)
            return rollout

        return await together(*(one(i, t, k) for i, t in enumerate(tasks) for k in range(samples)))

    def _lockstep(self, rollouts: int) -> Lockstep | None:
        """The rounds of one ``run_many`` (``schedule: lockstep``), or None (continuous)."""
        if self.schedule != "lockstep":
            return None
        if self.driver is not None or not isinstance(self.engine, TokenEngine):
            raise JobError("rollout.schedule: lockstep runs arft's own loop over a token engine (transformers "
                           "or vllm); an agent program or a chat engine sends its own requests: set "
                           "rollout.schedule: continuous")
        return Lockstep(self.engine, self.concurrency, rollouts)
