"""Principles 3 and 4: the model can improve by exploring, and the reward is unhackable and continuous."""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from functools import partial
from typing import Any, Sequence

from arft.app.doctor.checks import (_check, _more, BINARY_GRADERS, Check, HACK_THRESHOLD, MIN_PASS_GAIN,
                                    MIN_VARIANCE_SHARE, PARTIAL_CREDIT)
from arft.config import JobSpec
from arft.graders.audit import audit_grader, BINARY_SHARE_WARN, FIXES
from arft.graders.base import Grader
from arft.metrics.summary import summarize
from arft.records import Rollout, Task


# -- principle 3: the model can improve by exploring --------------------------------------------


def task_rewards(rollouts: Sequence[Rollout]) -> dict[str, list[float]]:
    """Real grades per task (infra failures and grader errors left out, never read as 0)."""
    out: dict[str, list[float]] = defaultdict(list)
    for r in rollouts:
        if r.reward is not None:
            out[r.task_id].append(r.reward)
    return out


WARM_START = ("warm-start it on demonstrations before RL: `arft import` your logged traffic and "
              "`arft sft JOB --data DIR/demos.jsonl`, an `arft eval` run of a stronger model as "
              "`--data`, or `arft train JOB --warm-start 8` (its own best-of-8 successes)")
"""The warm-start advice, shared by the checks that find no signal for RL."""


def _variance_advice(constants: set[float], hint: str | None = None) -> str:
    """What to do when few tasks vary, from the grades the constant tasks always got; ``hint``:
    the privileged hint to propose (``arft.app.rescue.reference_hint``) where nothing succeeds."""
    if constants <= {0.0}:
        rescue = ("; or, with no teacher, let arft rescue those groups with privileged hints from "
                  f"the rows' reference fields: `training: {{rescue: {{hint: {json.dumps(hint)}}}}}` "
                  "(or `hint: auto`); a hint that names the step an expert takes (the expected call) "
                  "teaches more than the answer does (docs/training.md, Rescue)" if hint else "")
        return ("the model rarely succeeds: make the task easier, improve the prompt (worked "
                "examples of the tool calls in the rows), give partial credit, start from a "
                f"stronger model, or {WARM_START}{rescue}")
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
    return f"{what}: the model does not know your tools' syntax. {fix.capitalize()}; or {WARM_START}"


def check_variance(rollouts: Sequence[Rollout], samples: int, has_tools: bool = False,
                   hint: str | None = None) -> Check:
    """Enough tasks whose rewards vary between samples (else GRPO drops their groups); ``hint``:
    the rescue hint to propose where none succeeds (None: the job has one, or nothing to build it on)."""
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
    advice = _syntax_advice(rollouts, has_tools) or _variance_advice(set(constant.values()), hint)
    return done(verdict="warn" if n_varied else "fail", measured=measured, details=details,
                advice=advice)


def check_pass_at_k(rollouts: Sequence[Rollout], samples: int) -> Check:
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


async def audit_checks(job: JobSpec, tasks: list[Task], grader: Grader,
                       baseline: list[Rollout] | None) -> list[Check]:
    """Run the grader audit on ``tasks`` (baseline: continuity and tool_copy answers)."""
    return audit_verdicts(await audit_grader(job, tasks, grader, baseline, HACK_THRESHOLD))


