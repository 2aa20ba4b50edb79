"""Where ``arft sft`` gets its demonstrations, and how they become token ids.

Two sources:

* a JSONL of conversations (``arft import``'s ``demos.jsonl``, or rows in the dataset format
  whose messages go on past the prompt): each row's messages up to its first assistant message
  are the prompt, the rest is what to imitate;
* a run directory (``arft eval`` with any engine, a teacher behind ``engine: openai`` included):
  its graded rollouts, filtered with ``min_reward`` / ``best_of``.

A rollout whose task is in the job's training set is imitated from *that* task's prompt: a
teacher can be prompted differently (worked examples, a longer system prompt) and the student
still learns to act from the plain row. Demonstrations of validation tasks are dropped (they would
leak into the evaluation). Token in, token out: a rollout's recorded ids are used as they are when
the job renders its prompt to the same ids; otherwise the messages are replayed
(``arft.rollout.demonstration``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from arft.app.run import Run
from arft.config import JobError, JobSpec
from arft.data.dataset import DatasetError, load_tasks
from arft.data.splits import load_split
from arft.records import Message, Rollout, Task
from arft.rollout.demonstration import (DemoError, DemoTokens, Demonstration, replay, split_at_first_assistant,
                                        start_ids)
from arft.rollout.loop import task_tool_schemas
from arft.tracing.run_dir import RunDir


@dataclass
class DemoSet:
    """The demonstrations kept, and how many were dropped for which reason."""

    demos: list[Demonstration]
    dropped: Counter[str] = field(default_factory=Counter)


def load_demonstrations(job: JobSpec, source: Path) -> DemoSet:
    """The demonstrations in ``source`` (a JSONL file or a run directory), validation tasks left out.

    Raises ``DatasetError`` for a source that does not exist or cannot be read.
    """
    if source.is_dir():
        demos = _from_run(job, source)
    elif source.is_file():
        demos = [_from_row(t) for t in load_tasks(source)]
    else:
        raise DatasetError(f"{source}: no such file or run directory; give --data a JSONL of conversations "
                           "(arft import's demos.jsonl) or the directory of an `arft eval` run")
    held_out = {t.id for t in load_split(job, "validation")} if job.validation_file else set()
    out = DemoSet([])
    for d in demos:
        if d.task_id in held_out:
            out.dropped["a validation task (it would leak into the evaluation)"] += 1
        else:
            out.demos.append(d)
    return out


def _from_row(task: Task) -> Demonstration:
    prompt, turns = split_at_first_assistant(task.messages)
    return Demonstration(task.id, prompt, turns, task.tools, task.tool_choice)


def _from_run(job: JobSpec, source: Path) -> list[Demonstration]:
    with RunDir(source).open_store() as store:
        run_ids = [r["run_id"] for r in store.runs() if r["kind"] == "eval"]
        rollouts = [r for run_id in run_ids for r in store.rollouts(run_id)]
    if not rollouts:
        raise DatasetError(f"{source} holds no evaluation rollouts: run `arft eval JOB --out {source}` "
                           "(with the teacher's engine, or the policy's) first")
    tasks = {t.id: t for t in load_split(job, "train")}
    return [_from_rollout(r, tasks.get(r.task_id)) for r in rollouts if r.status != "infra_failed"]


def _from_rollout(r: Rollout, task: Task | None) -> Demonstration:
    """The rollout's own turns after its prompt, imitated from the job's task when it has it."""
    turns = _generated_turns(r.messages)
    n_prompt = len(r.messages) - len(turns)
    prompt = task.messages if task is not None else tuple(r.messages[:n_prompt])
    tools = task.tools if task is not None else None
    choice = task.tool_choice if task is not None else None
    return Demonstration(r.task_id, prompt, turns, tools, choice, reward=r.reward,
                         sub_scores=dict(r.score.sub_scores) if r.reward is not None and r.score else {},
                         token_ids=r.token_ids, loss_mask=r.loss_mask, trace_id=r.trace_id)


def _generated_turns(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The turns a rollout added: everything after its last system, developer or user message
    (the loop adds only assistant turns and tool results, so worked-example turns inside the
    prompt stay in the prompt)."""
    last = max((i for i, m in enumerate(messages) if m.role in ("system", "developer", "user")), default=-1)
    return tuple(messages[last + 1:])


