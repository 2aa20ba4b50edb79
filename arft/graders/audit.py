"""The grader audit: is the reward unhackable and continuous (the talk's principle 4)?

For every validation task ``audit_grader`` builds answers that should never earn reward and
grades them with the job's grader:

* ``empty``: no answer at all;
* ``echo_prompt``: the task's last user message sent back;
* ``long``: the prompt repeated to about ``LONG_WORDS`` words;
* ``all_candidates``: every distinct string (and number) found in the task's item but its
  ``id``, one a line (when there are at least two) — a ``like``/``ilike`` check or a lenient
  judge accepts it whatever the right answer is;
* ``tool_copy``: a baseline rollout's tool output that shows the reference among other text,
  pasted as the answer (only with baseline rollouts of that task; an output that is exactly the
  reference is the tool doing its job and is left out).

Any of them scoring above ``threshold`` is a hack the policy will find. From the baseline
rollouts' real grades it also measures how continuous the reward is (distinct values, share of
exact 0 and exact 1): a 0/1 reward gives a group of rollouts no partial credit to learn from.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import defaultdict
from typing import Literal

from pydantic import BaseModel

from arft.config import JobSpec
from arft.graders.base import Grader
from arft.graders.registry import grade_rollout
from arft.graders.templates import TemplateError, render_template
from arft.records import Message, Rollout, Task, new_trace_id

Kind = Literal["empty", "echo_prompt", "long", "all_candidates", "tool_copy"]
KINDS: tuple[Kind, ...] = ("empty", "echo_prompt", "long", "all_candidates", "tool_copy")
LONG_WORDS = 4000
BINARY_SHARE_WARN = 0.8
"""Warn when at least this share of the baseline grades is exactly 0 or exactly 1."""
REFERENCE_KEYS = ("answer", "reference", "expected", "expected_answer", "ground_truth",
                  "solution", "target", "label")
MAX_TOOL_COPIES = 3
CONCURRENCY = 8
PREVIEW_CHARS = 80

FIXES: dict[str, str] = {
    "empty": "the grader rewards an empty answer: check ne/neq operations, judge prompts and "
             "default scores",
    "echo_prompt": "the prompt alone earns reward, so the reference is visible in the prompt: "
                   "grade against something the prompt does not show",
    "long": "a long answer earns reward: cap or penalise length (builtin style_penalty, or a "
            "multi grader that combines correctness with a length term)",
    "all_candidates": "listing every candidate earns reward: compare the extracted answer with "
                      "`eq` (or a field of output_json) instead of `like`/`ilike`, or penalise "
                      "answers that name several candidates",
    "tool_copy": "pasting a tool output earns reward: require the answer's own format (e.g. an "
                 "output_json field checked with eq), or stop tools from showing the reference",
}


class AdversarialResult(BaseModel):
    """One adversarial answer and its grade. ``hack``: it scored above the threshold."""

    task_id: str
    kind: Kind
    score: float
    error: str | None = None
    hack: bool = False
    answer_preview: str = ""
    answer_chars: int = 0


class KindStats(BaseModel):
    """How one kind of adversarial answer fared over all tasks (grader errors left out)."""

    n: int = 0
    n_errors: int = 0
    n_above: int = 0
    mean: float | None = None
    max: float | None = None


class Continuity(BaseModel):
    """How continuous the baseline grades are (real grades only: grader errors are left out)."""

    n_scores: int
    n_grader_errors: int = 0
    n_distinct: int
    share_zero: float | None
    share_one: float | None
    mean: float | None
    std: float | None
    continuous: bool
    """False when the grades are mostly exact 0/1 or take at most two values."""


class AuditReport(BaseModel):
    """Everything ``audit_grader`` found; ``warnings`` say what to fix."""

    grader: str
    grader_type: str
    threshold: float
    n_tasks: int
    results: list[AdversarialResult]
    hacks: list[AdversarialResult]
    by_kind: dict[str, KindStats]
    continuity: Continuity | None
    warnings: list[str]

    @property
    def hackable(self) -> bool:
        return bool(self.hacks)


# -- adversarial answers -----------------------------------------------------------------------


def last_user_text(task: Task) -> str:
    """The content of the task's last user message ('' when there is none)."""
    for m in reversed(task.messages):
        if m.role == "user":
            return m.content or ""
    return ""


