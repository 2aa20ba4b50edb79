"""`arft import LOGS -o DIR`: logged chat-completions traffic -> dataset rows + demonstrations.

Thin command: parse the options, call ``arft.data.importer.import_traffic`` (with a progress bar
on stderr while the log is read), print a summary table and the next commands to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich import box
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from arft.cli.console import console, err
from arft.cli.inputs import set_option
from arft.config import load_job
from arft.data.checks import NEAR_DUPLICATE_RATIO
from arft.data.importer import ImportReport, import_traffic

MAX_SHOWN_ERRORS = 5
MAX_SHOWN_PAIRS = 3


def import_cmd(
    logs: Path = typer.Argument(..., help="JSONL of logged traffic: {request, response} pairs, "
                                          "chat-completions requests or fine-tuning chat rows."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (must be empty unless --force)."),
    job_file: Optional[Path] = typer.Option(
        None, "--job", help="Keep only the tools this job has; drop rows calling others."),
    item: Optional[List[str]] = typer.Option(
        None, "--item", help="KEY=PATH: copy a value of each log line into the row's item "
                             "(e.g. answer=metadata.expected); repeatable."),
    item_optional: bool = typer.Option(
        False, "--item-optional", help="A line without an --item path is imported without the key "
                                       "(default: it is reported and skipped)."),
    near_dup: float = typer.Option(
        NEAR_DUPLICATE_RATIO, "--near-dup", help="Drop prompts with rapidfuzz ratio >= this to an earlier one "
                                 "(100: off)."),
    val_fraction: float = typer.Option(0.1, "--val-fraction", help="Share of rows for validation."),
    redact: Optional[List[str]] = typer.Option(
        None, "--redact", help="REGEX to replace by [REDACTED], or 'pii' (emails, phones, cards, "
                               "API keys, IPv4); repeatable."),
    redact_hook: Optional[str] = typer.Option(
        None, "--redact-hook", help="file.py:function (str -> str) applied to every string."),
    force: bool = typer.Option(False, "--force", help="Overwrite the import files in a non-empty --out."),
    overrides: list[str] = set_option(),
) -> None:
    """Turn logged chat-completions traffic into arft dataset rows (the episode starts) and
    demonstrations (the whole logged conversations)."""
    job = load_job(job_file, overrides) if job_file is not None else None
    with _progress() as progress:
        bar = progress.add_task(f"reading {logs.name}", total=None)
        report = import_traffic(
            logs, out, job=job, item_paths=item or (), item_optional=item_optional,
            near_dup=near_dup, val_fraction=val_fraction, redact=redact or (),
            redact_hook=redact_hook, force=force,
            on_progress=lambda done, total: progress.update(bar, completed=done, total=total))
    _render(report)
    _render_near_duplicates(report)
    _next_steps(report, logs, out, job_file)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                    TimeElapsedColumn(), console=err, transient=True)


def _render(report: ImportReport) -> None:
    """The counts as a table (stdout); the first bad lines on stderr."""
    table = Table(title=f"arft import: {report.logs} -> {report.out}", title_justify="left",
                  box=box.SIMPLE, pad_edge=False, show_header=False)
    table.add_column("what")
    table.add_column("count", justify="right")
    dropped = ", ".join(f"{n} x{c}" for n, c in report.dropped_unknown_tools.items())
    for label, value in [
        ("lines read", report.lines), ("bad lines (skipped)", report.bad_lines),
        ("duplicate starts merged", report.duplicates_merged),
        (f"near-duplicates removed (ratio >= {report.near_duplicate_ratio:g})",
         report.near_duplicates_removed),
        ("rows dropped: unknown tools" + (f" ({dropped})" if dropped else ""),
         report.rows_dropped_unknown_tools),
        ("redactions", report.redactions), ("rows", report.rows), ("  train", report.train),
        ("  validation", report.validation), ("demonstrations", report.demos)]:
        table.add_row(Text(label), str(value))
    console.print(table)
    for note in report.notes:
        console.print(Text("note: " + note, style="yellow"))
    if report.mcp_tools_unchecked:
        console.print(Text("note: the job has MCP tools whose names are known only when they run: "
                           "calls to other names were kept, not checked "
                           f"({', '.join(report.unchecked_tool_calls) or 'none seen'})",
                           style="yellow"))
    if report.message_keys_dropped:
        keys = ", ".join(f"{k} x{n}" for k, n in report.message_keys_dropped.items())
        console.print(Text(f"note: message fields not kept (no chat message holds them): {keys}",
                           style="yellow"))
    for line in report.errors[:MAX_SHOWN_ERRORS]:
        err.print(Text(line, style="red"))
    if report.bad_lines > MAX_SHOWN_ERRORS:
        err.print(Text(f"... and {report.bad_lines - MAX_SHOWN_ERRORS} more bad line(s): see "
                       f"{Path(report.out) / 'import_report.json'}", style="red"))


def _render_near_duplicates(report: ImportReport) -> None:
    """The first dropped near-duplicates beside the rows they matched, as compared (what varies
    between requests); all of them are in import_report.json."""
    pairs = report.near_duplicate_pairs
    if not pairs:
        return
    console.print(Text(f"near-duplicates dropped, compared on what varies between requests "
                       f"(all {report.near_duplicates_removed}: near_duplicate_pairs in "
                       f"{Path(report.out) / 'import_report.json'}):", style="yellow"))
    for p in pairs[:MAX_SHOWN_PAIRS]:
        console.print(Text(f"  {p.dropped} ~ {p.kept} (ratio {p.ratio:g}): {p.compared[0][:60]!r} ~ "
                           f"{p.compared[1][:60]!r}"))


def _next_steps(report: ImportReport, logs: Path, out: Path, job_file: Path | None) -> None:
    job = str(job_file) if job_file is not None else "JOB.yaml"
    console.print(Text("next:", style="bold"))
    console.print(Text(f"  set training_file: {out / 'train.jsonl'} and validation_file: "
                       f"{out / 'validation.jsonl'} in {job}"))
    console.print(Text(f"  arft doctor {job} --traffic {logs}"))
    if report.demos and _has_command("sft"):
        console.print(Text(f"  arft sft {job} --data {out / 'demos.jsonl'}"))


def _has_command(name: str) -> bool:
    from arft.cli.main import COMMANDS  # at run time: main imports this module

    return any(n == name for n, _ in COMMANDS)
