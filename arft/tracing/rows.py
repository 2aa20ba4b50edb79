"""The rows a run store reads back for whoever reports on a run: a run, a metric row and an event, named
field by field (``RunStore.runs``, ``RunStore.metrics``). Plain dicts at run time, so they go to
JSON and templates as they are."""

from __future__ import annotations

from typing import TypedDict


class RunRow(TypedDict):
    """One run: what ``create_run`` recorded and ``finish_run`` set."""

    run_id: str
    kind: str
    created_at: str
    finished_at: str | None
    job: dict[str, object]
    """The job spec as stored (redacted JSON); ``JobSpec.from_stored`` validates it."""
    status: str


class MetricRow(TypedDict):
    """One metric value of one step (``value`` is ``nan`` where SQLite stored NULL)."""

    run_id: str
    step: int
    name: str
    value: float
    trace_id: str | None
    created_at: str


class EventRow(TypedDict):
    """One thing that happened at a step of a run (``RunStore.add_event``): a monitor's alarm."""

    run_id: str
    step: int
    kind: str
    name: str
    message: str
    data: dict[str, object]
    created_at: str
