"""Principles 1 and 2: the task is well defined, and train and validation look like real traffic."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from arft.app.doctor.checks import (_check, _more, Check, MAX_DETAILS, MAX_EXACT_OVERLAP,
                                    MAX_NEAR_DUPLICATE_SHARE, MIN_TRAIN_ROWS, MIN_VALIDATION_ROWS, Verdict)
from arft.app.run import check_tools as check_split
from arft.config import JobSpec
from arft.data import checks
from arft.data.dataset import load_tasks
from arft.data.splits import split_path
from arft.data.traffic import traffic_tasks
from arft.graders.templates import resolve, TemplateError
from arft.graders.validate import item_reads, validate_grader
from arft.records import Task
from arft.tools.registry import open_toolbox


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
    """Load the splits (and traffic); raises ``ValueError`` (``DatasetError``) for bad files.

    ``traffic`` may be logged request/response pairs, chat-completions requests, fine-tuning chat
    rows or dataset rows (``arft.data.traffic``, the formats `arft import` reads)."""
    train = load_tasks(split_path(job, "train"))
    validation = load_tasks(split_path(job, "validation")) if job.validation_file else None
    return DoctorData(train=train, validation=validation,
                      traffic=traffic_tasks(traffic) if traffic is not None else None)



# -- principle 1: the task is well defined -----------------------------------------------------


def check_fields(job: JobSpec, data: DoctorData) -> Check:
    """Every row of every split has every item field the grader reads (``{{ item.* }}``
    templates, ``item["key"]`` in a python grader)."""
    reads = item_reads(job.rl.grader_dict, job.base_dir)
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
        names = sorted(toolbox.tools) + [f"{s.name} serving {s.serves!r}" for s in toolbox.servers]
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
    spec = job.rl.grader_dict
    problems = validate_grader(spec, job.base_dir)
    name = f"{spec.get('type')} grader {spec.get('name', '')!r}"
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


