"""``arft grade --replay RUN_DIR --grader NEW.json``: re-grade a stored run with another grader.

The stored trajectories are graded again as they are: no model, no tool, nothing else runs, and
the store is only read. Old and new rewards are compared per task. A rollout whose old grade
failed (a grader error) or that never had one (infra-failed) counts as *failed*, never as 0; so
does a rollout the new grader fails on. Graders that read the rollout's workspace get none (it
is deleted when the rollout ends; see docs/replay.md).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from arft.errors import ArftError
from arft.graders.base import close_grader
from arft.graders.registry import build_grader, grade_rollout
from arft.records import Rollout
from arft.together import together
from arft.tracing.run_dir import RunDir

CONCURRENCY = 16
"""Rollouts graded at once (a judge or endpoint grader is called this many times in parallel)."""


class RegradeError(ArftError):
    """The run directory has no run to re-grade (or not the one asked for)."""


@dataclass(frozen=True)
class TaskRegrade:
    """One task's rewards before and after (means over the rollouts graded without error)."""

    task_id: str
    rollouts: int
    old_mean: float | None
    new_mean: float | None
    old_failed: int
    """Rollouts with no usable old grade (infra-failed, or the old grader's error)."""
    new_failed: int

    @property
    def delta(self) -> float | None:
        return None if self.old_mean is None or self.new_mean is None else self.new_mean - self.old_mean


@dataclass(frozen=True)
class Regrade:
    """Every task of the chosen runs, and the overall means (over rollouts, as the summary's)."""

    run_ids: list[str]
    tasks: list[TaskRegrade]
    old_mean: float | None
    new_mean: float | None
    rollouts: int
    old_failed: int
    new_failed: int

    def as_json(self) -> dict[str, Any]:
        return {"runs": self.run_ids, "rollouts": self.rollouts, "old_mean": self.old_mean,
                "new_mean": self.new_mean, "old_failed": self.old_failed, "new_failed": self.new_failed,
                "tasks": [{"task_id": t.task_id, "rollouts": t.rollouts, "old_mean": t.old_mean,
                           "new_mean": t.new_mean, "delta": t.delta, "old_failed": t.old_failed,
                           "new_failed": t.new_failed} for t in self.tasks]}


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the rewards that exist (failed ones are left out, never read as 0)."""
    present = [v for v in values if v is not None]
    return fmean(present) if present else None


def chosen_runs(run_dir: RunDir, run_id: str | None) -> list[str]:
    """``run_id`` if the store has it, else every evaluation run (``arft eval``, training evals)."""
    with run_dir.open_store() as store:
        runs = store.runs()
    if run_id is not None:
        if not any(r["run_id"] == run_id for r in runs):
            known = ", ".join(r["run_id"] for r in runs) or "none"
            raise RegradeError(f"{run_dir.path} has no run {run_id!r}; its runs: {known}")
        return [run_id]
    evals = [r["run_id"] for r in runs if r["kind"] == "eval"]
    if not evals:
        raise RegradeError(f"{run_dir.path} has no evaluation run; pick one with --run RUN_ID "
                           f"(its runs: {', '.join(r['run_id'] for r in runs) or 'none'})")
    return evals


async def regrade(run_dir: RunDir | Path, grader_spec: dict[str, object], base_dir: Path,
                  run_id: str | None = None) -> Regrade:
    """Grade the stored rollouts of ``run_dir`` (``run_id``, default every eval run) with
    ``grader_spec`` (relative paths in it resolve against ``base_dir``) and compare."""
    rd = RunDir.of(run_dir)
    run_ids = chosen_runs(rd, run_id)
    with rd.open_store() as store:
        rollouts = [r for rid in run_ids for r in store.rollouts(rid)]
    grader = build_grader(grader_spec, base_dir)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def new_reward(r: Rollout) -> float | None:
        if r.status == "infra_failed":  # never graded: there is nothing the grader could read
            return None
        async with gate:
            score = await grade_rollout(grader, r)
        return r.model_copy(update={"score": score}).reward  # the same rule as the stored grade's

    try:
        news = await together(*(new_reward(r) for r in rollouts))
    finally:
        await close_grader(grader)
    return _compare(run_ids, [(r, r.reward, new) for r, new in zip(rollouts, news)])


def _compare(run_ids: list[str], pairs: Sequence[tuple[Rollout, float | None, float | None]]) -> Regrade:
    by_task: dict[str, list[tuple[float | None, float | None]]] = defaultdict(list)
    for rollout, old, new in pairs:
        by_task[rollout.task_id].append((old, new))
    tasks = [_task(task_id, rows) for task_id, rows in by_task.items()]
    olds, news = [old for _, old, _ in pairs], [new for _, _, new in pairs]
    return Regrade(run_ids, tasks, _mean(olds), _mean(news), len(pairs), olds.count(None), news.count(None))


def _task(task_id: str, rows: list[tuple[float | None, float | None]]) -> TaskRegrade:
    olds, news = [o for o, _ in rows], [n for _, n in rows]
    return TaskRegrade(task_id, len(rows), _mean(olds), _mean(news), olds.count(None), news.count(None))