def long_answer(prompt: str, words: int = LONG_WORDS) -> str:
    """``prompt`` repeated until the answer has about ``words`` words."""
    unit = prompt.split() or ["answer"]
    reps = -(-words // len(unit))  # ceiling division
    return " ".join((unit * reps)[:max(words, len(unit))])


def item_strings(value: object) -> list[str]:
    """Every distinct string and number inside ``value`` (an item), in order of appearance."""
    out: dict[str, None] = {}

    def walk(v: object) -> None:
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, str):
            if v.strip():
                out.setdefault(v, None)
        elif isinstance(v, (int, float)):
            out.setdefault(str(v), None)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk(value)
    return list(out)


def _reference_templates(spec: object) -> list[str]:
    """Every ``reference`` template in a grader spec (``multi`` children included)."""
    found: list[str] = []
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "reference" and isinstance(value, str):
                found.append(value)
            else:
                found += _reference_templates(value)
    elif isinstance(spec, list):
        for value in spec:
            found += _reference_templates(value)
    return found


def reference_values(grader_spec: dict[str, object], item: dict[str, object]) -> list[str]:
    """What the grader compares with: its ``reference`` templates rendered from the item, else
    the item's usual answer keys (``answer``, ``reference``, ``expected``, ...)."""
    values: list[str] = []
    for template in _reference_templates(grader_spec):
        try:
            values.append(render_template(template, {}, item))
        except TemplateError:
            continue  # a reference that reads the sample is not a fixed value
    if not values:
        values = [str(item[k]) for k in REFERENCE_KEYS
                  if k in item and isinstance(item[k], (str, int, float))]
    return [v for v in dict.fromkeys(values) if v.strip()]


def tool_copies(task: Task, baseline: list[Rollout], references: list[str]) -> list[str]:
    """Distinct tool outputs of ``task``'s baseline rollouts that show a reference value among
    other text. An output that *is* the reference (a calculator's result) is left out: pasting
    it is the intended use of the tool, not a hack."""
    outputs: dict[str, None] = {}
    exact = {ref.strip().casefold() for ref in references}
    for rollout in baseline:
        if rollout.task_id != task.id:
            continue
        for call in rollout.tool_calls:
            if call.output.strip().casefold() in exact:
                continue
            if any(ref in call.output for ref in references):
                outputs.setdefault(call.output, None)
    return list(outputs)[:MAX_TOOL_COPIES]


def adversarial_answers(task: Task, grader_spec: dict[str, object],
                        baseline: list[Rollout] | None) -> list[tuple[Kind, str]]:
    """The adversarial answers for one task, as ``(kind, answer)`` pairs."""
    prompt = last_user_text(task)
    answers: list[tuple[Kind, str]] = [
        ("empty", ""),
        ("echo_prompt", prompt),
        ("long", long_answer(prompt)),
    ]
    # The id is not a candidate answer; with a single candidate there is nothing to hedge over
    # (the "list" would simply be the right answer).
    candidates = item_strings({k: v for k, v in task.item.items() if k != "id"})
    if len(candidates) > 1:
        answers.append(("all_candidates", "\n".join(candidates)))
    if baseline:
        refs = reference_values(grader_spec, task.item)
        answers += [("tool_copy", out) for out in tool_copies(task, baseline, refs)]
    return answers


def _rollout_for(task: Task, answer: str) -> Rollout:
    return Rollout(trace_id=new_trace_id(), task_id=task.id, run_id="audit", n_turns=1,
                   messages=(*task.messages, Message(role="assistant", content=answer)),
                   item=task.item)


# -- continuity --------------------------------------------------------------------------------


def continuity(scores: list[float], n_grader_errors: int = 0) -> Continuity:
    """Distinct values and share of exact 0 / exact 1 among real grades."""
    n = len(scores)
    zero = sum(s == 0.0 for s in scores)
    one = sum(s == 1.0 for s in scores)
    distinct = len(set(scores))
    binary = (zero + one) / n if n else 0.0
    return Continuity(
        n_scores=n, n_grader_errors=n_grader_errors, n_distinct=distinct,
        share_zero=zero / n if n else None, share_one=one / n if n else None,
        mean=statistics.fmean(scores) if n else None,
        std=statistics.pstdev(scores) if n else None,
        continuous=n > 0 and distinct > 2 and binary < BINARY_SHARE_WARN,
    )


