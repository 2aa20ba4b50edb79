"""The run store: one SQLite file per run directory holding runs, rollouts, tool calls, grades
and metrics, all keyed by ``trace_id`` (DESIGN rule 3).

Each rollout is stored twice on purpose: as its whole JSON (so ``store.rollouts()`` gives back
exactly the record that was added, token ids and logprobs included) and spread over queryable
columns and the ``tool_calls``/``grades`` tables (so ``sqlite3 run.db`` answers questions like
"which tool fails most" without any arft code).

Thread safety: one connection opened with ``check_same_thread=False`` and every operation under
one lock, so the asyncio thread and worker threads can share a store. WAL journal mode lets a
second process (``arft report``) read while a run writes.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType

from pydantic import ValidationError

from arft.errors import ArftError
from arft.records import Rollout
from arft.tracing.rows import EventRow, MetricRow, RunRow
from arft.secrets import redact

STORE_FORMAT = "arft-run-store"
SCHEMA_VERSION = 2
"""2 added ``rollouts.step``; a version-1 store is upgraded in place when opened."""

_SCHEMA = """
CREATE TABLE arft_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    job TEXT NOT NULL,
    status TEXT NOT NULL
);
-- run_id is not a foreign key: ad-hoc evaluations produce rollouts with run_id "".
CREATE TABLE rollouts (
    trace_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    sample_index INTEGER NOT NULL,
    step INTEGER,
    status TEXT NOT NULL,
    finish_reason TEXT NOT NULL,
    reward REAL,
    n_tool_calls INTEGER NOT NULL,
    n_turns INTEGER NOT NULL,
    parse_errors INTEGER NOT NULL,
    n_tokens INTEGER NOT NULL,
    n_sampled_tokens INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX rollouts_run ON rollouts (run_id, task_id, sample_index);
CREATE INDEX rollouts_step ON rollouts (step);
CREATE TABLE tool_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    trace_id TEXT NOT NULL REFERENCES rollouts (trace_id) ON DELETE CASCADE,
    call_id TEXT NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    http_status INTEGER,
    latency_s REAL NOT NULL,
    turn INTEGER NOT NULL,
    arguments TEXT NOT NULL,
    output TEXT NOT NULL
);
CREATE INDEX tool_calls_trace ON tool_calls (trace_id);
CREATE INDEX tool_calls_name ON tool_calls (name, status);
CREATE TABLE grades (
    trace_id TEXT PRIMARY KEY REFERENCES rollouts (trace_id) ON DELETE CASCADE,
    grader TEXT NOT NULL,
    score REAL,
    passed INTEGER,
    error TEXT,
    flags TEXT NOT NULL,
    sub_scores TEXT NOT NULL,
    latency_s REAL NOT NULL
);
CREATE TABLE metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    name TEXT NOT NULL,
    value REAL,
    trace_id TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX metrics_run ON metrics (run_id, step);
"""

_EVENTS = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    message TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events (run_id, step)
"""
"""Things that happened during a run (a monitor's alarm: kind ``monitor``). Added beside schema 2
without a version bump: the table is created when missing (a store written before it gains it
when opened), and an arft that predates it reads the store as before, ignoring the table."""


class StoreError(ArftError):
    """A run store could not be opened or written as asked."""


class NotAStoreError(StoreError):
    """The file exists but is not an arft run store (or was written by a newer arft)."""


class DuplicateTraceIdError(StoreError, ValueError):
    """A rollout with this trace_id is already stored."""


@dataclass(frozen=True)
class Discarded:
    """What ``RunStore.discard_after`` removed, table by table."""

    rollouts: int = 0
    tool_calls: int = 0
    grades: int = 0
    metrics: int = 0
    runs: int = 0
    events: int = 0

    @property
    def total(self) -> int:
        return self.rollouts + self.tool_calls + self.grades + self.metrics + self.runs + self.events


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


