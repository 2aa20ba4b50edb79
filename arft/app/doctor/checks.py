"""The doctor's records and thresholds: one ``Check`` per question, a ``DoctorReport`` per job."""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal, Sequence

from pydantic import BaseModel


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
    "run.policy": (5, "each rollout sampled by the weights its step says"),  # `arft doctor RUN_DIR`
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


