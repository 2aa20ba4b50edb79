"""The `arft` command line: thin commands that parse, call the library and print.

Heavy modules (torch, transformers) are imported inside the commands so `arft --help` is instant.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import NoReturn, Optional

import typer
from rich.console import Console

from arft.tracing.run_dir import RunDir
from arft.tracing.store import RunStore, StoreError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="arft — Agent Reinforcement Fine-Tuning you run yourself.")
console = Console()
err = Console(stderr=True)


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


@app.command("eval")
def eval_cmd(
    job_file: Path = typer.Argument(..., help="Job spec (YAML or JSON, hosted Agent RFT shape)."),
    split: str = typer.Option("validation", help="train | validation (falls back to train)."),
    samples: Optional[int] = typer.Option(None, help="Rollouts per task (default: eval_samples)."),
    limit: Optional[int] = typer.Option(None, help="Only the first N tasks."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default: runs/<job>-eval-<time>)."),
) -> None:
    """Run traced multi-turn rollouts of every task, grade them and print a summary (the baseline)."""
    from arft.cli.progress import RolloutProgress
    from arft.config import JobError, load_job
    from arft.app.evaluate import evaluate
    from arft.data.splits import load_split
    from arft.tracing.run_dir import RunDir

    if split not in ("train", "validation"):
        _fail(f"--split must be train or validation, not '{split}'")
    try:
        job = load_job(job_file)
        tasks = load_split(job, split, limit)  # type: ignore[arg-type]
    except (JobError, ValueError) as e:
        _fail(str(e))
    k = samples or job.rl.hyperparameters.resolved("eval_samples")
    run_dir = RunDir(out.resolve()) if out else RunDir.new(job_file, job.run_dir, "eval")
    with RolloutProgress(console, total=len(tasks) * k) as progress:
        try:
            result = asyncio.run(evaluate(job, tasks, k, run_dir, on_status=progress.status,
                                          on_done=progress.done, split=split))  # type: ignore[arg-type]
        except ValueError as e:  # a dataset naming a tool the job lacks, a bad grader or tool spec
            _fail(str(e))
    from arft.report.summary import render_summary

    render_summary(result.summary, console)
    console.print(f"\nrun stored in [bold]{result.run_dir.path}[/]  —  "
                  f"inspect one rollout: arft show {result.run_dir.path} <trace_id>")


@app.command("train")
def train_cmd(
    job_file: Optional[Path] = typer.Argument(None, help="Job spec (YAML or JSON). Not needed with --resume."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default: runs/<job>-train-<time>)."),
    resume: Optional[Path] = typer.Option(None, help="Continue this run directory from its latest checkpoint."),
) -> None:
    """Reinforcement fine-tuning: rollouts, grades, group-relative advantages, updates, evals."""
    from arft.cli.progress import TrainDisplay
    from arft.config import JobError, load_job
    from arft.app.train import train
    from arft.tracing.run_dir import RunDir

    if resume is not None:
        job_file = job_file or _job_file_of(resume)
    if job_file is None:
        _fail("give a job file (or --resume RUN_DIR)")
    try:
        job = load_job(job_file)
    except JobError as e:
        _fail(str(e))
    run_dir = RunDir(resume.resolve()) if resume else (
        RunDir(out.resolve()) if out else RunDir.new(job_file, job.run_dir, "train"))
    if resume is None:
        run_dir.path.mkdir(parents=True, exist_ok=True)
        run_dir.job_path.write_text(str(Path(job_file).resolve()))
    with TrainDisplay(console) as display:
        try:
            result = asyncio.run(train(job, run_dir, resume=resume is not None, hooks=display.hooks()))
        except ValueError as e:
            _fail(str(e))
    display.final(result)
    console.print(f"\nrun stored in [bold]{run_dir.path}[/]  —  export the model: arft merge {run_dir.path} OUT_DIR")


def _job_file_of(run_dir: Path) -> Path:
    marker = RunDir(run_dir).job_path
    if not marker.exists():
        _fail(f"{run_dir} does not say which job file it ran: pass the job file too")
    return Path(marker.read_text().strip())


@app.command("merge")
def merge_cmd(run_dir: Path = typer.Argument(..., help="A training run directory."),
              out_dir: Path = typer.Argument(..., help="Where to write the merged model.")) -> None:
    """Write the run's latest checkpoint as a plain Hugging Face model (safetensors + tokenizer)."""
    from arft.trainer.export import merge_run

    try:
        path = merge_run(run_dir, out_dir)
    except (ValueError, StoreError) as e:
        _fail(str(e))
    console.print(f"merged model written to [bold]{path}[/] — load it with "
                  f"AutoModelForCausalLM.from_pretrained('{path}')")


@app.command("show")
def show_cmd(run_dir: Path = typer.Argument(..., help="A run directory."),
             trace_id: Optional[str] = typer.Argument(None, help="A rollout's trace_id (default: list them).")) -> None:
    """Print one trajectory readably (or list the run's rollouts)."""
    from arft.report.trajectory import render_trajectory

    store = _open_store(run_dir)
    with store:
        if trace_id is None:
            for r in store.rollouts():
                reward = ("—" if r.score is None else "grader error" if r.reward is None
                          else f"{r.reward:.3f}")
                console.print(f"{r.trace_id}  task={r.task_id}  k={r.sample_index}  "
                              f"status={r.status}  reward={reward}  calls={len(r.tool_calls)}")
            return
        try:
            rollout = store.rollout(trace_id)
        except KeyError as e:
            _fail(str(e))
        render_trajectory(rollout, console)


@app.command("export")
def export_cmd(run_dir: Path = typer.Argument(..., help="A run directory."),
               out: Optional[Path] = typer.Option(None, "--out", "-o", help="JSONL file (default: stdout).")) -> None:
    """Write one JSON object per rollout (trace_id, task, messages, tool calls, reward, status, ...)."""
    from arft.tracing.export import export_rollouts

    store = _open_store(run_dir)
    with store:
        if out is None:
            n = export_rollouts(store, sys.stdout)
        else:
            with out.open("w") as f:
                n = export_rollouts(store, f)
    err.print(f"exported {n} rollouts" + (f" to {out}" if out else ""))


def _open_store(run_dir: Path) -> RunStore:
    try:
        return RunDir(run_dir).open_store()
    except StoreError as e:
        _fail(str(e))


def _register_grader_commands() -> None:
    from arft.cli import grader_cmds

    app.command("grade")(grader_cmds.grade_cmd)
    app.add_typer(grader_cmds.grader_app, name="grader")


_register_grader_commands()
# Insight commands (doctor, report, view) register themselves below, one line each.
from arft.cli.doctor_cmd import doctor_cmd; app.command("doctor")(doctor_cmd)  # noqa: E402,E702
from arft.cli.view_cmd import view_cmd; app.command("view")(view_cmd)  # noqa: E402,E702
from arft.cli.report_cmd import report_cmd; app.command("report")(report_cmd)  # noqa: E402,E702

if __name__ == "__main__":
    app()
