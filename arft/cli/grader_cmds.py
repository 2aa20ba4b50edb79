"""`arft grade` (the hosted graders/run) and `arft grader validate|audit`.

Thin commands: parse the arguments, call ``arft.graders.validate`` / ``arft.graders.audit``,
print. Grader modules are imported inside the commands so `arft --help` stays instant.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

grader_app = typer.Typer(no_args_is_help=True, help="Validate and audit graders.")
console = Console()
err = Console(stderr=True)


def _fail(message: str) -> NoReturn:
    err.print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(2)


def _read_object(value: str, what: str) -> tuple[dict[str, Any], Path]:
    from arft.cli.inputs import read_json_arg, require_object
    from arft.graders.validate import InputError

    try:
        data, base_dir = read_json_arg(value, what)
        return require_object(data, what), base_dir
    except InputError as e:
        _fail(str(e))


def _score_text(result: dict[str, Any]) -> Text:
    t = Text()
    style = "green" if result["passed"] else ("red" if result["error"] else "yellow")
    t.append("score   ", style="bold").append(f"{result['score']:.4g}", style=style)
    if result["passed"] is not None:
        t.append(f"  ({'passed' if result['passed'] else 'not passed'})")
    for name, value in result["sub_scores"].items():
        t.append(f"\n  {name}  ", style="bold").append(f"{value:.4g}")
    if result["flags"]:
        t.append("\nflags   ", style="bold").append(", ".join(result["flags"]), style="yellow")
    if result["error"]:
        t.append("\nerror   ", style="bold").append(result["error"], style="red")
    return t


def grade_cmd(
    grader: str = typer.Option(..., "--grader", "-g", help="Grader spec: a JSON file or inline JSON."),
    item: Optional[str] = typer.Option(
        None, "--item", "-i", help="The task item (JSON file or inline; default {})."),
    sample: Optional[str] = typer.Option(
        None, "--sample", "-s", help="A sample (JSON file or inline); missing keys get defaults."),
    model_sample: Optional[str] = typer.Option(
        None, "--model-sample", "-m", help="The model's answer text (instead of --sample)."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
) -> None:
    """Grade one sample (the hosted graders/run) and print the result as one JSON object.

    The object is {"score", "sub_scores", "passed", "error", "flags"}; exit 0 whatever the score.
    """
    from arft.graders.base import GraderError
    from arft.graders.validate import (InputError, complete_sample, run_grader, sample_from_text,
                                       score_json)

    if (sample is None) == (model_sample is None):
        _fail("pass exactly one of --sample (a sample JSON) or --model-sample (the answer text)")
    spec, base_dir = _read_object(grader, "--grader")
    item_data = _read_object(item, "--item")[0] if item is not None else {}
    try:
        full = (sample_from_text(model_sample) if model_sample is not None
                else complete_sample(_read_object(sample, "--sample")[0]))  # type: ignore[arg-type]
        score = asyncio.run(run_grader(spec, base_dir, item_data, full))
    except (GraderError, InputError) as e:
        _fail(f"{e}\n(check the spec with: arft grader validate GRADER)")
    result = score_json(score)
    if not as_json:
        console.print(_score_text(result))
    typer.echo(json.dumps(result))


@grader_app.command("validate")
def validate_cmd(
    grader: str = typer.Argument(..., help="Grader spec: a JSON file or inline JSON."),
    item: Optional[str] = typer.Option(
        None, "--item", "-i", help="A task item to resolve {{ item.* }} against."),
    sample: Optional[str] = typer.Option(
        None, "--sample", "-s", help="A sample to resolve {{ sample.* }} against."),
) -> None:
    """Check a grader spec (the hosted graders/validate): schema, template variables, python source."""
    from arft.graders.validate import InputError, validate_grader

    spec, base_dir = _read_object(grader, "grader")
    item_data = _read_object(item, "--item")[0] if item is not None else None
    sample_data = _read_object(sample, "--sample")[0] if sample is not None else None
    try:
        problems = validate_grader(spec, base_dir, item_data, sample_data)
    except InputError as e:
        _fail(str(e))
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


def _kinds_table(report: Any) -> Table:
    table = Table(title="Adversarial answers", title_justify="left", box=box.SIMPLE, pad_edge=False)
    for name, justify in [("kind", "left"), ("n", "right"), ("above", "right"),
                          ("mean", "right"), ("max", "right"), ("errors", "right")]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for kind, s in report.by_kind.items():
        fmt = (lambda x: "n/a" if x is None else f"{x:.3f}")
        table.add_row(kind, str(s.n), Text(str(s.n_above), style="red" if s.n_above else ""),
                      fmt(s.mean), fmt(s.max), str(s.n_errors))
    return table


def _hacks_table(report: Any, limit: int = 20) -> Table:
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


def _continuity_text(report: Any) -> Text:
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


def _load_baseline(run: Path) -> list[Any]:
    from arft.tracing.run_dir import RunDir
    from arft.tracing.store import StoreError

    try:
        with RunDir(run).open_store() as store:
            return store.rollouts()
    except StoreError as e:
        _fail(str(e))


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
) -> None:
    """Try to hack the job's grader with adversarial answers and check the reward is continuous."""
    from arft.config import JobError, load_job
    from arft.graders.audit import audit_grader
    from arft.graders.base import GraderError
    from arft.graders.registry import build_grader
    from arft.graders.validate import close_grader
    from arft.data.splits import load_split

    try:
        job = load_job(job_file)
        tasks = load_split(job, "validation", limit)
        grader = build_grader(job.rl.grader, job.base_dir)
    except (JobError, GraderError, ValueError) as e:
        _fail(str(e))
    baseline = _load_baseline(run) if run is not None else None

    async def go() -> Any:
        try:
            return await audit_grader(job, tasks, grader, baseline, threshold)
        finally:
            await close_grader(grader)

    report = asyncio.run(go())
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
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
