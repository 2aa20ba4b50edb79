"""What ``arft report`` shows, read from a run directory: ``collect(run_dir) -> Report``.

It reads the run store (and ``metrics.jsonl`` when the store has no metrics) into a ``Report``:
per-step summaries of the train rollouts, one summary per evaluation (both from
``arft.metrics.summary.summarize``), the update metrics, and the best and worst rollouts. A
number that was not recorded stays ``None`` (never 0; DESIGN rule 4). ``arft.report.html``
renders it.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel

from arft.errors import ArftError
from arft.metrics.summary import EvalSummary, summarize
from arft.records import json_object, Rollout
from arft.tracing.rows import MetricRow, RunRow
from arft.tracing.run_dir import RunDir
from arft.tracing.store import RunStore

DEFAULT_VIEWER_URL = "http://127.0.0.1:8321"
"""Where `arft view` serves the trajectory viewer; rollouts link to ``{url}/rollouts/{trace_id}``."""

N_EXTREMES = 5
"""Best and worst rollouts listed per source."""

UPDATE_METRICS: dict[str, str] = {
    "update/kl": "KL to the reference policy (k3 estimate)",
    "update/entropy": "policy entropy per sampled token",
    "update/clip_fraction": "share of tokens clipped",
    "update/ratio_mean": "mean policy / sampler ratio",
    "update/tis_truncated_fraction": "share of truncated importance weights",
    "update/grad_norm": "gradient norm before clipping",
    "update/lr": "learning rate",
    "update/tokens": "sampled tokens trained on",
}
"""What the learner logs per update (arft.trainer.learner.Learner.update), with what each means."""

OTHER_STEP_METRICS: dict[str, str] = {
    "train/groups_dropped_share": "share of groups with equal rewards",
    "train/budget_penalty_mean": "mean tool-call budget penalty",
    "time/step_s": "seconds per step",
}


class ReportError(ArftError):
    """The folder cannot be reported on (not a run directory, empty store)."""


class RolloutRow(BaseModel):
    """One line of the best/worst tables."""

    trace_id: str
    task_id: str
    step: int | None
    reward: float | None
    calls: int
    status: str
    finish_reason: str
    answer: str


class AlarmRow(BaseModel):
    """One monitor alarm: which monitor, at which step, and what it saw."""

    monitor: str
    step: int
    message: str


class Report(BaseModel):
    """Everything the page shows, read from one run directory."""

    run_dir: str
    kind: str
    """"train" or "eval" (a run directory written by `arft eval`)."""
    job_name: str
    model: str
    status: str
    started_at: str | None
    wall_time_s: float | None
    steps_done: int | None
    steps_total: int | None
    train: dict[int, EvalSummary]
    """step -> summary of that step's train rollouts (1-based)."""
    evals: dict[int, EvalSummary]
    """step -> summary of the evaluation of that step's policy (0 = baseline); for an eval-only
    run, the evaluations in the order they ran."""
    eval_labels: dict[int, str]
    overall: EvalSummary
    step_metrics: dict[str, dict[int, float]]
    """Update and other per-step metrics: name -> step -> value (absent = not recorded)."""
    not_recorded: dict[str, str]
    """Metric -> why it is missing."""
    notes: list[str]
    extremes: dict[str, tuple[list[RolloutRow], list[RolloutRow]]]
    """Source ("latest eval", "train") -> (best, worst)."""
    viewer_url: str
    alarms: list[AlarmRow] = []
    """The live monitors' alarms (the store's ``monitor`` events), in step order."""
    monitors_on: bool = True
    """Whether the job ran the monitors (``monitors.enabled``; runs before them count as off)."""


# -- collecting ----------------------------------------------------------------------------------


def collect(run_dir: Path, viewer_url: str = DEFAULT_VIEWER_URL) -> Report:
    """Read a run directory (from `arft train` or `arft eval`) into a ``Report``."""
    with RunDir(run_dir).open_store() as store:
        runs = store.runs()
        train_run = next((r for r in runs if r["kind"] == "train"), None)
        if train_run is not None:
            return _collect_train(store, run_dir, train_run, runs, viewer_url)
        evals = [r for r in runs if r["kind"] == "eval"]
        if not evals:
            raise ReportError(f"the store in {run_dir} holds no train or eval run yet: "
                              "report on it once `arft train` or `arft eval` has written rollouts")
        return _collect_eval(store, run_dir, evals, viewer_url)


