"""`arft train JOB` (or `--resume RUN_DIR`): reinforcement fine-tuning with a live display.

Thin command: load the job, pick the run directory, call ``arft.app.train.train`` with the
display's hooks, print the before/after summary.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer

from arft.app.session import TrainResult
from arft.app.sft import SftOptions
from arft.app.train import train
from arft.app.expert_iteration import WarmStart, expert_iteration, warm_start_dir
from arft.cli.cassette_options import (CassetteFlags, cassette_overrides, counts_of, print_counts,
                                      record_option, replay_miss_option, replay_option)
from arft.cli.console import console, fail
from arft.cli.inputs import set_option
from arft.cli.progress import TrainDisplay
from arft.cli.runs import record_overrides, recorded_overrides
from arft.config import JobSpec, load_job
from arft.tracing.run_dir import RunDir


def train_cmd(
    job_file: Optional[Path] = typer.Argument(None, help="Job spec (YAML or JSON). Not needed with --resume."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default: runs/<job>-train-<time>)."),
    resume: Optional[Path] = typer.Option(None, help="Continue this run directory from its latest checkpoint."),
    init_from: Optional[Path] = typer.Option(
        None, "--init-from", help="Start from this run's weights (an `arft sft` warm start); "
                                  "overrides training.init_from."),
    warm_start: Optional[int] = typer.Option(
        None, "--warm-start", min=1, help="Expert iteration first: sample K rollouts per training task, "
                                          "imitate the best success of each (arft sft), then RL from it."),
    warm_start_tasks: Optional[int] = typer.Option(
        None, "--warm-start-tasks", min=1, help="Sample only the first N training tasks."),
    warm_start_min_reward: Optional[float] = typer.Option(
        None, "--warm-start-min-reward", help="A success earns at least R (default: more than the worst sample)."),
    warm_start_epochs: int = typer.Option(6, "--warm-start-epochs", min=1, help="Passes over the successes "
                                                                                "(4 per optimizer step)."),
    ray_address: Optional[str] = typer.Option(
        None, "--ray", help="Run on a Ray cluster: auto (the one `ray start` made here), HOST:PORT, "
                            "ray://HOST:10001, or local (a new one); sizes from the job's cluster.ray."),
    overrides: list[str] = set_option(),
    record: Optional[Path] = record_option(),
    replay: Optional[Path] = replay_option(),
    replay_miss: Optional[str] = replay_miss_option(),
) -> None:
    """Reinforcement fine-tuning: rollouts, grades, group-relative advantages, updates, evals."""
    if resume is not None:
        job_file = job_file or _job_file_of(resume)
    if job_file is None:
        fail("give a job file (or --resume RUN_DIR)")
    overrides = [*recorded_overrides(resume), *overrides]  # a resumed run keeps the --set it started with
    overrides += cassette_overrides(job_file, overrides, CassetteFlags(record, replay, replay_miss))
    job = load_job(job_file, overrides)
    job = _on_ray(_init_from(job, init_from), ray_address)
    run_dir = RunDir(resume.resolve()) if resume else (
        RunDir(out.resolve()) if out else RunDir.new(job_file, job.run_dir, "train"))
    if resume is None:
        run_dir.path.mkdir(parents=True, exist_ok=True)
        run_dir.job_path.write_text(str(Path(job_file).resolve()))
    record_overrides(run_dir, overrides)
    plan = None if warm_start is None or resume is not None else WarmStart(
        samples=warm_start, tasks=warm_start_tasks, min_reward=warm_start_min_reward,
        sft=SftOptions(epochs=warm_start_epochs, batch_size=4, best_of=1, evaluate=False))
    with TrainDisplay(console) as display:
        result = asyncio.run(_train(job, run_dir, resume is not None, plan, display))
    display.final(result)
    print_counts(console, counts_of(result.history[-1]) if result.history else None)
    console.print(f"\nrun stored in [bold]{run_dir.path}[/]  —  export the model: arft merge {run_dir.path} OUT_DIR")


async def _train(job: JobSpec, run_dir: RunDir, resume: bool, plan: WarmStart | None,
                 display: TrainDisplay) -> TrainResult:
    if plan is not None:
        job, warm = await expert_iteration(job, run_dir, plan, hooks=display.hooks())
        console.print(f"warm start: {warm.demos} successes imitated ({warm_start_dir(run_dir)})")
    return await train(job, run_dir, resume=resume, hooks=display.hooks())


def _init_from(job: JobSpec, init_from: Path | None) -> JobSpec:
    """``job`` with --init-from as its ``training.init_from``."""
    if init_from is None:
        return job
    return job.model_copy(update={"training": job.training.model_copy(update={"init_from": str(init_from.resolve())})})


def _on_ray(job: JobSpec, address: str | None) -> JobSpec:
    """``job`` on the Ray cluster at ``address`` (--ray), sized by its ``cluster.ray`` (or the defaults)."""
    if address is None:
        return job
    from arft.config import ClusterSpec, RaySpec

    spec = (job.cluster.ray or RaySpec()).model_copy(update={"address": address})
    return job.model_copy(update={"cluster": ClusterSpec(ray=spec)})


def _job_file_of(run_dir: Path) -> Path:
    """The job file a training run started from (``RunDir.job_path``), for ``--resume``."""
    marker = RunDir(run_dir).job_path
    if not marker.exists():
        fail(f"{run_dir} does not say which job file it ran: pass the job file too")
    return Path(marker.read_text().strip())