class RunStore:
    """A SQLite-backed store of runs, rollouts, tool calls, grades and metrics.

    ``RunStore(path)`` creates the file (and its parent folders) when missing, opens it
    otherwise, and refuses a file that is not an arft store. Use it as a context manager or
    call ``close()``.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open run store {self.path}: {exc}; check that the folder "
                             "exists and is writable") from exc
        try:
            self._init_schema()
        except BaseException:
            self._conn.close()
            raise

    # -- lifecycle -------------------------------------------------------------------------

    def _init_schema(self) -> None:
        try:
            tables = {r[0] for r in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise NotAStoreError(
                f"{self.path} is not an arft run store ({exc}); point at the run directory's "
                "store file, or pass a new path to create a fresh store") from exc
        if not tables:
            self._create_schema()
        else:
            self._check_schema(tables)
        with self._transaction() as cur:
            for statement in _EVENTS.split(";"):
                cur.execute(statement)
        self._conn.execute("PRAGMA foreign_keys = ON")
        self._conn.execute("PRAGMA journal_mode = WAL")
        # WAL keeps the file consistent after a crash at NORMAL; FULL would fsync every write.
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.execute("PRAGMA busy_timeout = 10000")

    def _create_schema(self) -> None:
        with self._transaction() as cur:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    cur.execute(statement)
            cur.executemany("INSERT INTO arft_meta (key, value) VALUES (?, ?)",
                            [("format", STORE_FORMAT), ("schema_version", str(SCHEMA_VERSION))])

    def _check_schema(self, tables: set[str]) -> None:
        meta: dict[str, str] = {}
        if "arft_meta" in tables:
            meta = dict(self._conn.execute("SELECT key, value FROM arft_meta").fetchall())
        if meta.get("format") != STORE_FORMAT:
            raise NotAStoreError(
                f"{self.path} is a SQLite database but not an arft run store (tables: "
                f"{', '.join(sorted(tables))}); pass a new path to create a fresh store")
        version = int(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise NotAStoreError(
                f"{self.path} uses store schema {version}, newer than this arft understands "
                f"({SCHEMA_VERSION}); upgrade arft to read it")
        if version == 1:
            self._upgrade_from_1()
        elif version < SCHEMA_VERSION:
            raise NotAStoreError(
                f"{self.path} uses old store schema {version} (this arft writes "
                f"{SCHEMA_VERSION}); read it with the arft version that wrote it")

    def _upgrade_from_1(self) -> None:
        """Schema 1 -> 2: the ``rollouts.step`` column (NULL for rollouts recorded before it)."""
        with self._transaction() as cur:
            cur.execute("ALTER TABLE rollouts ADD COLUMN step INTEGER")
            cur.execute("CREATE INDEX rollouts_step ON rollouts (step)")
            cur.execute("UPDATE arft_meta SET value = '2' WHERE key = 'schema_version'")

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction under the lock: all of it lands or none of it does."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    def _query(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            cur = self._conn.cursor()
            cur.row_factory = sqlite3.Row
            return cur.execute(sql, params).fetchall()

    # -- runs ------------------------------------------------------------------------------

    def create_run(self, run_id: str, kind: str, job: dict[str, object]) -> None:
        """Record a new run (``kind``: "eval", "train", ...) and its job spec; status "running".

        The job is stored redacted (``arft.secrets.redact``): header values and secret-looking
        fields only as ``${ENV_VAR}`` references, any literal as ``***``."""
        try:
            job_json = json.dumps(redact(job), sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"the job of run {run_id!r} is not JSON-serialisable ({exc}); pass "
                             "a plain dict, e.g. job_spec.model_dump(mode='json')") from exc
        try:
            with self._transaction() as cur:
                cur.execute("INSERT INTO runs (run_id, kind, created_at, job, status) "
                            "VALUES (?, ?, ?, ?, 'running')", (run_id, kind, _now(), job_json))
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"run {run_id!r} already exists in {self.path}; pick a new run_id, "
                             "or check RunStore.has_run() before creating it") from exc

    def has_run(self, run_id: str) -> bool:
        """Whether a run with this id was created in this store."""
        return bool(self._query("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)))

    def finish_run(self, run_id: str, status: str) -> None:
        """Set a run's final status (e.g. "completed", "failed", "cancelled") and finish time."""
        with self._transaction() as cur:
            cur.execute("UPDATE runs SET status = ?, finished_at = ? WHERE run_id = ?",
                        (status, _now(), run_id))
            if cur.rowcount == 0:
                raise KeyError(f"no run {run_id!r} in {self.path}; create it with "
                               "RunStore.create_run() first (RunStore.runs() lists the runs)")

    def runs(self) -> list[RunRow]:
        """Every run, oldest first: run_id, kind, created_at, finished_at, job (dict), status."""
        rows = self._query("SELECT run_id, kind, created_at, finished_at, job, status "
                           "FROM runs ORDER BY rowid")
        return [RunRow(run_id=r["run_id"], kind=r["kind"], created_at=r["created_at"], finished_at=r["finished_at"],
                       job=json.loads(r["job"]), status=r["status"]) for r in rows]

    # -- rollouts --------------------------------------------------------------------------

    def add_rollout(self, rollout: Rollout) -> None:
        """Store a rollout with its tool calls and its grade, in one transaction."""
        try:
            with self._transaction() as cur:
                self._insert_rollout(cur, rollout)
        except sqlite3.IntegrityError as exc:
            if "rollouts.trace_id" not in str(exc):
                raise
            raise DuplicateTraceIdError(
                f"a rollout with trace_id {rollout.trace_id!r} is already stored in {self.path}; "
                "every rollout needs a fresh id (arft.records.new_trace_id())") from exc

    def _insert_rollout(self, cur: sqlite3.Cursor, r: Rollout) -> None:
        data = r.model_dump_json()
        try:
            # JSON has no NaN/inf: pydantic writes null, which would make the row unreadable.
            Rollout.model_validate_json(data)
        except ValidationError as exc:
            raise StoreError(
                f"rollout {r.trace_id!r} does not survive a JSON round trip, usually a NaN or "
                f"infinite score or logprob ({exc.errors()[0]['loc']}); have the grader set "
                "Score.error instead of returning NaN") from exc
        cur.execute(
            "INSERT INTO rollouts (trace_id, run_id, task_id, sample_index, step, status,"
            " finish_reason, reward, n_tool_calls, n_turns, parse_errors, n_tokens, n_sampled_tokens,"
            " created_at, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (r.trace_id, r.run_id, r.task_id, r.sample_index, r.step, r.status, r.finish_reason,
             r.reward, len(r.tool_calls), r.n_turns, r.parse_errors, len(r.token_ids),
             r.n_sampled_tokens, _now(), data))
        cur.executemany(
            "INSERT INTO tool_calls (trace_id, call_id, name, status, error, http_status,"
            " latency_s, turn, arguments, output) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(r.trace_id, c.call_id, c.name, c.status, c.error, c.http_status, c.latency_s,
              c.turn, c.arguments, c.output) for c in r.tool_calls])
        if r.score is not None:
            s = r.score
            cur.execute(
                "INSERT INTO grades (trace_id, grader, score, passed, error, flags, sub_scores,"
                " latency_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (r.trace_id, s.grader, s.score, s.passed, s.error, json.dumps(list(s.flags)),
                 json.dumps(s.sub_scores, sort_keys=True), s.latency_s))

    def rollouts(self, run_id: str | None = None) -> list[Rollout]:
        """Stored rollouts in the order they were added; only ``run_id``'s when given."""
        if run_id is None:
            rows = self._query("SELECT data FROM rollouts ORDER BY rowid")
        else:
            rows = self._query("SELECT data FROM rollouts WHERE run_id = ? ORDER BY rowid",
                               (run_id,))
        return [Rollout.model_validate_json(row["data"]) for row in rows]

    def rollout(self, trace_id: str) -> Rollout:
        """The rollout with this trace_id; ``KeyError`` that says how to find ids otherwise."""
        rows = self._query("SELECT data FROM rollouts WHERE trace_id = ?", (trace_id,))
        if not rows:
            raise KeyError(
                f"no rollout with trace_id {trace_id!r} in {self.path}; list the stored ids with "
                "RunStore.rollouts(run_id) or export them with arft.tracing.export.export_rollouts")
        return Rollout.model_validate_json(rows[0]["data"])

    # -- metrics ---------------------------------------------------------------------------

    def add_metrics(self, run_id: str, step: int, values: dict[str, float],
                    trace_id: str | None = None) -> None:
        """Record named metric values for one step of a run (optionally for one rollout)."""
        now = _now()
        try:
            with self._transaction() as cur:
                cur.executemany(
                    "INSERT INTO metrics (run_id, step, name, value, trace_id, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [(run_id, step, name, float(v), trace_id, now) for name, v in values.items()])
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"cannot add metrics to unknown run {run_id!r} in {self.path}; "
                             "create it with RunStore.create_run() first") from exc

    def metrics(self, run_id: str) -> list[MetricRow]:
        """A run's metric rows by step then insertion: run_id, step, name, value, trace_id,
        created_at. SQLite stores NaN as NULL; it is read back as ``nan``, never as 0."""
        rows = self._query("SELECT run_id, step, name, value, trace_id, created_at FROM metrics "
                           "WHERE run_id = ? ORDER BY step, id", (run_id,))
        return [MetricRow(run_id=r["run_id"], step=r["step"], name=r["name"],
                          value=math.nan if r["value"] is None else r["value"], trace_id=r["trace_id"],
                          created_at=r["created_at"]) for r in rows]

    # -- events ----------------------------------------------------------------------------

    def add_event(self, run_id: str, step: int, kind: str, name: str, message: str,
                  data: dict[str, object] | None = None) -> None:
        """Record that something happened at ``step`` of a run (``kind`` "monitor": an alarm of the
        monitor ``name``), with its message and any JSON-serialisable details."""
        try:
            with self._transaction() as cur:
                cur.execute("INSERT INTO events (run_id, step, kind, name, message, data, created_at) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (run_id, step, kind, name, message, json.dumps(data or {}, sort_keys=True), _now()))
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"cannot add an event to unknown run {run_id!r} in {self.path}; "
                             "create it with RunStore.create_run() first") from exc

    def events(self, run_id: str, kind: str | None = None) -> list[EventRow]:
        """A run's events by step then insertion (only ``kind``'s when given)."""
        rows = self._query("SELECT run_id, step, kind, name, message, data, created_at FROM events "
                           "WHERE run_id = ? AND (? IS NULL OR kind = ?) ORDER BY step, id", (run_id, kind, kind))
        return [EventRow(run_id=r["run_id"], step=r["step"], kind=r["kind"], name=r["name"], message=r["message"],
                         data=json.loads(r["data"]), created_at=r["created_at"]) for r in rows]

    # -- resume ----------------------------------------------------------------------------

    def discard_after(self, run_id: str, step: int, runs: Sequence[str] = (), *,
                      metrics_at_step: str = "") -> Discarded:
        """Forget what ``run_id`` recorded after ``step`` and the whole of each run in ``runs``.

        Removes ``run_id``'s rollouts whose step is larger than ``step`` and its metric rows likewise
        (and its step-``step`` metrics named ``metrics_at_step...``), every rollout and metric row
        of ``runs`` and those runs themselves, with the tool calls and grades of every removed
        rollout; ``run_id`` is marked running again. One transaction: a kill during it leaves the
        store as it was. A training run resumed from its step-``step`` checkpoint calls this
        first, so the steps it re-runs are stored once, not beside what the killed process stored.
        """
        if run_id in runs:
            raise ValueError(f"discard_after: {run_id!r} is the run being resumed; it cannot also be "
                             "one of the runs to remove")
        marks = ", ".join("?" * len(runs))
        where = f"(run_id = ? AND step > ?) OR run_id IN ({marks})"
        params = (run_id, step, *runs)
        traces = f"trace_id IN (SELECT trace_id FROM rollouts WHERE {where})"
        with self._transaction() as cur:
            tool_calls = cur.execute(f"DELETE FROM tool_calls WHERE {traces}", params).rowcount
            grades = cur.execute(f"DELETE FROM grades WHERE {traces}", params).rowcount
            rollouts = cur.execute(f"DELETE FROM rollouts WHERE {where}", params).rowcount
            at_step = "(run_id = ? AND step = ? AND substr(name, 1, ?) = ?)"  # '' never matches a name
            metrics = cur.execute(f"DELETE FROM metrics WHERE {where} OR {at_step}", (
                *params, run_id, step, len(metrics_at_step) or 1, metrics_at_step)).rowcount
            events = cur.execute(f"DELETE FROM events WHERE {where}", params).rowcount
            removed = cur.execute(f"DELETE FROM runs WHERE run_id IN ({marks})", tuple(runs)).rowcount
            cur.execute("UPDATE runs SET status = 'running', finished_at = NULL WHERE run_id = ?",
                        (run_id,))
        return Discarded(rollouts, tool_calls, grades, metrics, removed, events)
