"""The run viewer's data side: rollout filters (parsed from query parameters) and the SQL that
answers them, read-only, from a run's store.

The viewer reads the store through its own read-only SQLite connections (one per request) so it
can never write to a run, and sees a run that is still writing (WAL) as it grows. Filtering
happens in SQL on the store's queryable columns (``rollouts``, ``tool_calls``, ``grades``).

Two values are derived, so old stores read the same as new ones:

- *split*: "train" for rollouts of a run of kind "train", "eval" for every other rollout
  (evaluations during training, ``arft eval`` runs, ad-hoc evaluations without a run).
- *step*: ``rollouts.step``; for stores written before that column existed, evaluations during
  training still get theirs from the run id (``train:eval-000005`` -> 5); train rollouts of such
  stores have none (``None``, shown as "—").
"""

from __future__ import annotations

import json
import builtins
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, NamedTuple, TypedDict, cast, get_args
from urllib.parse import urlencode

from arft.errors import ArftError
from arft.records import Rollout, RolloutStatus
from arft.tracing.run_dir import RunDir

PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
SPLITS = ("all", "train", "eval")
STATUSES: tuple[str, ...] = get_args(RolloutStatus)
SORTS = {"": "r.rowid", "reward": "r.reward IS NULL, r.reward, r.rowid",
         "-reward": "r.reward IS NULL, r.reward DESC, r.rowid"}
"""Row orders: as added (default), lowest reward first, highest first (ungraded last)."""
FLAG_FILTERS = {
    "hack": "any grader flag",
    "parse_error": "parse error",
    "infra_failed": "infra failure",
    "grader_error": "grader error",
}
"""The ``flag`` filter's fixed values; any other value matches that exact grader flag."""

_STEP = ("COALESCE(r.step, CASE WHEN r.run_id GLOB '*:eval-[0-9][0-9][0-9][0-9][0-9][0-9]*' "
         "THEN CAST(substr(r.run_id, instr(r.run_id, ':eval-') + 6, 6) AS INTEGER) END)")
_SPLIT = "CASE WHEN ru.kind = 'train' THEN 'train' ELSE 'eval' END"
_FLAG_SQL = {
    "hack": "g.flags IS NOT NULL AND g.flags != '[]'",
    "parse_error": "r.parse_errors > 0",
    "infra_failed": "r.status = 'infra_failed'",
    "grader_error": "g.error IS NOT NULL",
}
_SELECT = f"""
SELECT r.trace_id, r.run_id, r.task_id, r.sample_index, {_STEP} AS step, {_SPLIT} AS split,
       r.status, r.finish_reason, r.reward, r.n_tool_calls, r.parse_errors, r.n_turns,
       g.score, g.passed, g.error AS grade_error, g.flags, g.grader,
       (SELECT group_concat(name, ',') FROM (SELECT DISTINCT name FROM tool_calls tc
         WHERE tc.trace_id = r.trace_id AND tc.name != '' ORDER BY name)) AS tools
FROM rollouts r
LEFT JOIN runs ru ON ru.run_id = r.run_id
LEFT JOIN grades g ON g.trace_id = r.trace_id
"""


class FilterError(ArftError):
    """A query parameter of the rollout list has a value the viewer cannot use."""


