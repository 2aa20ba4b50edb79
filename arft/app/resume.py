"""Continuing an interrupted weight-changing run from its latest checkpoint.

``resume`` loads the checkpoint, then ``rewind`` drops what the interrupted process recorded
after it (store rows, metrics.jsonl lines, checkpoint and workspace folders), so a re-run step is
stored once however often the run was killed; the evaluations made before the checkpoint are
kept (``stored_evals``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from arft.app.session import EVAL_METRICS, Session, SessionRun
from arft.data.order import Cursor
from arft.metrics.sinks import JsonlSink
from arft.metrics.summary import EvalSummary, summarize
from arft.sandbox.workspace import remove_workspace
from arft.tracing.store import Discarded, RunStore
from arft.trainer.checkpoints import discard_checkpoints_after, load_checkpoint


class StoredEval(NamedTuple):
    """One evaluation a run made, as its store holds it."""

    eval_id: str
    step: int
    completed: bool


def _eval_runs(store: RunStore, run_id: str) -> list[StoredEval]:
    """Every evaluation ``run_id`` made, oldest first."""
    found = []
    for r in store.runs():
        step = (r.get("job") or {}).get("step")  # an evaluation stores its step as its job
        if r["kind"] == "eval" and r["run_id"].startswith(f"{run_id}:eval-") and isinstance(step, int):
            found.append(StoredEval(r["run_id"], step, r["status"] == "completed"))
    return found


def stored_evals(store: RunStore, run_id: str, up_to: int) -> dict[int, EvalSummary]:
    """The evaluations a resumed run already made (the baseline among them), from its store."""
    evals: dict[int, EvalSummary] = {}
    for eval_id, step, _ in _eval_runs(store, run_id):
        rollouts = store.rollouts(eval_id) if step <= up_to else []
        if rollouts:
            evals[step] = summarize(rollouts)
    return evals


@dataclass(frozen=True)
class Rewound:
    """What ``rewind`` dropped: store rows, metrics.jsonl lines, checkpoint and workspace folders."""

    store: Discarded
    jsonl_lines: int
    checkpoints: int
    workspaces: int

    def describe(self) -> str:
        s = self.store
        return (f"dropped what the interrupted run recorded after its checkpoint: {s.rollouts} rollouts "
                f"({s.grades} grades, {s.tool_calls} tool calls), {s.runs} evaluations, {s.metrics} metric "
                f"values, {self.jsonl_lines} metrics.jsonl lines, {self.checkpoints} unfinished checkpoints, "
                f"{self.workspaces} leftover workspaces")


def rewind(run: SessionRun, run_id: str, step: int) -> Rewound:
    """Drop everything ``run_id`` recorded after checkpoint ``step``, so the steps a resumed run
    re-runs are recorded once: its rollouts (with their grades and tool calls), metric rows and
    evaluations after ``step``, and an evaluation of ``step`` that did not finish with its metric
    rows (one store transaction), then metrics.jsonl's rows likewise (rewritten atomically),
    checkpoint folders after ``step`` or half-written, and the workspaces of rollouts the kill
    interrupted. Each part is idempotent: a kill during the rewind is repaired by the next resume.

    A step's checkpoint is written before its evaluation (which runs beside the next step's
    rollouts), so the kill may have cut that evaluation short: the resumed run runs it again."""
    rd = run.run_dir
    evals = _eval_runs(run.store, run_id)
    cut_short = [e.eval_id for e in evals if e.step == step and not e.completed]
    later = [e.eval_id for e in evals if e.step > step] + cut_short
    its_rows = f"{EVAL_METRICS}/" if cut_short else ""
    discarded = run.store.discard_after(run_id, step, later, metrics_at_step=its_rows)
    lines = JsonlSink(rd.metrics).discard_after(step, rows_at_step=its_rows)
    checkpoints = discard_checkpoints_after(rd.path, step)
    workspaces = sorted(rd.workspaces.iterdir()) if rd.workspaces.is_dir() else []
    for w in workspaces:  # nothing runs in this run directory before the resumed run starts
        remove_workspace(w)
    return Rewound(discarded, lines, len(checkpoints), len(workspaces))


def resume(s: Session, checkpoint: Path) -> Cursor:
    """Continue ``s`` from ``checkpoint``: weights, optimizer and RNG states back, the interrupted
    process's later records dropped (``rewind``), the evaluations made before it kept. Returns
    the cursor to continue from."""
    cursor, _ = load_checkpoint(checkpoint, s.learner, Cursor)
    rewound = rewind(s.run, s.run_id, cursor.step)
    if rewound.store.total or rewound.jsonl_lines or rewound.checkpoints or rewound.workspaces:
        s.hooks.status(rewound.describe())
    s.result.evals.update(stored_evals(s.run.store, s.run_id, cursor.step))
    s.hooks.status(f"resumed from {checkpoint.name}")
    return cursor
