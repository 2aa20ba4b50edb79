"""The figures of the HTML training report, drawn with matplotlib (Agg, no display needed).

One function per figure. Each takes plain data (step -> ``EvalSummary``, step -> metric value)
and returns PNG bytes, or ``None`` when its data is absent: the report then says "not recorded"
instead of drawing an empty or all-zero chart (DESIGN rule 4). Missing points are left out of a
line, never drawn as 0.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from arft.metrics.summary import EvalSummary

if TYPE_CHECKING:  # matplotlib imports lazily
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Series = Mapping[int, float]
"""step -> value; a step that is absent was not recorded."""

TRAIN, EVAL, BASE = "#1f77b4", "#ff7f0e", "#7f7f7f"
_STYLE = {"axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
          "grid.alpha": 0.3, "axes.titlesize": 11, "axes.titleweight": "bold",
          "axes.labelsize": 9, "xtick.labelsize": 8, "ytick.labelsize": 8,
          "legend.fontsize": 8, "legend.frameon": False, "font.size": 9}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # a report is written on servers without a display
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def _figure(ncols: int = 1, nrows: int = 1, width: float = 9.0, height: float = 3.2,
            **kw: Any) -> Iterator[tuple[Any, Any]]:
    plt = _plt()
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width, height * nrows), squeeze=False, **kw)
        try:
            yield fig, axes
        finally:
            plt.close(fig)


def _png(fig: "Figure") -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _finite(series: Series) -> dict[int, float]:
    return {s: v for s, v in sorted(series.items()) if v is not None and not math.isnan(v)}


def gapped(points: Series) -> tuple[list[int], list[float]]:
    """Every step from the first to the last, NaN where nothing was recorded: matplotlib breaks
    the line there instead of bridging the gap as if the metric had been measured."""
    if not points:
        return [], []
    xs = list(range(min(points), max(points) + 1))
    return xs, [points.get(x, math.nan) for x in xs]


def _steps_axis(ax: "Axes") -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")


def _line(ax: "Axes", series: Series, label: str, color: str | None = None, **kw: Any) -> bool:
    points = _finite(series)
    if not points:
        return False
    ax.plot(list(points), list(points.values()), label=label, color=color, **kw)
    return True


def _from(summaries: Mapping[int, EvalSummary],
          get: Callable[[EvalSummary], float | None]) -> dict[int, float]:
    out: dict[int, float] = {}
    for step, s in summaries.items():
        value = get(s)
        if value is not None:
            out[step] = float(value)
    return out


# -- figures -----------------------------------------------------------------------------------


def reward_curve(train: Mapping[int, EvalSummary], evals: Mapping[int, EvalSummary]) -> bytes | None:
    """Mean train reward per step (band: ±1 std over the step's rollouts) and mean eval reward."""
    mean = _from(train, lambda s: s.reward.mean)
    ev = _from(evals, lambda s: s.reward.mean)
    if not mean and not ev:
        return None
    with _figure() as (fig, axes):
        ax = axes[0][0]
        if mean:
            # The band stays inside the rewards actually seen: mean ± std can leave [min, max].
            xs = list(mean)
            lo = [max(mean[x] - (train[x].reward.std or 0.0), train[x].reward.min or mean[x]) for x in xs]
            hi = [min(mean[x] + (train[x].reward.std or 0.0), train[x].reward.max or mean[x]) for x in xs]
            ax.fill_between(xs, lo, hi, color=TRAIN, alpha=0.12, linewidth=0)
            _line(ax, mean, "train (mean ± std over the step's rollouts)", TRAIN, marker=".")
        if ev:
            _line(ax, ev, "eval (validation set)", EVAL, marker="o", linewidth=2)
            for x, y in ev.items():
                ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 8),
                            ha="center", fontsize=8, color=EVAL,
                            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85})
        ax.set_title("Reward")
        ax.set_ylabel("mean reward")
        _steps_axis(ax)
        ax.legend(loc="best")
        return _png(fig)


