"""`arft grader validate|audit`: check a grader spec, and try to hack a job's grader.

Thin commands: read the arguments, call ``arft.graders.validate.validate_grader`` /
``arft.graders.audit.audit_grader``, print (tables, or JSON with ``--json``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from arft.cli.console import console, err
from arft.cli.inputs import read_object_arg, set_option
from arft.cli.runs import open_run_store
from arft.config import load_job
from arft.data.splits import load_split
from arft.graders.audit import AuditReport, audit_grader
from arft.graders.registry import build_grader
from arft.graders.validate import close_grader, validate_grader
from arft.records import Rollout

grader_app = typer.Typer(no_args_is_help=True, help="Validate and audit graders.")


@grader_app.command("validate")
def validate_cmd(
    grader: str = typer.Argument(..., help="Grader spec: a JSON file or inline JSON."),
    item: Optional[str] = typer.Option(
        None, "--item", "-i", help="A task item to resolve {{ item.* }} against."),
    sample: Optional[str] = typer.Option(
        None, "--sample", "-s", help="A sample to resolve {{ sample.* }} against."),
) -> None:
    """Check a grader spec (the hosted graders/validate): schema, template variables, python source."""
    spec, base_dir = read_object_arg(grader, "grader")
    item_data = read_object_arg(item, "--item")[0] if item is not None else None
    sample_data = read_object_arg(sample, "--sample")[0] if sample is not None else None
    problems = validate_grader(spec, base_dir, item_data, sample_data)
    if not problems:
        console.print(Text("valid", style="bold green") + Text(f": {spec.get('type')} grader "
                                                              f"{spec.get('name', '')!r}"))
        if item_data is None:
            console.print(Text("note: {{ item.* }} variables were only checked for syntax; pass "
                               "--item ROW to resolve them", style="dim"))
        return
    err.print(Text(f"invalid: {len(problems)} problem(s)", style="bold red"))
    for p in problems:
        err.print(Text("  - ") + Text(p))
    raise typer.Exit(2)


@grader_app.command("audit")
def audit_cmd(
    job_file: Path = typer.Argument(..., help="Job spec (YAML or JSON)."),
    run: Optional[Path] = typer.Option(
        None, "--run", help="A run directory from `arft eval`: baseline grades and tool outputs."),
    limit: Optional[int] = typer.Option(
        None, "--limit", min=1, help="Only the first N validation tasks."),
    threshold: float = typer.Option(
        0.5, "--threshold", help="An adversarial answer scoring above this is a hack."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    overrides: list[str] = set_option(),
) -> None:
    """Try to hack the job's grader with adversarial answers and check the reward is continuous."""
    job = load_job(job_file, overrides)
    tasks = load_split(job, "validation", limit)
    grader = build_grader(job.rl.grader, job.base_dir)
    baseline = _load_baseline(run) if run is not None else None

    async def go() -> AuditReport:
        try:
            return await audit_grader(job, tasks, grader, baseline, threshold)
        finally:
            await close_grader(grader)

    report = asyncio.run(go())
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    _print_audit(report)


def _load_baseline(run: Path) -> list[Rollout]:
    with open_run_store(run) as store:
        return store.rollouts()


def _print_audit(report: AuditReport) -> None:
    console.print(Text(f"grader {report.grader} ({report.grader_type}) on {report.n_tasks} "
                       f"task(s), {len(report.results)} adversarial answers", style="bold"))
    console.print(_kinds_table(report))
    if report.hacks:
        console.print(_hacks_table(report))
    console.print(_continuity_text(report))
    for w in report.warnings:
        console.print(Text("warning: ", style="bold yellow") + Text(w))
    if not report.warnings:
        console.print(Text("no hack found and the reward looks continuous", style="bold green"))


def _kinds_table(report: AuditReport) -> Table:
    table = Table(title="Adversarial answers", title_justify="left", box=box.SIMPLE, pad_edge=False)
    for name, justify in [("kind", "left"), ("n", "right"), ("above", "right"),
                          ("mean", "right"), ("max", "right"), ("errors", "right")]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for kind, s in report.by_kind.items():
        table.add_row(kind, str(s.n), Text(str(s.n_above), style="red" if s.n_above else ""),
                      _number(s.mean), _number(s.max), str(s.n_errors))
    return table


def _number(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _hacks_table(report: AuditReport, limit: int = 20) -> Table:
    table = Table(title=f"Hacks (score > {report.threshold:g})", title_justify="left",
                  box=box.SIMPLE, pad_edge=False)
    for name in ("task", "kind", "score", "answer"):
        table.add_column(name, overflow="fold")
    for h in report.hacks[:limit]:
        more = f" … ({h.answer_chars} chars)" if h.answer_chars > len(h.answer_preview) else ""
        table.add_row(Text(h.task_id), h.kind, f"{h.score:.3f}",
                      Text(h.answer_preview.replace("\n", " | ") + more))
    if len(report.hacks) > limit:
        table.add_row("…", f"{len(report.hacks) - limit} more", "", "(see --json)")
    return table


def _continuity_text(report: AuditReport) -> Text:
    c = report.continuity
    if c is None:
        return Text("continuity: no baseline (pass --run RUN_DIR from `arft eval`)", style="dim")
    if c.n_scores == 0:
        return Text(f"continuity: no real grades in the baseline ({c.n_grader_errors} grader errors)")
    style = "green" if c.continuous else "yellow"
    return (Text("continuity: ", style="bold")
            + Text(f"{c.n_scores} baseline grades, {c.n_distinct} distinct, "
                   f"{c.share_zero:.0%} exactly 0, {c.share_one:.0%} exactly 1, "
                   f"mean {c.mean:.3f} std {c.std:.3f}", style=style))
