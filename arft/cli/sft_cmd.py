"""`arft sft JOB --data DEMOS`: a supervised warm start before `arft train`.

Thin command: load the job, pick the run directory, call ``arft.app.sft.sft`` with the training
display's hooks, print the before/after summary and the line that starts RL from the result.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer

from arft.app.sft import SftOptions, sft
from arft.cli.console import console, fail
from arft.cli.inputs import set_option
from arft.cli.progress import TrainDisplay
from arft.cli.runs import record_overrides, recorded_overrides
from arft.config import load_job
from arft.tracing.run_dir import RunDir


def sft_cmd(
    job_file: Path = typer.Argument(..., help="Job spec (YAML or JSON): the model, tools and validation set."),
    data: Path = typer.Option(..., "--data", help="Demonstrations: a JSONL of conversations (arft import's "
                              "demos.jsonl) or an `arft eval` run directory (any engine, a teacher's too)."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default: runs/<job>-sft-<time>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue --out from its latest checkpoint."),
    min_reward: Optional[float] = typer.Option(None, "--min-reward", help="Keep rollouts graded at least R."),
    min_score: list[str] = typer.Option(
        [], "--min-score", help="NAME=VALUE: keep rollouts whose grader sub-score NAME is at least VALUE "
                                "(repeatable; e.g. --min-score verified=1)."),
    best_of: Optional[int] = typer.Option(None, "--best-of", min=1, help="Keep the best K rollouts of each task."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Train on the first N demonstrations only."),
    epochs: int = typer.Option(3, "--epochs", min=1, help="Passes over the demonstrations."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Demonstrations per optimizer step."),
    learning_rate: Optional[float] = typer.Option(
        None, "--learning-rate", help="Default: the job's training.learning_rate x multiplier."),
    no_eval: bool = typer.Option(False, "--no-eval", help="Skip the baseline and final evaluations."),
    overrides: list[str] = set_option(),
) -> None:
    """Supervised warm start: imitate demonstrations (assistant tokens only), then `arft train`
    with `training.init_from: RUN_DIR` (or `arft train JOB --init-from RUN_DIR`)."""
    if resume and out is None:
        fail("--resume continues a run directory: give it with --out RUN_DIR")
    overrides = [*recorded_overrides(out if resume else None), *overrides]
    job = load_job(job_file, overrides)
    run_dir = RunDir(out.resolve()) if out else RunDir.new(job_file, job.run_dir, "sft")
    if not resume:
        run_dir.path.mkdir(parents=True, exist_ok=True)
        run_dir.job_path.write_text(str(Path(job_file).resolve()))
    record_overrides(run_dir, overrides)
    options = SftOptions(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                         min_reward=min_reward, min_scores=_scores(min_score), best_of=best_of, limit=limit,
                         evaluate=not no_eval)
    with TrainDisplay(console) as display:
        result = asyncio.run(sft(job, data, run_dir, options=options, resume=resume, hooks=display.hooks()))
    console.print(f"{result.demos} demonstrations ({result.recorded} on their recorded token ids)")
    for why, n in sorted(result.dropped.items(), key=lambda kv: -kv[1]):
        console.print(f"[dim]  dropped {n}: {why}[/]")
    display.final(result)
    console.print(f"\nwarm start stored in [bold]{run_dir.path}[/]  —  now RL from it: "
                  f"arft train {job_file} --init-from {run_dir.path}")


def _scores(pairs: list[str]) -> dict[str, float]:
    """``--min-score NAME=VALUE`` options as a dict (a clear error for anything else)."""
    out: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            fail(f"--min-score {pair!r}: write NAME=VALUE, e.g. --min-score verified=1")
    return out
