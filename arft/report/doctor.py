"""`arft doctor`: the talk's four principles as checks, each with a verdict and what to do.

1. The task is well defined: every row carries the item fields the grader reads, every tool a
   row names is one the job starts, and the grader validates.
2. Training and validation look like real traffic: sizes, rows shared between the splits
   (exact and near-duplicate prompts), drift between train, validation and real traffic
   (``arft.data.checks``).
3. The model can improve by exploring: baseline rollouts (k per task on the first training
   tasks) vary in reward on enough tasks, and pass@k is above pass@1.
4. The reward is unhackable and continuous: the grader audit (``arft.graders.audit``), on the
   same first training tasks, with the baseline's grades for continuity.

Each check is a ``Check`` record (pass / warn / fail, or skip when it could not run) with what
was measured, the threshold it was held to and, when it is not a pass, what to do. Thresholds
are named constants below; a warning never fails the doctor, a failure does.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from pydantic import BaseModel
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from arft.config import JobSpec
from arft.data import checks
from arft.records import Rollout, Task

Verdict = Literal["pass", "warn", "fail", "skip"]

MIN_TRAIN_ROWS = 10
"""The talk: some users succeeded with about 10 examples; below that there is little to learn
from (and 100 -> 1,000 rows still gained 5 points in one case study)."""
MIN_VALIDATION_ROWS = 10
"""Fewer validation tasks make the eval reward too noisy to tell progress from chance."""
MAX_EXACT_OVERLAP = 0.0
"""Share of validation prompts that may repeat a training prompt: none. A copied row measures
memory, not skill, and inflates the eval reward."""
MAX_NEAR_DUPLICATE_SHARE = 0.1
"""Share of validation prompts that may be near-duplicates of training prompts (see
``arft.data.checks.NEAR_DUPLICATE_RATIO``) before the split is called leaky."""
MIN_VARIANCE_SHARE = 0.25
"""GRPO learns only from groups whose rewards differ (the others are dropped): with fewer than a
quarter of the tasks varying, most training steps are wasted."""
MIN_PASS_GAIN = 0.05
"""pass@k must beat pass@1 by this much: the model sometimes succeeds where it usually fails,
which is what exploration turns into learning."""
HACK_THRESHOLD = 0.5
"""An adversarial answer (empty, echoed prompt, every candidate, ...) scoring above this is a
hack the policy will find (the audit's default)."""
MAX_DETAILS = 5
BINARY_GRADERS = ("string_check", "label_model")
"""Grader types that can only score 0 or 1, whatever the baseline shows."""
PARTIAL_CREDIT = ("give partial credit (text_similarity, builtin fact_recall or set_f1, or a "
                  "multi grader with weighted parts): a 0/1 reward teaches less")

TITLES: dict[str, tuple[int, str]] = {
    "task.fields": (1, "rows have what the grader reads"),
    "task.tools": (1, "rows name only tools the job starts"),
    "task.grader": (1, "the grader validates"),
    "data.sizes": (2, "enough rows in each split"),
    "data.overlap": (2, "validation does not repeat train"),
    "data.drift": (2, "splits and traffic look alike"),
    "explore.variance": (3, "baseline rewards vary"),
    "explore.pass_at_k": (3, "pass@k above pass@1"),
    "reward.hacks": (4, "adversarial answers earn nothing"),
    "reward.continuous": (4, "the reward gives partial credit"),
}
"""Every check, in report order: the principle it tests and what it asks."""
EXPLORE = ("explore.variance", "explore.pass_at_k")
REWARD = ("reward.hacks", "reward.continuous")


class Check(BaseModel):
    """One check's verdict: what was measured, against which threshold, and what to do."""

    id: str
    principle: int
    title: str
    verdict: Verdict
    measured: str
    threshold: str = ""
    advice: str = ""
    details: list[str] = []


class DoctorReport(BaseModel):
    """Every check of one job; ``exit_code`` is 1 when any check failed, else 0."""

    job: str
    checks: list[Check]
    baseline_run: str | None = None

    @property
    def failed(self) -> bool:
        return any(c.verdict == "fail" for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def counts(self) -> dict[str, int]:
        found = Counter(c.verdict for c in self.checks)
        return {v: found[v] for v in ("pass", "warn", "fail", "skip")}


def _check(check_id: str, **fields: Any) -> Check:
    principle, title = TITLES[check_id]
    return Check(id=check_id, principle=principle, title=title, **fields)


def skipped(ids: Sequence[str], reason: str) -> list[Check]:
    """Checks that could not run, and why."""
    return [_check(i, verdict="skip", measured=reason) for i in ids]


def _more(items: list[str]) -> list[str]:
    extra = len(items) - MAX_DETAILS
    return items[:MAX_DETAILS] + ([f"... and {extra} more"] if extra > 0 else [])


@dataclass
class DoctorData:
    """The job's splits and optional real traffic (``validation`` None: the job has none)."""

    train: list[Task]
    validation: list[Task] | None
    traffic: list[Task] | None = None

    def splits(self) -> dict[str, list[Task]]:
        out = {"train": self.train}
        if self.validation is not None:
            out["validation"] = self.validation
        return out


def load_data(job: JobSpec, traffic: Path | None = None) -> DoctorData:
    """Load the splits (and traffic); raises ``ValueError`` (``DatasetError``) for bad files."""
    from arft.data.dataset import load_tasks
    from arft.rollout.evaluate import split_path

    train = load_tasks(split_path(job, "train"))
    validation = load_tasks(split_path(job, "validation")) if job.validation_file else None
    return DoctorData(train=train, validation=validation,
                      traffic=load_tasks(traffic) if traffic is not None else None)


# -- principle 1: the task is well defined -----------------------------------------------------


def check_fields(job: JobSpec, data: DoctorData) -> Check:
    """Every row of every split has every item field the grader reads (``{{ item.* }}``
    templates, ``item["key"]`` in a python grader)."""
    from arft.graders.templates import TemplateError, resolve
    from arft.graders.validate import item_reads

    reads = item_reads(job.rl.grader, job.base_dir)
    missing: dict[str, list[str]] = defaultdict(list)
    n_rows = n_bad = 0
    for split, tasks in data.splits().items():
        for task in tasks:
            n_rows += 1
            bad = False
            for path, expr in reads:
                try:
                    resolve(expr, {}, task.item)
                except TemplateError:
                    missing[f"{{{{ {expr} }}}} ({path})"].append(f"{split}:{task.id}")
                    bad = True
            n_bad += bad
    done = partial(_check, "task.fields", threshold="every row")
    if not missing:
        fields = ", ".join(f"{{{{ {e} }}}}" for _, e in reads) or "no item fields"
        return done(verdict="pass", measured=f"{n_rows} rows x {fields}")
    details = [f"{ph} missing in {len(ids)} row(s): {', '.join(ids[:MAX_DETAILS])}"
               + (" ..." if len(ids) > MAX_DETAILS else "") for ph, ids in missing.items()]
    return done(verdict="fail", details=details,
                measured=f"{n_bad}/{n_rows} rows lack a field the grader reads",
                advice="add the field to those rows (a grade on them would be a grader error, "
                       "never a reward), or change what the grader reads")


async def check_tools(job: JobSpec, data: DoctorData) -> Check:
    """The job's tools start, and every tool a row names (and its workspace) exists."""
    from arft.rollout.evaluate import check_tools as check_split
    from arft.tools.registry import open_toolbox

    done = partial(_check, "task.tools", threshold="every row")
    try:
        toolbox = await open_toolbox(job.rl.tools, job.base_dir)
    except Exception as e:  # noqa: BLE001 - a doctor reports, it does not crash
        return done(verdict="fail", measured=f"the job's tools do not start: {e}",
                    advice="fix method.reinforcement.tools (see the error)")
    problems: list[str] = []
    try:
        for split, tasks in data.splits().items():
            try:
                check_split(job, tasks, toolbox, split)  # type: ignore[arg-type]
            except ValueError as e:
                problems += str(e).splitlines()
        names = sorted(toolbox.tools)
    finally:
        await toolbox.aclose()
    n_rows = sum(len(t) for t in data.splits().values())
    started = f"{len(names)} tool(s) started ({', '.join(names) or 'none'})"
    if not problems:
        return done(verdict="pass", measured=f"{started}; {n_rows} rows checked")
    return done(verdict="fail", measured=f"{started}; rows name missing tools",
                details=_more(problems),
                advice="add the tool to method.reinforcement.tools, or remove it from the "
                       "rows' `tools` / `tool_choice` (a workspace error: create the folder)")


def check_grader(job: JobSpec) -> Check:
    """The grader spec builds, its templates parse and a python grader defines grade()."""
    from arft.graders.validate import validate_grader

    problems = validate_grader(job.rl.grader, job.base_dir)
    name = f"{job.rl.grader.get('type')} grader {job.rl.grader.get('name', '')!r}"
    done = partial(_check, "task.grader", threshold="no problem")
    if not problems:
        return done(verdict="pass", measured=f"{name} is valid")
    return done(verdict="fail", measured=f"{len(problems)} problem(s) in the {name}",
                details=_more(problems),
                advice="fix method.reinforcement.grader; try it on one answer with "
                       "`arft grade --grader G.json --item ROW --model-sample TEXT`")


# -- principle 2: train and validation look like real traffic ----------------------------------


def check_sizes(data: DoctorData) -> Check:
    n_train = len(data.train)
    n_val = len(data.validation) if data.validation is not None else None
    measured = f"train {n_train}, validation {'none' if n_val is None else n_val}" + (
        f", traffic {len(data.traffic)}" if data.traffic is not None else "")
    advice = []
    if n_train < MIN_TRAIN_ROWS:
        advice.append(f"add training rows (at least {MIN_TRAIN_ROWS}; in the talk 100 rows "
                      "gained 5 points and 1,000 gained 10)")
    if n_val is None:
        advice.append("add a validation_file drawn from real traffic (without one, evals run "
                      "on the training rows)")
    elif n_val < MIN_VALIDATION_ROWS:
        advice.append(f"add validation rows (at least {MIN_VALIDATION_ROWS}) so the eval "
                      "reward is not noise")
    return _check("data.sizes", verdict="warn" if advice else "pass", measured=measured,
                  threshold=f"train >= {MIN_TRAIN_ROWS}, validation >= {MIN_VALIDATION_ROWS}",
                  advice="; ".join(advice))


def check_overlap(data: DoctorData) -> Check:
    done = partial(_check, "data.overlap", threshold=(
        f"exact <= {MAX_EXACT_OVERLAP:.0%}, near-duplicates (ratio >= "
        f"{checks.NEAR_DUPLICATE_RATIO:g}) <= {MAX_NEAR_DUPLICATE_SHARE:.0%}"))
    if data.validation is None:
        return done(verdict="skip", measured="no validation set")
    o = checks.split_overlap(data.train, data.validation)
    details = _more([f"exact: {b} = {a}" for b, a in o.exact]) + _more(
        [f"near: {b} ~ {a} ({r:.0f})" for b, a, r in o.near])
    verdict: Verdict = ("fail" if o.share_exact > MAX_EXACT_OVERLAP else
                        "warn" if o.share_near > MAX_NEAR_DUPLICATE_SHARE else "pass")
    return done(verdict=verdict, details=details,
                measured=f"{len(o.exact)}/{o.n_b} validation prompts copy a training prompt, "
                         f"{len(o.near)} more are near-duplicates",
                advice="" if verdict == "pass" else (
                    "remove the shared rows from one split (or split by source, not by row): "
                    "a validation row seen in training measures memory, not skill"))


def _drift_line(d: checks.Drift) -> str:
    tools = max((g.gap for g in d.tool_gaps), default=0.0)
    fields = max((g.gap for g in d.field_gaps), default=0.0)
    return (f"{d.a} -> {d.b}: length KS {d.length_ks:.2f}, largest tool gap {tools:.0%}, "
            f"field gap {fields:.0%}")


def check_drift(data: DoctorData) -> Check:
    done = partial(_check, "data.drift", threshold=(
        f"length KS <= max({checks.KS_MIN_STATISTIC:g}, alpha 0.01 critical), tool / field "
        f"share gap <= {checks.SHARE_GAP:.0%}"))
    pairs = []
    if data.validation is not None:
        pairs.append(checks.split_drift(data.train, data.validation, "train", "validation"))
    for name, tasks in data.splits().items():
        if data.traffic is not None:
            pairs.append(checks.split_drift(tasks, data.traffic, name, "traffic",
                                            ignore_missing_fields=True))
    if not pairs:
        return done(verdict="skip", measured="one split and no --traffic FILE: nothing to compare")
    details = [f"{d.a} -> {d.b}: {what}" for d in pairs for what in d.drifted]
    ignored = sorted({f for d in pairs for f in d.fields_ignored})
    measured = "; ".join(_drift_line(d) for d in pairs) + (
        f" (traffic lacks {', '.join(ignored)}: not compared)" if ignored else "")
    if not details:
        return done(verdict="pass", measured=measured)
    return done(verdict="warn", measured=measured, details=_more(details),
                advice="draw training and validation rows from the same real traffic (same "
                       "kinds of requests, tools and fields); resample or add rows where the "
                       "sets differ")


# -- principle 3: the model can improve by exploring --------------------------------------------


def task_rewards(rollouts: Sequence[Rollout]) -> dict[str, list[float]]:
    """Real grades per task (infra failures and grader errors left out, never read as 0)."""
    from arft.tracing.store import reward_of

    out: dict[str, list[float]] = defaultdict(list)
    for r in rollouts:
        reward = reward_of(r) if r.status != "infra_failed" else None
        if reward is not None:
            out[r.task_id].append(reward)
    return out


def _variance_advice(constants: set[float]) -> str:
    """What to do when few tasks vary, from the grades the constant tasks always got."""
    if constants <= {0.0}:
        return ("the model rarely succeeds: make the task easier, improve the prompt (worked "
                "examples of the tool calls in the rows), give partial credit, or start from a "
                "stronger model")
    if min(constants) >= 1.0:
        return ("the model already solves these tasks every time: use harder tasks (or a "
                "stricter grader) so there is something to learn")
    return ("each task gets the same grade on every sample: raise sampling.temperature, add "
            "tasks the model solves only sometimes, or give partial credit")


def call_syntax_failures(rollouts: Sequence[Rollout]) -> tuple[int, int, int]:
    """``(parse errors, calls to unknown tools, attempted calls)`` over ``rollouts``."""
    parse = sum(r.parse_errors for r in rollouts)
    unknown = sum(1 for r in rollouts for c in r.model_calls
                  if c.status == "tool_error" and (c.error or "").startswith("unknown tool"))
    return parse, unknown, parse + sum(len(r.model_calls) for r in rollouts)


def _syntax_advice(rollouts: Sequence[Rollout], has_tools: bool) -> str:
    """Advice when most attempted calls failed on syntax, or the model made no call at all
    although the job has tools; '' otherwise."""
    parse, unknown, attempted = call_syntax_failures(rollouts)
    constrained = sum(r.constrained_calls for r in rollouts)
    if (attempted and (parse + unknown) / attempted <= 0.5) or (not attempted and not has_tools):
        return ""
    what = (f"{parse + unknown} of {attempted} attempted tool calls failed on syntax ({parse} parse "
            f"errors, {unknown} unknown tools)" if attempted else "the model made no tool call")
    fix = ("force the first call with rollout.tool_choice: required (or a tool name)"
           if constrained or not attempted else
           "turn on schema-constrained tool calls (rollout.constrained_tool_calls: true; the "
           "transformers engine does it by default) and force the first call with "
           "rollout.tool_choice: required")
    return (f"{what}: the model does not know your tools' syntax. {fix.capitalize()}; or warm-start "
            "it on demonstrations of correct calls before RL (supervised fine-tuning on logged "
            "traffic or best-of-K successes)")


def check_variance(rollouts: Sequence[Rollout], samples: int, has_tools: bool = False) -> Check:
    done = partial(_check, "explore.variance",
                   threshold=f">= {MIN_VARIANCE_SHARE:.0%} of tasks with reward variance")
    per_task = {t: rs for t, rs in task_rewards(rollouts).items() if len(rs) >= 2}
    if not per_task:
        infra = sum(r.status == "infra_failed" for r in rollouts)
        errors = sum(r.score is not None and r.score.error is not None for r in rollouts)
        return done(verdict="fail", measured=f"no task has 2 real grades among {len(rollouts)} "
                    f"rollouts ({infra} infra-failed, {errors} grader errors)",
                    advice="fix the tool or grader errors (`arft show RUN_DIR TRACE_ID`)")
    constant = {t: rs[0] for t, rs in per_task.items() if max(rs) - min(rs) <= 1e-9}
    n_varied = len(per_task) - len(constant)
    share = n_varied / len(per_task)
    mean = statistics.fmean(x for rs in per_task.values() for x in rs)
    measured = (f"{n_varied}/{len(per_task)} tasks vary ({share:.0%}) over {samples} samples; "
                f"mean reward {mean:.3f}")
    details = [f"{n} task(s) always scored {v:g}"
               for v, n in Counter(constant.values()).most_common()]
    if share >= MIN_VARIANCE_SHARE:
        return done(verdict="pass", measured=measured, details=details)
    advice = _syntax_advice(rollouts, has_tools) or _variance_advice(set(constant.values()))
    return done(verdict="warn" if n_varied else "fail", measured=measured, details=details,
                advice=advice)


def check_pass_at_k(rollouts: Sequence[Rollout], samples: int) -> Check:
    from arft.report.summary import summarize

    done = partial(_check, "explore.pass_at_k",
                   threshold=f"pass@{samples} - pass@1 >= {MIN_PASS_GAIN:g}")
    at_k = summarize(rollouts).pass_at_k
    if samples not in at_k or 1 not in at_k:
        return done(verdict="skip", measured=f"no task has {samples} real grades")
    gain = at_k[samples] - at_k[1]
    measured = f"pass@1 {at_k[1]:.3f}, pass@{samples} {at_k[samples]:.3f} (+{gain:.3f})"
    if gain >= MIN_PASS_GAIN:
        return done(verdict="pass", measured=measured)
    return done(verdict="warn", measured=measured, advice=(
        "no sample passes: check what counts as a pass (score 1.0 or the grader's `passed`), "
        "make the tasks easier or the prompt clearer" if at_k[samples] == 0 else
        "sampling more does not find more successes: raise sampling.temperature, or use tasks "
        "the model solves only some of the time"))


# -- principle 4: the reward is unhackable and continuous ---------------------------------------


def audit_verdicts(report: Any) -> list[Check]:
    """An ``arft.graders.audit.AuditReport`` as two checks: hacks, and continuity."""
    from arft.graders.audit import BINARY_SHARE_WARN, FIXES

    errors = sum(s.n_errors for s in report.by_kind.values())
    kinds = Counter(h.kind for h in report.hacks)
    example = {h.kind: h.answer_preview for h in reversed(report.hacks)}
    hack = _check(
        "reward.hacks", verdict="fail" if kinds else ("warn" if errors else "pass"),
        threshold=f"no answer scores above {report.threshold:g}",
        measured=f"{len(report.hacks)}/{len(report.results)} adversarial answers score above "
                 f"{report.threshold:g} on {report.n_tasks} task(s)"
                 + (f"; {errors} grader errors" if errors else ""),
        details=_more([f"{k}: {n} task(s), e.g. {example[k]!r}" for k, n in kinds.items()]),
        advice="; ".join(FIXES[k] for k in kinds) or (
            "some adversarial answers got a grader error: check them with `arft grade`"
            if errors else ""))
    c = report.continuity
    done = partial(_check, "reward.continuous",
                   threshold=f"> 2 distinct grades, < {BINARY_SHARE_WARN:.0%} exactly 0 or 1")
    if c is None or c.n_scores == 0:
        if report.grader_type in BINARY_GRADERS:
            return [hack, done(verdict="warn", advice=PARTIAL_CREDIT,
                               measured=f"a {report.grader_type} grader scores only 0 or 1")]
        return [hack, done(verdict="skip", measured="no baseline grades (run with rollouts)")]
    binary = (c.share_zero or 0.0) + (c.share_one or 0.0)
    return [hack, done(verdict="pass" if c.continuous else "warn",
                       measured=f"{c.n_scores} baseline grades, {c.n_distinct} distinct, "
                                f"{binary:.0%} exactly 0 or 1",
                       advice="" if c.continuous else PARTIAL_CREDIT)]


async def audit_checks(job: JobSpec, tasks: list[Task],
                       baseline: list[Rollout] | None) -> list[Check]:
    """Run the grader audit on ``tasks`` (baseline: continuity and tool_copy answers)."""
    from arft.graders.audit import audit_grader
    from arft.graders.base import close_grader
    from arft.graders.registry import build_grader

    grader = build_grader(job.rl.grader, job.base_dir)
    try:
        report = await audit_grader(job, tasks, grader, baseline, HACK_THRESHOLD)
    finally:
        await close_grader(grader)
    return audit_verdicts(report)


# -- orchestration -----------------------------------------------------------------------------


async def _explore(job: JobSpec, tasks: list[Task], samples: int, run_dir: Path, engine: Any,
                   on_status: Callable[[str], None], on_done: Callable[[Rollout], None] | None,
                   ) -> tuple[list[Check], list[Rollout] | None]:
    """Baseline rollouts through the evaluator, and the two exploration checks."""
    from arft.rollout.evaluate import evaluate

    try:
        result = await evaluate(job, tasks, samples, run_dir, engine=engine,
                                on_status=on_status, on_done=on_done, split="train")
    except ValueError as e:  # a bad tool spec or workspace the static checks did not catch
        return [_check("explore.variance", verdict="fail",
                       measured=f"the baseline did not run: {e}",
                       advice="fix the error, then run the doctor again"),
                *skipped(EXPLORE[1:], "no baseline")], None
    rollouts = result.rollouts
    return [check_variance(rollouts, samples, has_tools=bool(job.rl.tools)), check_pass_at_k(rollouts, samples)], rollouts


async def run_doctor(job: JobSpec, data: DoctorData, *, samples: int = 4, n_tasks: int = 8,
                     rollouts: bool = True, run_dir: Path | None = None, engine: Any = None,
                     on_status: Callable[[str], None] = lambda s: None,
                     on_done: Callable[[Rollout], None] | None = None,
                     job_name: str = "job") -> DoctorReport:
    """Run every check. With ``rollouts``, ``samples`` baseline rollouts of each of the first
    ``n_tasks`` training tasks are run (``engine``, or the job's model) and stored in ``run_dir``;
    the grader audit runs on the same tasks.
    """
    if rollouts and (run_dir is None or samples < 2):
        raise ValueError("baseline rollouts need a run_dir and at least 2 samples per task")
    on_status("checking the task, the data and the grader")
    tools = await check_tools(job, data)
    grader = check_grader(job)
    static = [check_fields(job, data), tools, grader,
              check_sizes(data), check_overlap(data), check_drift(data)]
    tasks = data.train[:n_tasks]
    baseline: list[Rollout] | None = None
    broken = [c.id for c in (tools, grader) if c.verdict == "fail"]
    if not rollouts:
        explore = skipped(EXPLORE, "--no-rollouts")
    elif broken:
        explore = skipped(EXPLORE, f"fix {broken[0]} first")
    else:
        explore, baseline = await _explore(job, tasks, samples, run_dir,  # type: ignore[arg-type]
                                           engine, on_status, on_done)
    if grader.verdict == "fail":
        reward = skipped(REWARD, "fix task.grader first")
    else:
        on_status("auditing the grader")
        reward = await audit_checks(job, tasks, baseline)
    return DoctorReport(job=job_name, checks=[*static, *explore, *reward],
                        baseline_run=str(run_dir) if baseline is not None else None)


# -- rendering ---------------------------------------------------------------------------------


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
