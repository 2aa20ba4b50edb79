"""The evaluation summary printed: rich tables that fit an 80-column terminal (``render_summary``)
and the one-line version for logs (``summary_line``). The numbers come from
``arft.metrics.summary``."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from arft.metrics.summary import EvalSummary



def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def percent(x: float | None) -> str:
    """A share as a whole percentage, ``n/a`` when it is undefined."""
    return "n/a" if x is None else f"{x:.0%}"


def summary_line(summary: EvalSummary) -> str:
    """One line for logs: reward, pass@1, calls per rollout, parse errors, infra failures."""
    r = summary.reward
    reward = "n/a" if r.mean is None else f"{r.mean:.3f}±{r.std:.3f}"
    return (f"reward {reward} (n={r.n_graded}, grader errors {r.n_grader_errors}) | "
            f"pass@1 {_fmt(summary.pass_at_k.get(1))} | "
            f"calls/rollout {_fmt(summary.tool_calls.mean, '.2f')} | "
            f"parse errors {summary.parse_errors_total} | "
            f"constrained calls {percent(summary.constrained_call_share)} | "
            f"infra failed {summary.n_infra_failed}/{summary.n_rollouts}")


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE, show_header=False,
                  pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in rows:
        # Text, not str: names and flags from user data must not be read as rich markup.
        table.add_row(Text(key), Text(value))
    return table


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"


def _overview_table(s: EvalSummary) -> Table:
    spt = (str(s.samples_per_task_max) if s.samples_per_task_min == s.samples_per_task_max
           else f"{s.samples_per_task_min}-{s.samples_per_task_max}")
    return _kv_table("Rollouts", [
        ("rollouts", f"{s.n_rollouts} over {s.n_tasks} tasks ({spt} per task)"),
        ("status", _counts(s.status_counts)),
        ("finish reason", _counts(s.finish_reason_counts)),
        ("infra failed", f"{s.n_infra_failed} (left out of reward and behaviour)"),
    ])


def _reward_table(s: EvalSummary) -> Table:
    r = s.reward
    rows = [
        ("reward", f"mean {_fmt(r.mean)}  std {_fmt(r.std)}  "
                   f"min {_fmt(r.min)}  max {_fmt(r.max)}"),
        ("graded", f"{r.n_graded}  (ungraded {r.n_ungraded}, grader errors {r.n_grader_errors})"),
        ("pass rate", _fmt(s.pass_rate)),
        ("pass@k", "  ".join(f"@{k} {v:.3f}" for k, v in s.pass_at_k.items()) or "n/a"),
        ("grader latency", f"{_fmt(r.grader_latency_mean_s, '.2f')} s mean"),
    ]
    rows += [(f"  {name}", f"{v:.3f}") for name, v in r.sub_score_means.items()]
    if s.flag_counts:
        rows.append(("flags", _counts(s.flag_counts)))
    return _kv_table("Reward", rows)


def _behaviour_table(s: EvalSummary) -> Table:
    t, k, tm = s.tool_calls, s.tokens, s.timings
    share = "n/a" if t.parallel_turn_share is None else f"{t.parallel_turn_share:.1%}"
    return _kv_table("Behaviour (per rollout)", [
        ("tool calls", f"mean {_fmt(t.mean, '.2f')}  p50 {_fmt(t.p50, '.1f')}  "
                       f"p95 {_fmt(t.p95, '.1f')}  max {t.max if t.max is not None else 'n/a'}"),
        ("parallel turns", f"{share} of {t.n_tool_turns} tool-calling turns"),
        ("tool rounds", f"mean {_fmt(t.rounds_mean, '.2f')} sequential rounds"),
        ("critical path", f"mean {_fmt(t.critical_path_mean_s, '.2f')} s  "
                          f"p95 {_fmt(t.critical_path_p95_s, '.2f')} s of tool latency"),
        ("parse errors", f"{s.parse_errors_total} total, "
                         f"{_fmt(s.parse_errors_per_rollout, '.2f')} per rollout, "
                         f"{percent(s.parse_error_rate)} of attempted calls"),
        ("constrained calls", f"{percent(s.constrained_call_share)} of tool calls written under the "
                              f"tool-call grammar, {s.closed_calls} closed before the turn's token "
                              "limit"),
        ("tokens", f"mean {_fmt(k.mean_tokens, '.0f')} total, "
                   f"{_fmt(k.mean_sampled_tokens, '.0f')} sampled "
                   f"({k.n_with_tokens} rollouts with tokens)"),
        ("tokens/tool call", f"{_fmt(k.sampled_tokens_per_tool_call, '.1f')} sampled"),
        ("time (s)", f"generate {_fmt(tm.generate_s, '.2f')}  tools {_fmt(tm.tools_s, '.2f')}  "
                     f"grade {_fmt(tm.grade_s, '.2f')}  total {_fmt(tm.total_s, '.2f')}"),
    ])


def _tools_table(s: EvalSummary) -> Table:
    table = Table(title="Tools", title_justify="left", box=box.SIMPLE, pad_edge=False)
    for name, justify in [("tool", "left"), ("calls", "right"), ("errors", "right"),
                          ("err %", "right"), ("mean s", "right"), ("p95 s", "right")]:
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for name, t in s.tools.items():
        table.add_row(Text(name), str(t.calls), str(t.errors), f"{t.error_rate:.1%}",
                      f"{t.mean_latency_s:.3f}", f"{t.p95_latency_s:.3f}")
    return table


def histogram_text(histogram: dict[str, int], width: int = 40) -> str:
    """A text bar chart, one line per bucket: ``label | bars count``."""
    if not histogram:
        return "(no rollouts)"
    top = max(histogram.values()) or 1
    label_w = max(len(k) for k in histogram)
    lines = []
    for label, count in histogram.items():
        bar = "#" * max(round(count / top * width), 1 if count else 0)
        lines.append(f"{label:>{label_w}} | {bar + ' ' if bar else ''}{count}")
    return "\n".join(lines)


def render_summary(summary: EvalSummary, console: Console) -> None:
    """Print the summary as rich tables plus a text histogram; fits 80 columns."""
    console.print(_overview_table(summary))
    console.print(_reward_table(summary))
    console.print(_behaviour_table(summary))
    console.print(Text("Tool calls per rollout", style="italic"))
    console.print(Text(histogram_text(summary.tool_calls.histogram)))
    console.print()
    if summary.tools:
        console.print(_tools_table(summary))
