"""`arft import`: logged traffic -> dataset rows (train / validation) + demonstrations.

The steps, in order: read the log (``arft.data.traffic``; redaction happens while reading, so
nothing unredacted is compared or written), merge records with the same episode start (the
turns of one session: the longest conversation is kept as the demonstration), drop rows whose
demonstration calls a tool the job lacks, drop near-duplicate prompts, split by a hash of the
row id, write ``train.jsonl``, ``validation.jsonl``, ``demos.jsonl`` and ``import_report.json``.

Near-duplicates are judged on what varies between requests, not on the text they share
(``arft.data.near_dup``); every dropped row is listed in the report beside the row it matched.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import BaseModel

from arft.config import JobSpec, McpToolSpec, PythonToolSpec
from arft.data.checks import NEAR_DUPLICATE_RATIO
from arft.data.redact import build_redactor
from arft.data.dataset import TrafficImportError
from arft.data.near_dup import (NEAR_DUP_METHOD, find_near_duplicates, near_duplicates, user_text,
                                varying_texts)
from arft.data.traffic import TrafficRecord, canonical, parse_item_paths, read_traffic

__all__ = ["ImportReport", "NearDuplicatePair", "TrafficImportError", "import_traffic", "job_tool_names",
           "near_duplicates", "split_hash"]

MAX_ERRORS = 100
MAX_PAIRS = 1000
"""Near-duplicate pairs listed in the report (the count covers them all)."""
PAIR_TEXT_CHARS = 300
OUTPUT_FILES = ("train.jsonl", "validation.jsonl", "demos.jsonl", "import_report.json")


class NearDuplicatePair(BaseModel):
    """A row dropped as a near-duplicate and the row kept in its place, for a person to check."""

    dropped: str
    """The dropped row's id (it is in no output file)."""
    kept: str
    ratio: float
    """rapidfuzz ``fuzz.ratio`` of the two compared texts (0-100)."""
    dropped_text: str
    """The dropped request's user turns (lower-cased, the first ``PAIR_TEXT_CHARS`` characters)."""
    kept_text: str
    compared: tuple[str, str]
    """What was compared: the two requests without the words most requests share."""


class ImportReport(BaseModel):
    """What an import read, merged, dropped and wrote (``import_report.json``)."""

    logs: str
    out: str
    lines: int
    """Non-blank lines read."""
    bad_lines: int
    errors: list[str]
    """``file:line: reason`` of the first ``MAX_ERRORS`` bad lines."""
    records: int
    """Valid lines."""
    duplicates_merged: int
    """Records that repeated an episode start already seen (session turns, exact copies)."""
    near_duplicates_removed: int
    near_duplicate_ratio: float
    near_duplicate_method: str = NEAR_DUP_METHOD
    near_duplicate_pairs: list[NearDuplicatePair] = []
    """Each dropped near-duplicate with the row it matched (the first ``MAX_PAIRS``)."""
    rows_dropped_unknown_tools: int = 0
    dropped_unknown_tools: dict[str, int] = {}
    """Demonstrations calling a tool the job lacks, by tool name (rows dropped)."""
    offered_tools_removed: dict[str, int] = {}
    """Offered tools (and forced ``tool_choice`` tools) the job lacks, removed from rows."""
    mcp_tools_unchecked: bool = False
    """The job has MCP tools whose names are only known once the server runs: calls to names
    such a server may have were kept, not checked (counted in ``unchecked_tool_calls``)."""
    unchecked_tool_calls: dict[str, int] = {}
    redactions: int = 0
    message_keys_dropped: dict[str, int] = {}
    """Non-empty message fields a chat message cannot hold (e.g. reasoning_content), by key."""
    rows: int
    train: int
    validation: int
    demos: int
    notes: list[str] = []
    seconds: float = 0.0


@dataclass
class _Row:
    """One task: its id, the record kept for it (the longest conversation) and its tools."""

    id: str
    record: TrafficRecord
    tools: list[dict[str, Any]] | None
    tool_choice: str | dict[str, Any] | None
    split: str = "train"