@dataclass(frozen=True)
class Filters:
    """Which rollouts the list shows; every field is one query parameter (None = no filter)."""

    step: int | None = None
    split: str = "all"
    run: str | None = None
    task: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    status: str | None = None
    flag: str | None = None
    tool: str | None = None
    sort: str = ""
    page: int = 1
    per_page: int = PAGE_SIZE

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Filters:
        """Filters from query parameters; blank values mean "no filter" (what an HTML form sends).

        Raises ``FilterError`` naming the parameter and the values it accepts.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise FilterError(f"unknown query parameter {unknown[0]!r}; the filters are "
                              f"{', '.join(sorted(known))}")
        values: dict[str, Any] = {k: v.strip() for k, v in params.items() if v.strip()}
        for name in ("step", "page", "per_page"):
            if name in values:
                values[name] = _number(name, values[name], int)
        for name in ("min_reward", "max_reward"):
            if name in values:
                values[name] = _number(name, values[name], float)
        f = cls(**values)
        f._check()
        return f

    def _check(self) -> None:
        if self.split not in SPLITS:
            raise FilterError(f"split must be one of {', '.join(SPLITS)}, not {self.split!r}")
        if self.status is not None and self.status not in STATUSES:
            raise FilterError(f"status must be one of {', '.join(STATUSES)}, not {self.status!r}")
        if self.sort not in SORTS:
            raise FilterError(f"sort must be empty, 'reward' or '-reward', not {self.sort!r}")
        if self.page < 1:
            raise FilterError(f"page counts from 1, not {self.page}")
        if not 1 <= self.per_page <= MAX_PAGE_SIZE:
            raise FilterError(f"per_page must be 1..{MAX_PAGE_SIZE}, not {self.per_page}")

    def where(self) -> tuple[str, list[Any]]:
        """The SQL WHERE clause (``"1"`` when no filter) and its parameters."""
        clauses: list[str] = []
        params: list[Any] = []

        def add(sql: str, *values: Any) -> None:
            clauses.append(sql)
            params.extend(values)

        if self.step is not None:
            add(f"{_STEP} = ?", self.step)
        if self.split != "all":
            add(f"{_SPLIT} = ?", self.split)
        if self.run is not None:
            add("r.run_id = ?", self.run)
        if self.task is not None:
            add("r.task_id = ?", self.task)
        if self.min_reward is not None:
            add("r.reward >= ?", self.min_reward)
        if self.max_reward is not None:
            add("r.reward <= ?", self.max_reward)
        if self.status is not None:
            add("r.status = ?", self.status)
        if self.flag in _FLAG_SQL:
            add(_FLAG_SQL[self.flag])
        elif self.flag is not None:
            add("EXISTS (SELECT 1 FROM json_each(g.flags) WHERE json_each.value = ?)", self.flag)
        if self.tool is not None:
            add("EXISTS (SELECT 1 FROM tool_calls tc WHERE tc.trace_id = r.trace_id "
                "AND tc.name = ?)", self.tool)
        return (" AND ".join(clauses) or "1"), params

    def query_string(self, **changes: Any) -> str:
        """These filters (with ``changes``) as a query string, leaving out default values."""
        default = asdict(Filters())
        values = asdict(replace(self, **changes))
        return urlencode({k: v for k, v in values.items() if v != default[k]})


def _number(name: str, text: str, kind: type[int] | type[float]) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise FilterError(f"{name} must be {what}, not {text!r}") from None


class ListRow(TypedDict):
    """One rollout of the list: the columns of ``_SELECT``, flags and tools as lists."""

    trace_id: str
    run_id: str | None
    task_id: str
    sample_index: int
    step: int | None
    split: str
    status: str
    finish_reason: str
    reward: float | None
    n_tool_calls: int
    parse_errors: int
    n_turns: int
    score: float | None
    passed: bool | None
    grade_error: str | None
    flags: list[str]
    grader: str | None
    tools: list[str]


class RunSummary(TypedDict):
    """One run that has rollouts, as the runs bar shows it."""

    run_id: str | None
    split: str
    step: int | None
    n: int
    mean_reward: float | None


class Choices(NamedTuple):
    """The values present in the store, offered by the filter form."""

    steps: list[int]
    tools: list[str]
    flags: list[str]


@dataclass(frozen=True)
class Page:
    """One page of the filtered rollout list."""

    total: int
    rows: list[ListRow]

    def n_pages(self, per_page: int) -> int:
        return max(1, -(-self.total // per_page))


def _row(row: sqlite3.Row) -> ListRow:
    d = dict(row)
    d["flags"] = json.loads(d["flags"]) if d["flags"] else []
    d["tools"] = d["tools"].split(",") if d["tools"] else []
    d["passed"] = None if d["passed"] is None else bool(d["passed"])
    return cast(ListRow, d)  # the columns _SELECT names


class RunData:
    """Read-only queries over one run directory's store (``arft.sqlite``)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = RunDir(self.run_dir).store
        # Opening it once as a RunStore checks the format and upgrades an old schema in place,
        # exactly as every other command does; after that the viewer only reads.
        RunDir(self.run_dir).open_store().close()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout = 10000")
        try:
            yield conn
        finally:
            conn.close()

    def list(self, f: Filters) -> Page:
        """The rollouts matching ``f``: how many in all, and the rows of page ``f.page``."""
        where, params = f.where()
        with self._connect() as conn:
            total = conn.execute(
                "SELECT count(*) FROM rollouts r LEFT JOIN runs ru ON ru.run_id = r.run_id "
                f"LEFT JOIN grades g ON g.trace_id = r.trace_id WHERE {where}", params).fetchone()[0]
            rows = conn.execute(f"{_SELECT} WHERE {where} ORDER BY {SORTS[f.sort]} LIMIT ? OFFSET ?",
                                [*params, f.per_page, (f.page - 1) * f.per_page]).fetchall()
        return Page(total=total, rows=[_row(r) for r in rows])

    def row(self, trace_id: str) -> ListRow | None:
        """The list row of one rollout (with its split and step), or None when there is none."""
        with self._connect() as conn:
            row = conn.execute(f"{_SELECT} WHERE r.trace_id = ?", (trace_id,)).fetchone()
        return None if row is None else _row(row)

    def rollout(self, trace_id: str) -> Rollout | None:
        """The whole stored rollout, or None when no rollout has this trace_id."""
        with self._connect() as conn:
            row = conn.execute("SELECT data FROM rollouts WHERE trace_id = ?",
                               (trace_id,)).fetchone()
        return None if row is None else Rollout.model_validate_json(row["data"])

    def runs(self) -> builtins.list[RunSummary]:  # `list` is a method here
        """Every run id that has rollouts, in the order first added: split, step, count, mean
        reward (over graded rollouts; None when none is graded)."""
        with self._connect() as conn:
            rows = conn.execute(
                f"SELECT r.run_id, {_SPLIT} AS split, min({_STEP}) AS step, count(*) AS n, "
                "avg(r.reward) AS mean_reward FROM rollouts r "
                "LEFT JOIN runs ru ON ru.run_id = r.run_id GROUP BY r.run_id ORDER BY min(r.rowid)"
            ).fetchall()
        return [cast(RunSummary, dict(r)) for r in rows]  # the columns selected above

    def choices(self) -> Choices:
        """Values present in the store, for the filter form: steps, tools and grader flags."""
        with self._connect() as conn:
            steps = [r[0] for r in conn.execute(
                f"SELECT DISTINCT {_STEP} AS s FROM rollouts r WHERE s IS NOT NULL ORDER BY s")]
            tools = [r[0] for r in conn.execute(
                "SELECT DISTINCT name FROM tool_calls WHERE name != '' ORDER BY name")]
            flags = [r[0] for r in conn.execute(
                "SELECT DISTINCT j.value FROM grades, json_each(grades.flags) j ORDER BY 1")]
        return Choices(steps=steps, tools=tools, flags=flags)
