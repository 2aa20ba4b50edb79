"""Do the training and validation sets look like real traffic? Overlap and drift between splits.

The talk's second principle: the sets a model is trained and evaluated on must match the traffic
it will serve, and an evaluation set that repeats training rows measures memory, not skill. These
are the measurements behind ``arft doctor``'s data checks (the verdicts live in
``arft.app.doctor``):

* ``split_overlap``: validation rows whose prompt is an exact copy of a training prompt (after
  folding case and whitespace), and near-duplicates (rapidfuzz ``ratio`` at or above
  ``NEAR_DUPLICATE_RATIO``).
* ``split_drift``: how two sets differ in prompt length (two-sample Kolmogorov-Smirnov
  statistic), in the tools their rows name, and in the item fields their rows carry.

A task's *prompt* is its last user message: rows often carry the same system prompt and worked
examples, which would make every pair of rows look alike; the last user message is the request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel

from arft.data.dataset import _named_tools
from arft.records import Task

NEAR_DUPLICATE_RATIO = 95.0
"""rapidfuzz ``ratio`` (0-100) at or above which two prompts are near-duplicates. 95 catches a
copied prompt with a typo or changed punctuation; templated prompts that differ in their numbers
("Please calculate 84 * 20." vs "... 23 * 22.") score about 80-92 and are not flagged."""
KS_COEFFICIENT = 1.63
"""c(alpha) of the two-sample KS test at alpha = 0.01: a length statistic above
``c * sqrt((n + m) / (n * m))`` is unlikely (1 %) between samples of one distribution."""
KS_MIN_STATISTIC = 0.2
"""Below this KS statistic the length distributions are called alike whatever the sample size:
large sets make tiny, harmless differences statistically significant."""
SHARE_GAP = 0.2
"""Drift when the share of rows naming a tool (or carrying an item field) differs by more than
this between two sets (20 percentage points)."""
ALL_JOB_TOOLS = "(any job tool)"
"""The tool label of a row that names no tools: it may call every tool the job provides."""
MAX_LISTED = 5


def prompt_text(task: Task) -> str:
    """The task's request: its last user message ('' when it has none)."""
    for m in reversed(task.messages):
        if m.role == "user":
            return m.content or ""
    return ""


def normalise(text: str) -> str:
    """Case folded, whitespace collapsed: what counts as the *same* prompt."""
    return " ".join(text.casefold().split())


# -- overlap -----------------------------------------------------------------------------------


class Overlap(BaseModel):
    """Rows of set ``b`` (validation) that repeat a row of set ``a`` (train)."""

    n_a: int
    n_b: int
    exact: list[tuple[str, str]]
    """(b task id, a task id) pairs with the same normalised prompt."""
    near: list[tuple[str, str, float]]
    """(b task id, closest a task id, ratio) for near-duplicates that are not exact copies."""
    near_ratio: float

    @property
    def share_exact(self) -> float:
        return len(self.exact) / self.n_b if self.n_b else 0.0

    @property
    def share_near(self) -> float:
        return len(self.near) / self.n_b if self.n_b else 0.0


def split_overlap(a: Sequence[Task], b: Sequence[Task],
                  near_ratio: float = NEAR_DUPLICATE_RATIO) -> Overlap:
    """Exact and near-duplicate prompts of ``b`` in ``a`` (each ``b`` row counted once)."""
    from rapidfuzz import fuzz, process

    a_text = [normalise(prompt_text(t)) for t in a]
    b_text = [normalise(prompt_text(t)) for t in b]
    first_of = {text: a[i].id for i, text in reversed(list(enumerate(a_text)))}
    exact = [(t.id, first_of[text]) for t, text in zip(b, b_text) if text in first_of]
    copied = {bid for bid, _ in exact}
    near: list[tuple[str, str, float]] = []
    if a_text and b_text:
        # One C++ matrix call: 1,000 x 1,000 short prompts takes well under a second.
        scores = process.cdist(b_text, a_text, scorer=fuzz.ratio, score_cutoff=near_ratio)
        for i, row in enumerate(scores):
            j = int(row.argmax())
            if row[j] >= near_ratio and b[i].id not in copied:
                near.append((b[i].id, a[j].id, float(row[j])))
    return Overlap(n_a=len(a), n_b=len(b), exact=exact, near=near, near_ratio=near_ratio)


# -- drift -------------------------------------------------------------------------------------