def job_tool_names(job: JobSpec) -> tuple[set[str], tuple[str, ...]]:
    """The tool names a job gives the model, known without starting a tool, and the name
    prefixes of its MCP servers without ``include`` (their names are known only once they run:
    any name with such a prefix may be theirs; ``""`` means any name may be)."""
    names: set[str] = set()
    prefixes: list[str] = []
    for spec in job.rl.tools:
        if isinstance(spec, PythonToolSpec):
            # The name defaults to the function's own name: the last part of `file.py:attr`.
            names.add(spec.name or spec.function.rpartition(":")[2].rpartition(".")[2])
        elif isinstance(spec, McpToolSpec):
            if spec.include is None:
                prefixes.append(spec.name_prefix)
            else:
                names |= {spec.name_prefix + n for n in spec.include}
        else:
            names.add(spec.name)
    return names, tuple(prefixes)


def import_traffic(logs: Path, out: Path, *, job: JobSpec | None = None,
                   item_paths: Sequence[str] = (), item_optional: bool = False,
                   near_dup: float = NEAR_DUPLICATE_RATIO, val_fraction: float = 0.1,
                   redact: Sequence[str] = (), redact_hook: str | None = None, force: bool = False,
                   on_progress: Callable[[int, int], None] | None = None) -> ImportReport:
    """Import the traffic log ``logs`` into the folder ``out`` (see the module docstring).

    Raises ``TrafficImportError`` (``RedactError`` for a bad redaction, ``DatasetError`` for a
    missing log) before anything is written when the input cannot be imported.
    """
    start = time.perf_counter()
    logs, out = Path(logs), Path(out)
    _check_options(out, near_dup, val_fraction, force)
    parse_item_paths(item_paths)  # a bad --item fails before the log is read
    redactor = build_redactor(redact, redact_hook)
    log = read_traffic(logs, item_paths=item_paths, item_optional=item_optional,
                       redactor=redactor, on_progress=on_progress)
    if not log.records:
        shown = "\n".join(log.errors[:5])
        raise TrafficImportError(f"{logs}: no valid line to import ({len(log.errors)} bad "
                                 f"line(s)); fix the log and run again:\n{shown}" if log.errors
                                 else f"{logs}: the file has no lines to import")
    rows, merged = _merge(log.records)
    report = ImportReport(logs=str(logs), out=str(out), lines=log.lines,
                          bad_lines=len(log.errors), errors=log.errors[:MAX_ERRORS],
                          records=len(log.records), duplicates_merged=merged,
                          near_duplicates_removed=0, near_duplicate_ratio=near_dup,
                          message_keys_dropped=_counts(log.dropped_keys), rows=0, train=0,
                          validation=0, demos=0)
    if job is not None:
        rows = _filter_tools(rows, job, report)
    rows = _drop_near_duplicates(rows, near_dup, report)
    report.notes += assign_splits(rows, val_fraction)
    report.redactions = redactor.count if redactor is not None else 0
    _write(out, rows, report)
    report.seconds = round(time.perf_counter() - start, 3)
    (out / "import_report.json").write_text(report.model_dump_json(indent=2) + "\n",
                                            encoding="utf-8")
    return report


def _drop_near_duplicates(rows: list[_Row], ratio: float, report: ImportReport) -> list[_Row]:
    """``rows`` without near-duplicates of earlier rows; each dropped one listed in ``report``."""
    texts = [user_text(r.record.prompt) for r in rows]
    compared = varying_texts(texts)
    drop = find_near_duplicates(compared, ratio)
    report.near_duplicates_removed = len(drop)
    report.near_duplicate_pairs = [
        NearDuplicatePair(dropped=rows[i].id, kept=rows[m.kept].id, ratio=round(m.ratio, 1),
                          dropped_text=texts[i][:PAIR_TEXT_CHARS], kept_text=texts[m.kept][:PAIR_TEXT_CHARS],
                          compared=(compared[i][:PAIR_TEXT_CHARS], compared[m.kept][:PAIR_TEXT_CHARS]))
        for i, m in sorted(drop.items())[:MAX_PAIRS]]
    return [r for i, r in enumerate(rows) if i not in drop]