def sub_score_curves(train: Mapping[int, EvalSummary], evals: Mapping[int, EvalSummary]) -> bytes | None:
    """Each sub-grader's mean score over steps: train solid, eval dashed with markers."""
    names = sorted({n for s in [*train.values(), *evals.values()] for n in s.reward.sub_score_means})
    if not names:
        return None
    plt = _plt()
    colors = plt.get_cmap("tab10")
    with _figure() as (fig, axes):
        ax = axes[0][0]
        for i, name in enumerate(names):
            color = colors(i % 10)
            # _from calls the lambdas at once, inside this iteration
            _line(ax, _from(train, lambda s: s.reward.sub_score_means.get(name)), f"{name} (train)",  # noqa: B023
                  color, alpha=0.8)
            _line(ax, _from(evals, lambda s: s.reward.sub_score_means.get(name)), f"{name} (eval)",  # noqa: B023
                  color, linestyle="--", marker="o")
        ax.set_title("Sub-grader scores")
        ax.set_ylabel("mean sub-score")
        _steps_axis(ax)
        ax.legend(loc="best", ncol=2)
        return _png(fig)


def _bucket_key(label: str) -> tuple[bool, int]:
    return label.startswith(">"), int(label.lstrip(">="))


def tool_call_histograms(panels: Sequence[tuple[str, EvalSummary]]) -> bytes | None:
    """Tool calls per rollout, one panel per (title, summary), side by side on shared axes.

    Bars are the share of the panel's rollouts so panels with different sizes compare; each
    bar is labelled with its rollout count.
    """
    panels = [(t, s) for t, s in panels if s.tool_calls.histogram]
    if not panels:
        return None
    buckets = sorted({b for _, s in panels for b in s.tool_calls.histogram}, key=_bucket_key)
    with _figure(ncols=len(panels), width=4.6 * len(panels) + 0.4, height=3.4,
                 sharey=True) as (fig, axes):
        for ax, (title, s), color in zip(axes[0], panels, [BASE, EVAL, TRAIN]):
            counts = [s.tool_calls.histogram.get(b, 0) for b in buckets]
            total = sum(counts) or 1
            bars = ax.bar(buckets, [c / total for c in counts], color=color, alpha=0.85)
            for bar, c in zip(bars, counts):
                if c:
                    ax.annotate(str(c), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                textcoords="offset points", xytext=(0, 2), ha="center", fontsize=7)
            t = s.tool_calls
            ax.set_title(f"{title}\nmean {t.mean:.2f}  p95 {t.p95:.1f}  max {t.max}"
                         if t.mean is not None and t.p95 is not None else title)
            ax.set_xlabel("tool calls in the rollout")
        axes[0][0].set_ylabel("share of rollouts")
        axes[0][0].yaxis.set_major_formatter(_percent())
        return _png(fig)


def _percent() -> Any:
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(1.0, decimals=0)


def tool_usage(train: Mapping[int, EvalSummary]) -> bytes | None:
    """Calls per rollout of each tool over training steps."""
    names = sorted({n for s in train.values() for n in s.tools})
    if not names:
        return None
    with _figure() as (fig, axes):
        ax = axes[0][0]
        for name in names:
            series = {step: (s.tools[name].calls if name in s.tools else 0) / behaviour
                      for step, s in train.items() if (behaviour := s.n_rollouts - s.n_infra_failed)}
            _line(ax, series, name, marker=".")
        total = _from(train, lambda s: s.tool_calls.mean)
        if len(names) > 1:
            _line(ax, total, "all tools", "black", linestyle=":", linewidth=1)
        ax.set_ylim(bottom=0)
        ax.set_title("Tool calls per rollout, by tool (train)")
        ax.set_ylabel("calls per rollout")
        _steps_axis(ax)
        ax.legend(loc="best", ncol=2)
        return _png(fig)


