"""`arft doctor JOB`: check a job against the talk's four principles before training it;
`arft doctor RUN_DIR`: check that a training run's rollouts were sampled by the weights their step says.

Thin command: load the job and its data, call ``arft.app.doctor.run_doctor``, print the
verdicts (a table, or JSON with ``--json``). Exit 0 when nothing fails, 1 when a check fails
(warnings do not), 2 for input that cannot be read.
"""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from arft.app.doctor import Check, DoctorReport, load_data, run_doctor
from arft.cli.console import console, err
from arft.cli.inputs import set_option
from arft.cli.progress import RolloutProgress
from arft.config import load_job
from arft.tracing.run_dir import RunDir


def doctor_cmd(
    job_file: Path = typer.Argument(..., help="Job spec (YAML or JSON, hosted Agent RFT shape), or a "
                                    "training run's directory (checks its rollouts' weight stamps)."),
    traffic: Optional[Path] = typer.Option(
        None, "--traffic", help="Real traffic to check drift against: a JSONL of logged "
                                "{request, response} pairs, chat-completions requests, fine-tuning "
                                "chat rows or dataset rows (what `arft import` reads)."),
    samples: int = typer.Option(4, "--samples", min=2, help="Baseline rollouts per task."),
    tasks: int = typer.Option(8, "--tasks", min=1, help="Baseline on the first N training tasks."),
    no_rollouts: bool = typer.Option(
        False, "--no-rollouts", help="Static checks only: no model is loaded."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Where baseline rollouts are stored "
                            "(default: runs/<job>-doctor-<time>)."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts as JSON."),
    overrides: list[str] = set_option(),
) -> None:
    """Check a job against the four principles: a well-defined task, data like real traffic,
    a baseline that can improve by exploring, and an unhackable, continuous reward. Given a run
    directory: whether every rollout was sampled by the weights its step says (docs/weights.md)."""
    if RunDir(job_file).store.is_file():
        _doctor_run(job_file, as_json)
    job = load_job(job_file, overrides)
    data = load_data(job, traffic)
    run_dir = None if no_rollouts else (
        RunDir(out.resolve()) if out else RunDir.new(job_file, job.run_dir, "doctor"))
    total = min(tasks, len(data.train)) * samples
    go = partial(run_doctor, job, data, samples=samples, n_tasks=tasks,
                 rollouts=not no_rollouts, run_dir=run_dir, job_name=str(job_file))
    if no_rollouts:  # static checks take a second or two: no progress bar
        report = asyncio.run(go())
    else:  # with --json, stdout carries only the JSON: progress goes to stderr
        with RolloutProgress(err if as_json else console, total=total) as progress:
            report = asyncio.run(go(on_status=progress.status, on_done=progress.done))
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        render_doctor(report, console)
        render_cpu_kernels(console)
    raise typer.Exit(report.exit_code)


def _doctor_run(run_dir: Path, as_json: bool) -> None:
    """``arft doctor RUN_DIR``: the run checks; exits."""
    from arft.app.doctor.policy_checks import doctor_run

    report = doctor_run(run_dir)
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        render_doctor(report, console)
    raise typer.Exit(report.exit_code)


STYLES = {"pass": "bold green", "warn": "bold yellow", "fail": "bold red", "skip": "dim"}


def _finding(c: Check) -> Text:
    """What the check asks, what was measured, its details, threshold and advice, one cell."""
    t = Text(c.title, style="bold")
    t.append("\n" + c.measured)
    for d in c.details:
        t.append("\n  " + d, style="dim")
    if c.threshold:
        t.append(f"\nthreshold: {c.threshold}", style="dim italic")
    if c.advice:
        t.append("\n-> " + c.advice, style="red" if c.verdict == "fail" else "yellow")
    return t


def render_doctor(report: DoctorReport, console: Console) -> None:
    """One row per check: principle, check id, verdict, and what was found and what to do."""
    table = Table(title=f"arft doctor: {report.job}", title_justify="left", box=box.SIMPLE,
                  pad_edge=False, show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("check", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("finding (threshold) -> what to do", overflow="fold")
    for c in report.checks:
        table.add_row(str(c.principle), Text(c.id), Text(c.verdict, style=STYLES[c.verdict]),
                      _finding(c))
    console.print(table)
    console.print(Text(", ".join(f"{n} {v}" for v, n in report.counts().items()),
                       style="bold red" if report.failed else "bold green"))
    if report.baseline_run:
        console.print(Text(f"baseline rollouts stored in {report.baseline_run}  —  inspect one: "
                           f"arft show {report.baseline_run} <trace_id>"))


def render_cpu_kernels(console: Console) -> None:
    """One line per library of arft's CPU kernels: ``CPU kernels: <op> loaded``, or ``off because
    ...`` (docs/cpu.md; loading them builds them where ``python -m arft.cpu build`` has not)."""
    from arft.cpu import kernels

    for library in kernels.status():
        console.print(Text(f"CPU kernels: {library.line()}", style="yellow" if library.broken else ""))
