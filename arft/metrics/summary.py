"""The evaluation summary: the numbers the hosted Agent RFT service reports, computed from rollouts.

``summarize`` turns rollouts into an ``EvalSummary`` (a JSON-serialisable pydantic model) and
``flat_metrics`` into ``prefix/name -> number`` metrics for the store and the trackers. No
rendering here: the trainer, the app and the reports all read these numbers
(``arft.report.summary`` prints them).

Which rollouts count where (DESIGN rule 4, "nothing is silently zero"):

- reward, pass rate and pass@k use *graded* rollouts only: not infra-failed, with a score and
  no grader error. A missing grade is never a 0; it is counted in ``n_ungraded`` or
  ``n_grader_errors`` instead.
- behaviour numbers (tool calls per rollout, parallel turns, parse errors, tokens, timings) use
  every rollout that did not fail for infrastructure reasons, graded or not: an infra failure
  cuts a rollout short and would make the agent look cheaper than it is.
- per-tool numbers use every tool call of every rollout, so infra errors show up per tool.

A rollout *passes* when ``score.passed`` is True, or, when the grader left ``passed`` unset,
when ``score.score >= 1.0`` (full marks).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence

from pydantic import BaseModel

from arft.budget import critical_path_s, usage
from arft.records import Rollout, Score, ToolCallRecord

PASS_THRESHOLD = 1.0
"""Score at or above which a grade without an explicit ``passed`` counts as a pass."""


class RewardStats(BaseModel):
    """Reward over graded rollouts; ``None`` statistics when nothing was graded."""

    n_graded: int = 0
    n_ungraded: int = 0
    """Not infra-failed but without any score."""
    n_grader_errors: int = 0
    """Not infra-failed, scored, but the grader reported an error (no real grade)."""
    mean: float | None = None
    std: float | None = None
    """Population standard deviation (ddof=0): these are all the samples, not an estimate."""
    min: float | None = None
    max: float | None = None
    sub_score_means: dict[str, float] = {}
    grader_latency_mean_s: float | None = None
    """Over every score returned, errors included: a failing grader still costs time."""


class ToolCallStats(BaseModel):
    """Distribution of tool calls per rollout, and how often calls ran in parallel."""

    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    max: int | None = None
    histogram: dict[str, int] = {}
    """Rollouts per number of calls: "0", "1", ..., and ">=N" for N or more calls."""
    n_tool_turns: int = 0
    """Turns with at least one tool call."""
    parallel_turn_share: float | None = None
    """Share of tool-calling turns that made more than one call."""
    rounds_mean: float | None = None
    """Sequential tool rounds per rollout (turns with an executed call; ``budget.unit: turns``)."""
    critical_path_mean_s: float | None = None
    """Measured critical-path tool latency per rollout: per turn, its slowest call (seconds)."""
    critical_path_p95_s: float | None = None


class ToolStats(BaseModel):
    """One tool's calls, errors (status != "ok") and latency."""

    calls: int
    errors: int
    error_rate: float
    errors_by_status: dict[str, int]
    mean_latency_s: float
    p95_latency_s: float


class TokenStats(BaseModel):
    """Token counts over rollouts that have tokens (engines that expose them)."""

    n_with_tokens: int = 0
    mean_tokens: float | None = None
    mean_sampled_tokens: float | None = None
    sampled_tokens_per_tool_call: float | None = None


class TimingStats(BaseModel):
    """Mean seconds per rollout in each phase."""

    generate_s: float | None = None
    tools_s: float | None = None
    grade_s: float | None = None
    total_s: float | None = None


class EvalSummary(BaseModel):
    """Everything ``summarize`` computes; see the module docstring for which rollouts count."""

    n_tasks: int
    n_rollouts: int
    samples_per_task_min: int
    samples_per_task_max: int
    status_counts: dict[str, int]
    finish_reason_counts: dict[str, int]
    n_infra_failed: int
    reward: RewardStats
    pass_rate: float | None
    pass_at_k: dict[int, float]
    """pass@k, unbiased estimator averaged over tasks with at least k graded samples."""
    flag_counts: dict[str, int]
    tool_calls: ToolCallStats
    tools: dict[str, ToolStats]
    parse_errors_total: int
    parse_errors_per_rollout: float | None
    parse_error_rate: float | None = None
    """Parse errors over attempted calls (well-formed calls + parse errors); None without attempts."""
    constrained_call_share: float | None = None
    """Share of the model's tool calls written under a tool-call grammar; None without calls."""
    closed_calls: int = 0
    """Constrained calls the engine closed by the grammar's shortest completion because the turn's
    ``max_new_tokens`` was about to run out (``Rollout.closed_calls``)."""
    tokens: TokenStats
    timings: TimingStats