def tool_health(overall: EvalSummary, train: Mapping[int, EvalSummary]) -> bytes | None:
    """Left: each tool's error rate over training steps (or overall, without steps).
    Right: each tool's mean and p95 latency over the whole run."""
    if not overall.tools:
        return None
    names = list(overall.tools)
    with _figure(ncols=2, width=10.0, height=3.2) as (fig, axes):
        left, right = axes[0]
        per_step = {n: {step: s.tools[n].error_rate for step, s in train.items() if n in s.tools}
                    for n in names}
        if any(len(v) > 1 for v in per_step.values()):
            for name in names:
                _line(left, per_step[name], name, marker=".")
            left.set_title("Tool error rate (train)")
            _steps_axis(left)
            left.legend(loc="best")
        else:
            left.bar(names, [overall.tools[n].error_rate for n in names], color="#d62728", alpha=0.8)
            left.set_title("Tool error rate")
        left.set_ylabel("share of calls with status != ok")
        left.yaxis.set_major_formatter(_percent())
        left.set_ylim(bottom=0)
        xs = range(len(names))
        for offset, label, color, get in [(-0.2, "mean", TRAIN, lambda t: t.mean_latency_s),
                                          (0.2, "p95", BASE, lambda t: t.p95_latency_s)]:
            ms = [get(overall.tools[n]) * 1000 for n in names]
            bars = right.bar([x + offset for x in xs], ms, width=0.4, label=label, color=color)
            right.bar_label(bars, fmt="%.1f", fontsize=7, padding=2)
        right.set_xticks(list(xs), names)
        right.set_xlim(-0.8, max(len(names), 2) - 0.2)
        right.set_ylabel("latency per call (ms)")
        right.set_title("Tool latency (all rollouts)")
        right.legend(loc="best")
        return _png(fig)


def token_curves(train: Mapping[int, EvalSummary], evals: Mapping[int, EvalSummary]) -> bytes | None:
    """Tokens per rollout over steps: sampled (what trains) and the rest (prompt, tool results)."""
    def context(s: EvalSummary) -> float | None:
        t = s.tokens
        return None if t.mean_tokens is None or t.mean_sampled_tokens is None \
            else t.mean_tokens - t.mean_sampled_tokens

    def sampled(s: EvalSummary) -> float | None:
        return s.tokens.mean_sampled_tokens

    if not _from(train, sampled) and not _from(evals, sampled):
        return None
    with _figure(ncols=2, width=10.0, height=3.0) as (fig, axes):
        for ax, get, title in [(axes[0][0], sampled, "Sampled tokens per rollout"),
                               (axes[0][1], context, "Prompt + tool-result tokens per rollout")]:
            _line(ax, _from(train, get), "train", TRAIN, marker=".")
            _line(ax, _from(evals, get), "eval", EVAL, marker="o", linestyle="--")
            ax.set_title(title)
            ax.set_ylabel("tokens (mean)")
            _steps_axis(ax)
            ax.legend(loc="best")
        return _png(fig)


def metric_grid(series: Mapping[str, Series], notes: Mapping[str, str] | None = None,
                ncols: int = 3) -> bytes | None:
    """Small multiples, one panel per metric (title = name); a note is drawn under a title."""
    panels = {name: _finite(s) for name, s in series.items()}
    panels = {name: s for name, s in panels.items() if s}
    if not panels:
        return None
    notes = notes or {}
    nrows = math.ceil(len(panels) / ncols)
    with _figure(ncols=ncols, nrows=nrows, width=10.0, height=2.3) as (fig, axes):
        flat = [ax for row in axes for ax in row]
        first = min(min(p) for p in panels.values())
        last = max(max(p) for p in panels.values())
        for ax, (name, points) in zip(flat, panels.items()):
            ax.plot(*gapped(points), marker=".", color=TRAIN)
            ax.set_xlim(first - 0.5, last + 0.5)
            ax.ticklabel_format(axis="y", useOffset=False)  # "1e-6+1.0789" reads worse than 1.0789
            ax.set_title(name if name not in notes else f"{name}\n{notes[name]}", fontsize=9)
            _steps_axis(ax)
            ax.xaxis.label.set_visible(False)
        for ax in flat[len(panels):]:
            ax.set_visible(False)
        return _png(fig)