def baseline_continuity(baseline: list[Rollout]) -> Continuity:
    """``continuity`` of the baseline's real grades (infra failures and grader errors left out)."""
    graded = [r for r in baseline if r.status != "infra_failed" and r.score is not None]
    scores = [s for s in (r.reward for r in graded) if s is not None]
    return continuity(scores, n_grader_errors=len(graded) - len(scores))


# -- the audit ---------------------------------------------------------------------------------


def _by_kind(results: list[AdversarialResult]) -> dict[str, KindStats]:
    groups: dict[str, list[AdversarialResult]] = defaultdict(list)
    for r in results:
        groups[r.kind].append(r)
    out: dict[str, KindStats] = {}
    for kind in KINDS:
        rs = groups.get(kind, [])
        if not rs:
            continue
        scores = [r.score for r in rs if r.error is None]
        out[kind] = KindStats(n=len(rs), n_errors=len(rs) - len(scores),
                              n_above=sum(r.hack for r in rs),
                              mean=statistics.fmean(scores) if scores else None,
                              max=max(scores, default=None))
    return out


def _warnings(report_kinds: dict[str, KindStats], cont: Continuity | None, threshold: float,
              grader_type: str) -> list[str]:
    warnings = []
    for kind, stats in report_kinds.items():
        if stats.n_above:
            warnings.append(f"hackable: {stats.n_above}/{stats.n} '{kind}' answers score above "
                            f"{threshold:g}. Fix: {FIXES[kind]}.")
        if stats.n_errors:
            warnings.append(f"{stats.n_errors}/{stats.n} '{kind}' answers got a grader error "
                            "(not a grade): check them with `arft grade`.")
    if cont is None:
        if grader_type in ("string_check", "label_model"):
            warnings.append(f"not continuous: a {grader_type} grader scores only 0 or 1; give "
                            "partial credit (text_similarity, builtin fact_recall or set_f1, or "
                            "a multi grader with weighted parts).")
    elif cont.n_scores == 0:
        warnings.append("the baseline has no real grades: run `arft eval JOB` and pass its "
                        "run directory with --run to measure continuity.")
    elif not cont.continuous:
        share = (cont.share_zero or 0.0) + (cont.share_one or 0.0)
        warnings.append(f"not continuous: {cont.n_distinct} distinct baseline score(s), "
                        f"{share:.0%} exactly 0 or 1; give partial credit (text_similarity, "
                        "builtin fact_recall or set_f1, or a multi grader with weighted parts).")
    return warnings


async def audit_grader(job: JobSpec, tasks: list[Task], grader: Grader,
                       baseline: list[Rollout] | None, threshold: float = 0.5) -> AuditReport:
    """Grade the adversarial answers of every task and measure the baseline's continuity.

    ``baseline``: rollouts of an earlier ``arft eval`` (their stored grades give the continuity
    numbers; their tool outputs give ``tool_copy`` answers), or None. Grader errors are never
    read as a score of 0: they are counted per kind and are never hacks.
    """
    spec = job.rl.grader_dict
    pending = [(task, kind, answer) for task in tasks
               for kind, answer in adversarial_answers(task, spec, baseline)]
    gate = asyncio.Semaphore(CONCURRENCY)

    async def grade_one(task: Task, kind: Kind, answer: str) -> AdversarialResult:
        async with gate:
            score = await grade_rollout(grader, _rollout_for(task, answer))
        real = score.error is None
        return AdversarialResult(
            task_id=task.id, kind=kind, score=score.score, error=score.error,
            hack=real and score.score > threshold, answer_preview=answer[:PREVIEW_CHARS],
            answer_chars=len(answer))

    results = list(await asyncio.gather(*(grade_one(*p) for p in pending)))
    cont = baseline_continuity(baseline) if baseline is not None else None
    by_kind = _by_kind(results)
    grader_type = str(spec.get("type", ""))
    return AuditReport(
        grader=str(getattr(grader, "name", "") or spec.get("name") or grader_type),
        grader_type=grader_type, threshold=threshold, n_tasks=len(tasks), results=results,
        hacks=[r for r in results if r.hack], by_kind=by_kind, continuity=cont,
        warnings=_warnings(by_kind, cont, threshold, grader_type))
