"""`arft eval` as a library call: load the job's data, engine, tools and grader, run, store, summarise."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from arft.config import JobSpec
from arft.graders.base import close_grader
from arft.records import Rollout, Task


@dataclass
class EvalResult:
    run_id: str
    run_dir: Path
    rollouts: list[Rollout]
    summary: Any  # arft.report.summary.EvalSummary


def default_run_dir(job_path: Path | None, job: JobSpec, kind: str) -> Path:
    """``job.run_dir`` when set, else ``runs/<job name>-<kind>-<time>`` under the current directory."""
    if job.run_dir:
        return Path(job.run_dir).expanduser().resolve()
    stem = job_path.stem if job_path else "job"
    return Path("runs").resolve() / f"{stem}-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


def load_split(job: JobSpec, split: Literal["train", "validation"], limit: int | None) -> list[Task]:
    """The tasks of one split (validation falls back to train when the job has none)."""
    from arft.data.dataset import load_tasks

    tasks = load_tasks(split_path(job, split))
    return tasks[:limit] if limit else tasks


def split_path(job: JobSpec, split: Literal["train", "validation"]) -> Path:
    name = job.validation_file if split == "validation" and job.validation_file else job.training_file
    if name is None:
        raise ValueError("the job names no dataset: set training_file (and validation_file)")
    path = job.path(name)
    assert path is not None
    return path


def check_tools(job: JobSpec, tasks: list[Task], toolbox: Any,
                split: Literal["train", "validation"]) -> None:
    """Every tool a task names must be one of the started tools (MCP names included), and every
    task's workspace template (``rollout.workspace``, per-row placeholders filled) must exist."""
    from arft.data.dataset import check_task_tools
    from arft.rollout.runner import workspace_template

    check_task_tools(tasks, set(toolbox.tools), split_path(job, split))
    if job.rollout.workspace is not None and "{{" in job.rollout.workspace:
        for task in tasks:
            workspace_template(job.rollout.workspace, job.base_dir, task)


async def evaluate(job: JobSpec, tasks: list[Task], samples: int, run_dir: Path,
                   engine: Any = None, on_status: Callable[[str], None] = lambda s: None,
                   on_done: Callable[[Rollout], None] | None = None,
                   split: Literal["train", "validation"] = "validation") -> EvalResult:
    """Run ``samples`` rollouts per task, grade and store them under ``run_dir``."""
    from arft.engines.factory import build_engine
    from arft.graders.registry import build_grader
    from arft.report.summary import summarize
    from arft.rollout.runner import RolloutRunner
    from arft.tools.registry import open_toolbox
    from arft.tracing.store import RunStore

    grader = build_grader(job.rl.grader, job.base_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = run_dir.name
    own_engine = engine is None
    if engine is None:
        on_status(f"loading model {job.model}")
        engine = build_engine(job)
    on_status("starting tools")
    try:
        toolbox = await open_toolbox(job.rl.tools, job.base_dir)
        try:
            check_tools(job, tasks, toolbox, split)
        except BaseException:
            await toolbox.aclose()
            raise
    except BaseException:
        if own_engine:
            await engine.aclose()
        raise
    store = RunStore(run_dir / "arft.sqlite")
    try:
        store.create_run(run_id, "eval", job.model_dump(mode="json"))
        runner = RolloutRunner.from_job(job, engine, toolbox, grader, store=store, run_id=run_id,
                                        run_dir=run_dir)
        on_status("running rollouts")
        rollouts = await runner.run_many(tasks, samples, on_done, seed=job.sampling.seed)
        summary = summarize(rollouts)
        (run_dir / "summary.json").write_text(json.dumps(summary.model_dump(mode="json"), indent=2))
        store.finish_run(run_id, "completed")
    finally:
        store.close()
        await toolbox.aclose()
        await close_grader(grader)
        if own_engine:
            await engine.aclose()
    return EvalResult(run_id=run_id, run_dir=run_dir, rollouts=rollouts, summary=summary)
