"""``arft eval``: roll out the job's tasks with its engine, tools and grader, store, summarise."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from arft.app.run import Engine, job_record, open_run
from arft.config import JobSpec
from arft.data.splits import Split
from arft.graders.base import Grader
from arft.metrics.summary import EvalSummary, summarize
from arft.records import Rollout, Task
from arft.tools.cassette import CassetteCounts, cassette_counts
from arft.tracing.run_dir import RunDir


@dataclass
class EvalResult:
    run_id: str
    run_dir: RunDir
    rollouts: list[Rollout]
    summary: EvalSummary
    cassette: CassetteCounts | None = None
    """What the tool cassette did (``rollout.tool_cassette``); None when it is off."""


async def evaluate(job: JobSpec, tasks: list[Task], samples: int, run_dir: RunDir | Path, *,
                   engine: Engine | None = None, grader: Grader | None = None,
                   on_status: Callable[[str], None] = lambda s: None,
                   on_done: Callable[[Rollout], None] | None = None,
                   split: Split = "validation") -> EvalResult:
    """Run ``samples`` rollouts per task, grade and store them in ``run_dir``, and write its
    ``summary.json`` (``engine``, ``grader``: use these instead of the job's, and leave them open)."""
    run_dir = RunDir.of(run_dir)
    run_id = run_dir.path.name
    if job.cluster.ray is not None:
        on_status("cluster.ray is set, but arft eval runs in this process (only arft train scales out on Ray)")
    async with open_run(job, run_dir, engine=engine, grader=grader, splits={split: tasks}, on_status=on_status) as run:
        run.store.create_run(run_id, "eval", {**job_record(job), "split": split})  # arft export reads the split
        on_status("running rollouts")
        with run.telemetry.run(run_id, "eval"):  # the run's span; each rollout's trace links to it
            rollouts = await run.runner.run_many(tasks, samples, run_id=run_id, seed=job.sampling.seed,
                                                 on_done=on_done)
        summary = summarize(rollouts)
        counts = cassette_counts(run.toolbox)
        stored = summary.model_dump(mode="json") | ({"cassette": asdict(counts)} if counts else {})
        run_dir.summary.write_text(json.dumps(stored, indent=2))
        if counts is not None:  # misses are never silent: the run's metrics say how many
            run.store.add_metrics(run_id, 0, counts.metrics())
        run.store.finish_run(run_id, "completed")
    return EvalResult(run_id=run_id, run_dir=run_dir, rollouts=rollouts, summary=summary, cassette=counts)