def _collect_train(store: RunStore, run_dir: Path, run: RunRow, runs: list[RunRow],
                   viewer_url: str) -> Report:
    run_id, job = run["run_id"], run["job"]
    notes: list[str] = []
    by_step = _step_metrics(store.metrics(run_id), run_dir)
    grouped, unassigned = _train_steps(store.rollouts(run_id), by_step, notes)
    train_rollouts = [r for rs in grouped.values() for r in rs] + unassigned
    eval_rollouts: dict[int, list[Rollout]] = {}
    for r in runs:  # a later eval of the same step (re-run after a resume) replaces the earlier
        if r["kind"] == "eval" and r["run_id"].startswith(f"{run_id}:eval-"):
            rollouts = store.rollouts(r["run_id"])
            step = _eval_step(r, rollouts)
            if rollouts and step is not None:
                eval_rollouts[step] = [x if x.step is not None else x.model_copy(update={"step": step})
                                       for x in rollouts]
    evals = {s: summarize(rs) for s, rs in sorted(eval_rollouts.items())}
    step_metrics, missing = _update_series(by_step, job)
    latest = max(evals) if evals else None
    extremes = {}
    if latest is not None:
        extremes[f"latest eval (step {latest})"] = _extremes(eval_rollouts[latest])
    extremes["train (all steps)"] = _extremes(train_rollouts)
    steps_done = max([*grouped, *by_step], default=None)
    all_rollouts = train_rollouts + [r for rs in eval_rollouts.values() for r in rs]
    return Report(
        run_dir=str(run_dir), kind="train", job_name=_job_name(run_dir, job),
        model=str(job.get("model", "?")),
        status=run["status"], started_at=run["created_at"], wall_time_s=_wall_time([run]),
        steps_done=steps_done, steps_total=_steps_total(run_dir, job),
        train={s: summarize(rs) for s, rs in sorted(grouped.items())}, evals=evals,
        eval_labels={s: "baseline (step 0)" if s == 0 else f"step {s}" for s in evals},
        overall=summarize(all_rollouts), step_metrics=step_metrics, not_recorded=missing,
        notes=notes, extremes=extremes, viewer_url=viewer_url.rstrip("/"),
        alarms=[AlarmRow(monitor=e["name"], step=e["step"], message=e["message"])
                for e in store.events(run_id, "monitor")],
        monitors_on=_monitors_on(job))


def _monitors_on(job: dict[str, object]) -> bool:
    """Whether the stored job ran the live monitors (a job stored before they existed did not)."""
    monitors = job.get("monitors")
    return isinstance(monitors, dict) and monitors.get("enabled", True) is not False


def _collect_eval(store: RunStore, run_dir: Path, runs: list[RunRow], viewer_url: str) -> Report:
    rollouts = {i: store.rollouts(r["run_id"]) for i, r in enumerate(runs)}
    last = runs[-1]
    return Report(
        run_dir=str(run_dir), kind="eval", job_name=_job_name(run_dir, last["job"]),
        model=str(last["job"].get("model", "?")), status=last["status"], started_at=runs[0]["created_at"],
        wall_time_s=_wall_time(runs), steps_done=None, steps_total=None, train={},
        evals={i: summarize(rs) for i, rs in rollouts.items() if rs},
        eval_labels={i: r["run_id"] for i, r in enumerate(runs)},
        overall=summarize([r for rs in rollouts.values() for r in rs]), step_metrics={},
        not_recorded={}, notes=["an evaluation run (`arft eval`): no training steps, so nothing is "
                                "plotted over steps"],
        extremes={"evaluation": _extremes(rollouts[len(runs) - 1])}, viewer_url=viewer_url.rstrip("/"))


def _step_metrics(rows: list[MetricRow], run_dir: Path) -> dict[int, dict[str, float]]:
    """step -> {name: value} from the store, else from metrics.jsonl; NaN means not recorded."""
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    for row in rows:
        by_step[int(row["step"])][row["name"]] = row["value"]
    jsonl = RunDir(run_dir).metrics
    if not by_step and jsonl.exists():
        for line in jsonl.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                step = int(row.pop("step"))
                by_step[step].update({k: float(v) for k, v in row.items() if isinstance(v, (int, float))})
    return {s: {k: v for k, v in m.items() if not math.isnan(v)} for s, m in sorted(by_step.items())}


def _train_steps(rollouts: list[Rollout], by_step: dict[int, dict[str, float]],
                 notes: list[str]) -> tuple[dict[int, list[Rollout]], list[Rollout]]:
    """Train rollouts by the step they trained. Stores written before ``Rollout.step`` existed
    have None there: the rollouts were stored in order, so cut them by each step's
    ``train/rollouts`` count from the metrics."""
    grouped: dict[int, list[Rollout]] = defaultdict(list)
    unknown, i = [], 0
    for r in rollouts:
        if r.step is None:
            unknown.append(r)
        else:
            grouped[r.step].append(r)
    if unknown:
        counts = [(s, int(m["train/rollouts"])) for s, m in by_step.items()
                  if "train/rollouts" in m and s not in grouped]
        for step, n in counts:
            grouped[step].extend(r.model_copy(update={"step": step}) for r in unknown[i:i + n])
            i += n
        notes.append("this store predates per-rollout steps: train rollouts were assigned to steps "
                     "in the order they were stored, by each step's recorded rollout count")
        if i < len(unknown):
            notes.append(f"{len(unknown) - i} train rollouts could not be assigned to a step "
                         "(no matching metrics): they count in the totals and tables only")
    return {s: rs for s, rs in sorted(grouped.items()) if rs}, unknown[i:]