def ks_statistic(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    if not xs or not ys:
        raise ValueError("the KS statistic needs two non-empty samples")
    a, b = sorted(xs), sorted(ys)
    i = j = 0
    gap = 0.0
    while i < len(a) and j < len(b):
        v = min(a[i], b[j])
        while i < len(a) and a[i] == v:
            i += 1
        while j < len(b) and b[j] == v:
            j += 1
        gap = max(gap, abs(i / len(a) - j / len(b)))
    return gap


def ks_critical(n: int, m: int, coefficient: float = KS_COEFFICIENT) -> float:
    """The KS statistic above which two samples of sizes n and m differ (see KS_COEFFICIENT)."""
    return coefficient * math.sqrt((n + m) / (n * m))


def tools_of(task: Task) -> list[str]:
    """The tools a row may use (its ``tools`` and ``tool_choice``); ``ALL_JOB_TOOLS`` when it
    names none. Worked-example calls in its messages are left out: real traffic carries no
    worked examples, so counting them would call every few-shot training set drifted."""
    return _named_tools(task) or [ALL_JOB_TOOLS]


def presence_shares(rows: Sequence[list[str]]) -> dict[str, float]:
    """For each label, the share of rows that carry it."""
    counts: dict[str, int] = {}
    for labels in rows:
        for label in set(labels):
            counts[label] = counts.get(label, 0) + 1
    return {k: v / len(rows) for k, v in sorted(counts.items())} if rows else {}


class ShareGap(BaseModel):
    """One label (a tool or an item field) whose share of rows differs between two sets."""

    label: str
    share_a: float
    share_b: float

    @property
    def gap(self) -> float:
        return abs(self.share_a - self.share_b)


class Drift(BaseModel):
    """How set ``b`` differs from set ``a``; ``drifted`` lists what crosses a threshold."""

    a: str
    b: str
    n_a: int
    n_b: int
    length_median_a: float
    length_median_b: float
    length_ks: float
    length_limit: float
    """max(KS_MIN_STATISTIC, ks_critical(n_a, n_b))."""
    tool_gaps: list[ShareGap]
    field_gaps: list[ShareGap]
    fields_ignored: list[str] = []
    """Fields of ``a`` that ``b`` never carries, not compared (real traffic has no answers)."""
    share_gap: float = SHARE_GAP

    @property
    def drifted(self) -> list[str]:
        out = []
        if self.length_ks > self.length_limit:
            out.append(f"prompt length (median {self.length_median_a:g} vs "
                       f"{self.length_median_b:g} words, KS {self.length_ks:.2f} > "
                       f"{self.length_limit:.2f})")
        for kind, gaps in (("tool", self.tool_gaps), ("field", self.field_gaps)):
            out += [f"{kind} {g.label!r} in {g.share_a:.0%} vs {g.share_b:.0%} of rows"
                    for g in gaps if g.gap > self.share_gap][:MAX_LISTED]
        return out


def _gaps(a: dict[str, float], b: dict[str, float]) -> list[ShareGap]:
    gaps = [ShareGap(label=k, share_a=a.get(k, 0.0), share_b=b.get(k, 0.0)) for k in a | b]
    return sorted(gaps, key=lambda g: -g.gap)


def _median(xs: list[int]) -> float:
    s = sorted(xs)
    mid = len(s) // 2
    return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def split_drift(a: Sequence[Task], b: Sequence[Task], name_a: str, name_b: str,
                ignore_missing_fields: bool = False) -> Drift:
    """Drift of ``b`` against ``a``: prompt length in words, tools named, item fields carried.

    ``ignore_missing_fields``: fields of ``a`` that no row of ``b`` has are left out of the
    comparison (and listed) — for real traffic, which carries no reference answers.
    """
    if not a or not b:
        raise ValueError(f"drift needs rows in both sets ({name_a}: {len(a)}, {name_b}: {len(b)})")
    len_a = [len(prompt_text(t).split()) for t in a]
    len_b = [len(prompt_text(t).split()) for t in b]
    fields_a = presence_shares([[k for k in t.item if k != "id"] for t in a])
    fields_b = presence_shares([[k for k in t.item if k != "id"] for t in b])
    ignored: list[str] = []
    if ignore_missing_fields:
        ignored = sorted(set(fields_a) - set(fields_b))
        fields_a = {k: v for k, v in fields_a.items() if k not in ignored}
    return Drift(
        a=name_a, b=name_b, n_a=len(a), n_b=len(b),
        length_median_a=_median(len_a), length_median_b=_median(len_b),
        length_ks=ks_statistic(len_a, len_b),
        length_limit=max(KS_MIN_STATISTIC, ks_critical(len(a), len(b))),
        tool_gaps=_gaps(presence_shares([tools_of(t) for t in a]),
                        presence_shares([tools_of(t) for t in b])),
        field_gaps=_gaps(fields_a, fields_b), fields_ignored=ignored)