def _check_options(out: Path, near_dup: float, val_fraction: float, force: bool) -> None:
    if not 0 <= near_dup <= 100:
        raise TrafficImportError(f"--near-dup {near_dup:g} must be between 0 and 100 (a "
                                 "rapidfuzz ratio; 100 turns near-duplicate removal off)")
    if not 0 <= val_fraction < 1:
        raise TrafficImportError(f"--val-fraction {val_fraction:g} must be at least 0 and "
                                 "below 1 (e.g. 0.1)")
    if out.exists() and not out.is_dir():
        raise TrafficImportError(f"{out} is a file; give a folder for the output")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise TrafficImportError(f"{out} is not empty; choose an empty (or new) folder, or pass "
                                 "--force to overwrite its import files")


def row_id(prompt_json: str) -> str:
    """``imp-`` + 12 hex digits of the sha1 of the prompt's canonical JSON (deterministic)."""
    return "imp-" + hashlib.sha1(prompt_json.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _conversation_len(rec: TrafficRecord) -> int:
    return len(rec.conversation) if rec.conversation is not None else 0


def _merge(records: list[TrafficRecord]) -> tuple[list[_Row], int]:
    """One row per episode start, in order of first appearance; the record with the longest
    conversation (the first of equals) is kept. Returns (rows, records merged away)."""
    by_start: dict[str, _Row] = {}
    ids: set[str] = set()
    for rec in records:
        key = canonical(rec.prompt)
        row = by_start.get(key)
        if row is None:
            rid = row_id(key)
            if rid in ids:  # a 48-bit collision between different prompts: take more digits
                rid = "imp-" + hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:20]
            ids.add(rid)
            by_start[key] = _Row(rid, rec, rec.tools, rec.tool_choice)
        elif _conversation_len(rec) > _conversation_len(row.record):
            row.record, row.tools, row.tool_choice = rec, rec.tools, rec.tool_choice
    return list(by_start.values()), len(records) - len(by_start)


def called_tools(rec: TrafficRecord) -> list[str]:
    """The tool names the demonstration calls, in order of first call."""
    names = [c["function"]["name"] for m in rec.conversation or ()
             for c in m.get("tool_calls", ())]
    return list(dict.fromkeys(names))


def _filter_tools(rows: list[_Row], job: JobSpec, report: ImportReport) -> list[_Row]:
    """Drop rows whose demonstration calls a tool the job lacks; keep only the job's tools in
    the rows' ``tools`` (and drop a ``tool_choice`` forcing a tool it lacks). A name an MCP
    server of the job may have (``job_tool_names``) is kept and counted as unchecked."""
    names, prefixes = job_tool_names(job)
    report.mcp_tools_unchecked = bool(prefixes)

    def known(name: str) -> bool:
        return name in names or name.startswith(prefixes)

    dropped: Counter[str] = Counter()
    unchecked: Counter[str] = Counter()
    removed: Counter[str] = Counter()
    kept = []
    for row in rows:
        called = called_tools(row.record)
        if any(not known(n) for n in called):
            dropped.update(n for n in called if not known(n))
            continue
        unchecked.update(n for n in called if n not in names)
        kept.append(row)
        if row.tools is not None:
            offered = [t["function"]["name"] for t in row.tools]
            removed.update(n for n in offered if not known(n))
            row.tools = [t for t, n in zip(row.tools, offered) if known(n)]
        forced = _forced_tool(row.tool_choice)
        if forced is not None and not known(forced):
            removed[forced] += 1
            row.tool_choice = None
    report.rows_dropped_unknown_tools = len(rows) - len(kept)
    report.dropped_unknown_tools = _counts(dropped)
    report.unchecked_tool_calls = _counts(unchecked)
    report.offered_tools_removed = _counts(removed)
    return kept


