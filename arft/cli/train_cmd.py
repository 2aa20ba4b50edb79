"""`arft train JOB` (or `--resume RUN_DIR`): reinforcement fine-tuning with a live display.

Thin command: load the job, pick the run directory, call ``arft.app.train.train`` with the
display's hooks, print the before/after summary.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer

from arft.app.train import train
from arft.cli.console import console, fail
from arft.cli.progress import TrainDisplay
from arft.config import JobError, load_job
from arft.tracing.run_dir import RunDir


def train_cmd(
    job_file: Optional[Path] = typer.Argument(None, help="Job spec (YAML or JSON). Not needed with --resume."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default: runs/<job>-train-<time>)."),
    resume: Optional[Path] = typer.Option(None, help="Continue this run directory from its latest checkpoint."),
    init_from: Optional[Path] = typer.Option(
        None, "--init-from", help="Start from this run's weights (an `arft sft` warm start); "
                                  "overrides training.init_from."),
) -> None:
    """Reinforcement fine-tuning: rollouts, grades, group-relative advantages, updates, evals."""
    if resume is not None:
        job_file = job_file or _job_file_of(resume)
    if job_file is None:
        fail("give a job file (or --resume RUN_DIR)")
    try:
        job = load_job(job_file)
    except JobError as e:
        fail(str(e))
    if init_from is not None:
        job = job.model_copy(update={"training": job.training.model_copy(
            update={"init_from": str(init_from.resolve())})})
    run_dir = RunDir(resume.resolve()) if resume else (
        RunDir(out.resolve()) if out else RunDir.new(job_file, job.run_dir, "train"))
    if resume is None:
        run_dir.path.mkdir(parents=True, exist_ok=True)
        run_dir.job_path.write_text(str(Path(job_file).resolve()))
    with TrainDisplay(console) as display:
        try:
            result = asyncio.run(train(job, run_dir, resume=resume is not None, hooks=display.hooks()))
        except ValueError as e:
            fail(str(e))
    display.final(result)
    console.print(f"\nrun stored in [bold]{run_dir.path}[/]  —  export the model: arft merge {run_dir.path} OUT_DIR")


def _job_file_of(run_dir: Path) -> Path:
    """The job file a training run started from (``RunDir.job_path``), for ``--resume``."""
    marker = RunDir(run_dir).job_path
    if not marker.exists():
        fail(f"{run_dir} does not say which job file it ran: pass the job file too")
    return Path(marker.read_text().strip())
