"""`arft eval JOB`: traced rollouts of every task of a split, graded, and a summary (the baseline).

Thin command: load the job and the split, call ``arft.app.evaluate.evaluate``, print the summary
with ``arft.report.summary.render_summary``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer

from arft.app.evaluate import evaluate
from arft.cli.cassette_options import (CassetteFlags, cassette_overrides, print_counts, record_option,
                                      replay_miss_option, replay_option)
from arft.cli.console import console, fail
from arft.cli.inputs import set_option
from arft.cli.progress import RolloutProgress
from arft.config import load_job
from arft.data.splits import load_split
from arft.report.summary import render_summary
from arft.tracing.run_dir import RunDir


def eval_cmd(
    job_file: Path = typer.Argument(..., help="Job spec (YAML or JSON, hosted Agent RFT shape)."),
    split: str = typer.Option("validation", help="train | validation (falls back to train)."),
    samples: Optional[int] = typer.Option(None, help="Rollouts per task (default: eval_samples)."),
    limit: Optional[int] = typer.Option(None, help="Only the first N tasks."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default: runs/<job>-eval-<time>)."),
    overrides: list[str] = set_option(),
    record: Optional[Path] = record_option(),
    replay: Optional[Path] = replay_option(),
    replay_miss: Optional[str] = replay_miss_option(),
) -> None:
    """Run traced multi-turn rollouts of every task, grade them and print a summary (the baseline)."""
    if split not in ("train", "validation"):
        fail(f"--split must be train or validation, not '{split}'")
    overrides = [*overrides, *cassette_overrides(job_file, overrides, CassetteFlags(record, replay, replay_miss))]
    job = load_job(job_file, overrides)
    tasks = load_split(job, split, limit)  # type: ignore[arg-type]
    k = samples or job.rl.hyperparameters.resolved("eval_samples")
    run_dir = RunDir(out.resolve()) if out else RunDir.new(job_file, job.run_dir, "eval")
    with RolloutProgress(console, total=len(tasks) * k) as progress:
        result = asyncio.run(evaluate(job, tasks, k, run_dir, on_status=progress.status,
                                      on_done=progress.done, split=split))  # type: ignore[arg-type]
    render_summary(result.summary, console)
    print_counts(console, result.cassette)
    console.print(f"\nrun stored in [bold]{result.run_dir.path}[/]  —  "
                  f"inspect one rollout: arft show {result.run_dir.path} <trace_id>")
