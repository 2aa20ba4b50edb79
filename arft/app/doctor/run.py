"""``run_doctor``: the static checks, then (with rollouts) a baseline over one ``open_run`` whose
grader also takes the audit."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from arft.app.doctor.checks import _check, Check, DoctorReport, EXPLORE, REWARD, skipped
from arft.app.doctor.reward_checks import audit_checks, check_pass_at_k, check_variance
from arft.app.doctor.task_checks import (check_drift, check_fields, check_grader, check_overlap,
                                         check_sizes, check_tools, DoctorData)
from arft.app.evaluate import evaluate
from arft.app.rescue import reference_hint
from arft.app.run import Engine
from arft.graders.base import Grader, close_grader
from arft.graders.registry import build_grader
from arft.tracing.run_dir import RunDir
from arft.config import JobSpec
from arft.records import Rollout, Task


async def _explore(job: JobSpec, tasks: list[Task], samples: int, run_dir: RunDir, engine: Engine | None,
                   grader: Grader, on_status: Callable[[str], None],
                   on_done: Callable[[Rollout], None] | None) -> tuple[list[Check], list[Rollout] | None]:
    """Baseline rollouts through the evaluator, and the two exploration checks."""
    try:
        result = await evaluate(job, tasks, samples, run_dir, engine=engine, grader=grader,
                                on_status=on_status, on_done=on_done, split="train")
    except ValueError as e:  # a bad tool spec or workspace the static checks did not catch
        return [_check("explore.variance", verdict="fail",
                       measured=f"the baseline did not run: {e}",
                       advice="fix the error, then run the doctor again"),
                *skipped(EXPLORE[1:], "no baseline")], None
    rollouts = result.rollouts
    hint = reference_hint(job) if job.training.rescue is None else None
    return [check_variance(rollouts, samples, has_tools=bool(job.rl.tools), hint=hint),
            check_pass_at_k(rollouts, samples)], rollouts


async def _static(job: JobSpec, data: DoctorData) -> list[Check]:
    """Principles 1 and 2, in report order."""
    tools = await check_tools(job, data)
    return [check_fields(job, data), tools, check_grader(job),
            check_sizes(data), check_overlap(data), check_drift(data)]


async def run_doctor(job: JobSpec, data: DoctorData, *, samples: int = 4, n_tasks: int = 8,
                     rollouts: bool = True, run_dir: RunDir | Path | None = None,
                     engine: Engine | None = None, on_status: Callable[[str], None] = lambda s: None,
                     on_done: Callable[[Rollout], None] | None = None,
                     job_name: str = "job") -> DoctorReport:
    """Run every check. With ``rollouts``, ``samples`` baseline rollouts of each of the first
    ``n_tasks`` training tasks are run (``engine``, or the job's model) and stored in ``run_dir``;
    the grader audit runs on the same tasks, with the same grader.
    """
    if rollouts and (run_dir is None or samples < 2):
        raise ValueError("baseline rollouts need a run_dir and at least 2 samples per task")
    on_status("checking the task, the data and the grader")
    static = await _static(job, data)
    verdicts = {c.id: c.verdict for c in static}
    broken = [i for i in ("task.tools", "task.grader") if verdicts[i] == "fail"]
    explore: list[Check] = skipped(EXPLORE, "--no-rollouts" if not rollouts else
                                   f"fix {broken[0]} first" if broken else "")
    if verdicts["task.grader"] == "fail":
        return DoctorReport(job=job_name, checks=[*static, *explore,
                                                  *skipped(REWARD, "fix task.grader first")])
    tasks, baseline = data.train[:n_tasks], None
    where = RunDir.of(run_dir) if run_dir is not None else None
    grader = build_grader(job.rl.grader, job.base_dir)
    try:
        if rollouts and not broken:
            assert where is not None
            explore, baseline = await _explore(job, tasks, samples, where, engine, grader,
                                               on_status, on_done)
        on_status("auditing the grader")
        reward = await audit_checks(job, tasks, grader, baseline)
    finally:
        await close_grader(grader)
    return DoctorReport(job=job_name, checks=[*static, *explore, *reward],
                        baseline_run=str(where.path) if where is not None and baseline is not None else None)