def _eval_step(run: RunRow, rollouts: list[Rollout]) -> int | None:
    stored = json_object(run["job"]).get("step")
    step = stored if isinstance(stored, int) else None
    if step is None and rollouts:
        step = rollouts[0].step
    if step is None:  # run ids are "<train>:eval-000005" (or "...-r1" after a resume)
        digits = run["run_id"].rsplit(":eval-", 1)[-1].split("-")[0]
        step = int(digits) if digits.isdigit() else None
    return None if step is None else int(step)


def _update_series(by_step: dict[int, dict[str, float]],
                   job: dict[str, object]) -> tuple[dict[str, dict[int, float]], dict[str, str]]:
    """The update metrics to plot, and those not recorded with the reason."""
    series: dict[str, dict[int, float]] = defaultdict(dict)
    for step, m in by_step.items():
        for name, value in m.items():
            if name.startswith("update/") or name in OTHER_STEP_METRICS:
                series[name][step] = value
        if m.get("train/groups"):
            dropped = m.get("train/groups_dropped", math.nan)
            series["train/groups_dropped_share"][step] = dropped / m["train/groups"]
    if not by_step:
        return {}, {name: "not recorded (the run has no metrics)" for name in UPDATE_METRICS}
    missing: dict[str, str] = {}
    kl_coef = json_object(job.get("training")).get("kl_coef")
    if kl_coef == 0 and "update/kl" in series:
        # The learner reports 0.0 when there is no reference model: that is no measurement.
        del series["update/kl"]
        missing["update/kl"] = "not recorded: training.kl_coef is 0, so no KL was computed"
    for name in UPDATE_METRICS:
        if name not in series and name not in missing:
            missing[name] = "not recorded in any step"
    order = [*UPDATE_METRICS, *OTHER_STEP_METRICS]
    ordered = sorted(series, key=lambda n: (order.index(n) if n in order else len(order), n))
    return {n: {s: v for s, v in series[n].items() if not math.isnan(v)} for n in ordered}, missing


def _extremes(rollouts: list[Rollout]) -> tuple[list[RolloutRow], list[RolloutRow]]:
    """The best and worst graded rollouts. Only rollouts above the lowest reward can be "best"
    and only those below the highest "worst", so a rollout is never listed as both (when all
    rewards are equal, every rollout is among the best and none is worst). Ties go to
    later steps, then fewer (best) or more (worst) tool calls."""
    graded = [(r, r.reward or 0.0) for r in rollouts if r.reward is not None]
    if not graded:
        return [], []
    low, high = min(v for _, v in graded), max(v for _, v in graded)
    best = sorted((x for x in graded if x[1] > low or low == high),
                  key=lambda x: (-x[1], -(x[0].step or 0), len(x[0].model_calls)))
    worst = sorted((x for x in graded if x[1] < high),
                   key=lambda x: (x[1], -(x[0].step or 0), -len(x[0].model_calls)))
    return [_row(r) for r, _ in best[:N_EXTREMES]], [_row(r) for r, _ in worst[:N_EXTREMES]]


def _row(r: Rollout) -> RolloutRow:
    answer = " ".join(r.output_text.split())
    return RolloutRow(trace_id=r.trace_id, task_id=r.task_id, step=r.step, reward=r.reward,
                      calls=len(r.model_calls), status=r.status, finish_reason=r.finish_reason,
                      answer=answer[:140] + ("…" if len(answer) > 140 else ""))


def _job_name(run_dir: Path, job: dict[str, object]) -> str:
    marker = run_dir / "job_path.txt"
    if marker.exists():
        return Path(marker.read_text().strip()).stem
    return str(job.get("suffix") or run_dir.name)


def _wall_time(runs: list[RunRow]) -> float | None:
    spans = [(datetime.fromisoformat(r["created_at"]), datetime.fromisoformat(end))
             for r in runs if (end := r["finished_at"])]
    return sum((b - a).total_seconds() for a, b in spans) if spans else None


def _steps_total(run_dir: Path, job: dict[str, object]) -> int | None:
    checkpoint = RunDir(run_dir).latest_checkpoint()
    if checkpoint is not None:
        total = json.loads((checkpoint / "state.json").read_text()).get("total_steps")
        if total is not None:
            return int(total)
    max_steps = json_object(job.get("training")).get("max_steps")
    return max_steps if isinstance(max_steps, int) else None