# -- small numeric helpers ---------------------------------------------------------------------


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def percentile(xs: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation (numpy's default); None if empty."""
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def passed(score: Score) -> bool:
    """Whether a (real, error-free) grade is a pass: ``passed`` if set, else full marks."""
    return score.passed if score.passed is not None else score.score >= PASS_THRESHOLD


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task with n samples of which c passed: 1 - C(n-c,k)/C(n,k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, the task has {n}; "
                         "lower k or draw more samples per task")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# -- the pieces of the summary -----------------------------------------------------------------


def _reward_stats(behaviour: Sequence[Rollout]) -> RewardStats:
    rewards = [r for r in (x.reward for x in behaviour) if r is not None]
    scores = [x.score for x in behaviour if x.score is not None]
    subs: dict[str, list[float]] = defaultdict(list)
    for x in behaviour:
        if x.reward is not None and x.score is not None:
            for name, value in x.score.sub_scores.items():
                subs[name].append(value)
    return RewardStats(
        n_graded=len(rewards),
        n_ungraded=sum(x.score is None for x in behaviour),
        n_grader_errors=sum(s.error is not None for s in scores),
        mean=_mean(rewards),
        std=statistics.pstdev(rewards) if rewards else None,
        min=min(rewards, default=None),
        max=max(rewards, default=None),
        sub_score_means={k: sum(v) / len(v) for k, v in sorted(subs.items())},
        grader_latency_mean_s=_mean([s.latency_s for s in scores]),
    )


def _pass_stats(behaviour: Sequence[Rollout]) -> tuple[float | None, dict[int, float]]:
    """Pass rate over graded rollouts, and pass@k for k = 1..max graded samples of a task."""
    per_task: dict[str, list[bool]] = defaultdict(list)
    for x in behaviour:
        if x.reward is not None and x.score is not None:
            per_task[x.task_id].append(passed(x.score))
    outcomes = [p for ps in per_task.values() for p in ps]
    rate = sum(outcomes) / len(outcomes) if outcomes else None
    max_n = max((len(ps) for ps in per_task.values()), default=0)
    at_k: dict[int, float] = {}
    for k in range(1, max_n + 1):
        values = [pass_at_k(len(ps), sum(ps), k) for ps in per_task.values() if len(ps) >= k]
        at_k[k] = sum(values) / len(values)
    return rate, at_k


def _histogram(counts: Sequence[int], cap: int) -> dict[str, int]:
    """Rollouts per number of calls, 0 up to the largest seen, with a ">=cap" overflow bucket."""
    if not counts:
        return {}
    top = min(max(counts), cap)
    hist = {str(i): 0 for i in range(top)}
    hist[f">={cap}" if top == cap else str(top)] = 0
    for n in counts:
        hist[f">={cap}" if n >= cap else str(n)] += 1
    return hist


def _tool_call_stats(behaviour: Sequence[Rollout], cap: int) -> ToolCallStats:
    counts = [len(x.model_calls) for x in behaviour]
    n_tool_turns = n_parallel = 0
    for x in behaviour:
        per_turn = Counter(c.turn for c in x.model_calls)
        n_tool_turns += len(per_turn)
        n_parallel += sum(1 for n in per_turn.values() if n > 1)
    paths = [critical_path_s(x.tool_calls) for x in behaviour]
    return ToolCallStats(
        mean=_mean(counts), p50=percentile(counts, 50), p95=percentile(counts, 95),
        max=max(counts, default=None), histogram=_histogram(counts, cap),
        n_tool_turns=n_tool_turns,
        parallel_turn_share=n_parallel / n_tool_turns if n_tool_turns else None,
        rounds_mean=_mean([usage(x.tool_calls, "turns") for x in behaviour]),
        critical_path_mean_s=_mean(paths), critical_path_p95_s=percentile(paths, 95),
    )


def _per_tool_stats(rollouts: Sequence[Rollout]) -> dict[str, ToolStats]:
    by_name: dict[str, list[ToolCallRecord]] = defaultdict(list)
    for x in rollouts:
        for c in x.model_calls:
            by_name[c.name].append(c)
    out: dict[str, ToolStats] = {}
    for name in sorted(by_name):
        calls = by_name[name]
        bad = Counter(c.status for c in calls if c.status != "ok")
        latencies = [c.latency_s for c in calls]
        out[name] = ToolStats(
            calls=len(calls), errors=sum(bad.values()),
            error_rate=sum(bad.values()) / len(calls), errors_by_status=dict(sorted(bad.items())),
            mean_latency_s=sum(latencies) / len(latencies),
            p95_latency_s=percentile(latencies, 95) or 0.0,
        )
    return out


def _token_stats(behaviour: Sequence[Rollout]) -> TokenStats:
    # Rollouts from engines that expose no tokens would read as 0 tokens: leave them out.
    with_tokens = [x for x in behaviour if x.token_ids]
    sampled = sum(x.n_sampled_tokens for x in with_tokens)
    calls = sum(len(x.tool_calls) for x in with_tokens)
    return TokenStats(
        n_with_tokens=len(with_tokens),
        mean_tokens=_mean([len(x.token_ids) for x in with_tokens]),
        mean_sampled_tokens=_mean([x.n_sampled_tokens for x in with_tokens]),
        sampled_tokens_per_tool_call=sampled / calls if calls else None,
    )


def _timing_stats(behaviour: Sequence[Rollout]) -> TimingStats:
    return TimingStats(
        generate_s=_mean([x.timings.generate_s for x in behaviour]),
        tools_s=_mean([x.timings.tools_s for x in behaviour]),
        grade_s=_mean([x.timings.grade_s for x in behaviour]),
        total_s=_mean([x.timings.total_s for x in behaviour]),
    )


def summarize(rollouts: Sequence[Rollout], *, histogram_cap: int = 10) -> EvalSummary:
    """Summarise rollouts (typically one eval run). ``histogram_cap``: calls-per-rollout values
    at or above it share one ">=cap" histogram bucket."""
    if histogram_cap < 1:
        raise ValueError(f"histogram_cap must be at least 1, got {histogram_cap}")
    behaviour = [x for x in rollouts if x.status != "infra_failed"]
    per_task = Counter(x.task_id for x in rollouts)
    rate, at_k = _pass_stats(behaviour)
    flags = Counter(f for x in rollouts if x.score is not None for f in x.score.flags)
    return EvalSummary(
        n_tasks=len(per_task),
        n_rollouts=len(rollouts),
        samples_per_task_min=min(per_task.values(), default=0),
        samples_per_task_max=max(per_task.values(), default=0),
        status_counts=dict(sorted(Counter(x.status for x in rollouts).items())),
        finish_reason_counts=dict(sorted(Counter(x.finish_reason for x in rollouts).items())),
        n_infra_failed=len(rollouts) - len(behaviour),
        reward=_reward_stats(behaviour),
        pass_rate=rate,
        pass_at_k=at_k,
        flag_counts=dict(sorted(flags.items())),
        tool_calls=_tool_call_stats(behaviour, histogram_cap),
        tools=_per_tool_stats(rollouts),
        parse_errors_total=sum(x.parse_errors for x in behaviour),
        parse_errors_per_rollout=_mean([x.parse_errors for x in behaviour]),
        parse_error_rate=_ratio(sum(x.parse_errors for x in behaviour),
                                sum(len(x.model_calls) + x.parse_errors for x in behaviour)),
        constrained_call_share=_ratio(sum(x.constrained_calls for x in behaviour),
                                      sum(len(x.model_calls) for x in behaviour)),
        closed_calls=sum(x.closed_calls for x in behaviour),
        tokens=_token_stats(behaviour),
        timings=_timing_stats(behaviour),
    )


def flat_metrics(summary: EvalSummary, prefix: str) -> dict[str, float]:
    """The summary as flat ``prefix/name -> number`` metrics (missing values left out, never 0)."""
    values: dict[str, float | int | None] = {
        "reward_mean": summary.reward.mean, "reward_std": summary.reward.std,
        "pass_rate": summary.pass_rate, "rollouts": summary.n_rollouts,
        "infra_failed": summary.n_infra_failed, "grader_errors": summary.reward.n_grader_errors,
        "tool_calls_mean": summary.tool_calls.mean, "tool_calls_p50": summary.tool_calls.p50,
        "tool_calls_p95": summary.tool_calls.p95, "tool_calls_max": summary.tool_calls.max,
        "parallel_turn_share": summary.tool_calls.parallel_turn_share,
        "tool_rounds_mean": summary.tool_calls.rounds_mean,
        "critical_path_s_mean": summary.tool_calls.critical_path_mean_s,
        "critical_path_s_p95": summary.tool_calls.critical_path_p95_s,
        "parse_errors": summary.parse_errors_total,
        "parse_error_rate": summary.parse_error_rate,
        "constrained_call_share": summary.constrained_call_share, "closed_calls": summary.closed_calls,
        "tokens_mean": summary.tokens.mean_tokens, "sampled_tokens_mean": summary.tokens.mean_sampled_tokens,
        "tokens_per_tool_call": summary.tokens.sampled_tokens_per_tool_call,
        "time_generate_s": summary.timings.generate_s, "time_tools_s": summary.timings.tools_s,
        "time_grade_s": summary.timings.grade_s,
    }
    for k, v in summary.pass_at_k.items():
        values[f"pass@{k}"] = v
    for name, mean in summary.reward.sub_score_means.items():
        values[f"sub/{name}"] = mean
    for name, tool in summary.tools.items():
        values[f"tool/{name}/calls"] = tool.calls
        values[f"tool/{name}/errors"] = tool.errors
        values[f"tool/{name}/latency_mean_s"] = tool.mean_latency_s
    for n_calls, count in summary.tool_calls.histogram.items():
        values[f"tool_calls_hist/{n_calls}"] = count
    return {f"{prefix}/{k}": float(v) for k, v in values.items() if v is not None}