def _counts(counter: Counter[str]) -> dict[str, int]:
    """Counts by name, most common first, for the report; a name the log wrote with a lone
    surrogate (``\\ud800``, no UTF-8 text) keeps that escape, so the report can be written and
    printed."""
    return {name.encode("utf-8", "backslashreplace").decode("utf-8"): n
            for name, n in counter.most_common()}


def _forced_tool(choice: str | dict[str, object] | None) -> str | None:
    if isinstance(choice, dict):
        function = choice.get("function")
        fn = function if isinstance(function, dict) else choice
        name = fn.get("name")
        return name if isinstance(name, str) else None
    if isinstance(choice, str) and choice not in ("auto", "none", "required"):
        return choice
    return None


def split_hash(rid: str) -> float:
    """Where a row id falls in [0, 1): below the validation fraction -> validation."""
    return int(hashlib.sha1(rid.encode("utf-8")).hexdigest()[:8], 16) / 2**32


def assign_splits(rows: list[_Row], fraction: float) -> list[str]:
    """Set each row's split by the hash of its id (a row never moves when logs are added);
    returns notes when a split had to be given a row so that it is not empty."""
    hashes = [split_hash(r.id) for r in rows]
    for row, h in zip(rows, hashes):
        row.split = "validation" if h < fraction else "train"
    notes = []
    if fraction > 0 and len(rows) >= 2 and all(r.split == "train" for r in rows):
        low = min(range(len(rows)), key=hashes.__getitem__)
        rows[low].split = "validation"
        notes.append(f"the validation split would be empty: row {rows[low].id} (the lowest "
                     "hash) was put there")
    if rows and all(r.split == "validation" for r in rows):
        high = max(range(len(rows)), key=hashes.__getitem__)
        rows[high].split = "train"
        notes.append(f"the train split would be empty: row {rows[high].id} was put there")
    return notes


def _offer(row: _Row, out: dict[str, object]) -> dict[str, Any]:
    """``out`` with the row's tools, forced ``tool_choice`` and ``parallel_tool_calls: false``."""
    if row.tools is not None:
        out["tools"] = row.tools
    if row.tool_choice is not None:
        out["tool_choice"] = row.tool_choice
    if row.record.parallel_tool_calls is False:
        out["parallel_tool_calls"] = False
    return out


def _row_json(row: _Row) -> dict[str, Any]:
    out = _offer(row, {"id": row.id, "messages": row.record.prompt})
    item = row.record.item
    out.update((k, v) for k, v in item.items() if k != "id")
    if "id" in item:  # a dataset row's own id: the row id is the prompt's hash, keep it beside
        out.setdefault("source_id", item["id"])
    return out


def _demo_json(row: _Row) -> dict[str, Any]:
    return _offer(row, {"id": row.id, "split": row.split, "messages": row.record.conversation})


def _write(out: Path, rows: list[_Row], report: ImportReport) -> None:
    """The three JSONL files; counts go into ``report``. A lone surrogate (valid JSON text, a
    ``\\ud800`` escape in the log) is not UTF-8: it is written back as that same escape."""
    out.mkdir(parents=True, exist_ok=True)
    dump = json.JSONEncoder(ensure_ascii=False).encode
    encoding, errors = "utf-8", "backslashreplace"
    with (out / "train.jsonl").open("w", encoding=encoding, errors=errors) as train, \
            (out / "validation.jsonl").open("w", encoding=encoding, errors=errors) as val, \
            (out / "demos.jsonl").open("w", encoding=encoding, errors=errors) as demos:
        for row in rows:
            (val if row.split == "validation" else train).write(dump(_row_json(row)) + "\n")
            if row.record.conversation is not None:
                demos.write(dump(_demo_json(row)) + "\n")
                report.demos += 1
    report.rows = len(rows)
    report.validation = sum(r.split == "validation" for r in rows)
    report.train = report.rows - report.validation