def select(demos: DemoSet, *, min_reward: float | None = None, min_scores: Mapping[str, float] | None = None,
           best_of: int | None = None, limit: int | None = None) -> DemoSet:
    """Keep demonstrations graded at least ``min_reward`` whose grader sub-scores reach
    ``min_scores`` (e.g. ``{"verified": 1}``), then the ``best_of`` best per task (ties keep the
    earlier one), then the first ``limit`` (in task order)."""
    out = DemoSet([], Counter(demos.dropped))
    kept = []
    for d in demos.demos:
        why = _below(d, min_reward, min_scores or {})
        if why:
            out.dropped[why] += 1
        else:
            kept.append(d)
    if best_of is not None:
        by_task: dict[str, list[Demonstration]] = defaultdict(list)
        for d in kept:
            by_task[d.task_id].append(d)
        kept = []
        for group in by_task.values():
            ranked = sorted(group, key=lambda d: -(d.reward if d.reward is not None else float("-inf")))
            kept += ranked[:best_of]
            if len(group) > best_of:
                out.dropped[f"not among the best {best_of} of its task"] += len(group) - best_of
    if limit is not None and len(kept) > limit:
        out.dropped[f"past --limit {limit}"] += len(kept) - limit
        kept = kept[:limit]
    out.demos = kept
    return out


def _below(d: Demonstration, min_reward: float | None, min_scores: Mapping[str, float]) -> str:
    """Why ``d`` misses the bar ('' when it does not)."""
    if (min_reward is not None or min_scores) and d.reward is None:
        return "not graded (--min-reward / --min-score need graded rollouts)"
    if min_reward is not None and d.reward is not None and d.reward < min_reward:
        return f"reward below --min-reward {min_reward}"
    for name, floor in min_scores.items():
        if d.sub_scores.get(name, float("-inf")) < floor:
            return f"sub-score {name} below {floor}"
    return ""


async def tokenize(run: Run, demos: Sequence[Demonstration]) -> tuple[list[DemoTokens], Counter[str]]:
    """Token ids and loss masks of ``demos`` in ``run``'s rendering, and why the others were dropped."""
    fmt, job = run.runner.chat_format, run.job
    if fmt is None:
        raise JobError("arft sft trains the job's own model: set engine.type to transformers")
    out, dropped = [], Counter[str]()
    for d in demos:
        task = Task(id=d.task_id, messages=d.prompt, tools=d.tools, tool_choice=d.tool_choice)
        schemas = task_tool_schemas(task, run.toolbox.tools)
        unknown = _unknown_tools(d, schemas, run.toolbox.lookup)
        if unknown:
            dropped[f"calls a tool the job does not have ({unknown})"] += 1
            continue
        choice = d.tool_choice if d.tool_choice is not None else job.rollout.tool_choice
        start = start_ids(fmt, d, schemas, choice, job.rollout.max_tokens)
        if d.token_ids and any(d.loss_mask) and list(d.token_ids[:len(start)]) == start:
            out.append(DemoTokens(d.task_id, d.token_ids, d.loss_mask, recorded=True))
            continue
        try:
            out.append(await replay(fmt, d, schemas, choice, job.rollout.max_tokens))
        except DemoError as e:
            dropped[str(e)] += 1
    return out, dropped


def _unknown_tools(d: Demonstration, schemas: Sequence[dict], job_tools: Container[str]) -> str:
    """Names the demonstration offers or calls that the job's tools do not provide ('' if none)."""
    offered = {str((s.get("function") or s).get("name")) for s in schemas}  # checked schemas: names are strings
    called = {tc.function.name for m in d.turns for tc in m.tool_calls or ()}
    return ", ".join(sorted(n for n in (offered | called) if n not in job_tools or n not in offered))
