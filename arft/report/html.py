"""`arft report`: one self-contained HTML page that shows what a run did.

``render_html(report)`` turns a ``Report`` (``arft.report.report_data.collect``) into HTML with
the figures of ``arft.report.plots`` embedded as base64 PNGs, so the file can be mailed or
attached to a ticket as is. ``write_report`` does both.

Where a number was not recorded the page says so ("not recorded", with the reason): a missing
metric is never drawn as 0 (DESIGN rule 4).
"""

from __future__ import annotations

import base64
import math
from datetime import datetime
from html import escape
from pathlib import Path

from arft.metrics.summary import EvalSummary
from arft.report import plots
from arft.report.report_data import (DEFAULT_VIEWER_URL, OTHER_STEP_METRICS, UPDATE_METRICS, Report,
                                     RolloutRow, collect)
from arft.report.summary import percent as _pct
from arft.tracing.run_dir import RunDir


# -- rendering -----------------------------------------------------------------------------------

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       max-width: 1120px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 2px; } h2 { font-size: 17px; margin: 28px 0 8px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; } h3 { font-size: 14px; margin: 14px 0 6px; }
.sub { color: #666; margin: 0 0 8px; } img { max-width: 100%; display: block; margin: 6px 0; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; }
th, td { padding: 3px 10px 3px 0; text-align: left; vertical-align: top; }
th { color: #555; font-weight: 600; border-bottom: 1px solid #ccc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.kv th { border: none; padding-right: 18px; }
tr + tr td { border-top: 1px solid #f0f0f0; }
.na { color: #8a5a00; background: #fff7e0; border-left: 3px solid #e0b000; padding: 4px 8px; }
.note { color: #555; font-size: 13px; } .up { color: #177a2a; } .down { color: #b02020; }
code { background: #f4f4f4; padding: 1px 4px; border-radius: 3px; }
td.answer { color: #555; max-width: 420px; } a { color: #1a5fb4; }
"""


def _f(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _img(png: bytes | None, alt: str, missing: str) -> str:
    if png is None:
        return f'<p class="na">{escape(missing)}</p>'
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{escape(alt, quote=True)}" src="data:image/png;base64,{data}">'


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    """An HTML table; cells are HTML already (escape text before passing it)."""
    numeric = numeric or set()
    cls = [' class="num"' if i in numeric else "" for i in range(len(headers))]
    head = "".join(f"<th{c}>{escape(h)}</th>" for h, c in zip(headers, cls))
    body = "".join("<tr>" + "".join(f"<td{c}>{v}</td>" for v, c in zip(row, cls)) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{escape(title)}</h2>{body}</section>'


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded (the run has not finished)"
    minutes, s = divmod(round(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m} min" if hours else (f"{m} min {s} s" if m else f"{s} s")


def _when(iso: str | None) -> str:
    if iso is None:
        return "n/a"
    t = datetime.fromisoformat(iso)
    return escape(t.strftime("%Y-%m-%d %H:%M:%S") + (f" {t.tzname()}" if t.tzname() else ""))


def _change(a: float | None, b: float | None, spec: str = ".3f") -> str:
    if a is None or b is None:
        return f"{_f(a, spec)} → {_f(b, spec)}"
    cls = "up" if b > a else "down" if b < a else ""
    return f'{_f(a, spec)} → <b>{_f(b, spec)}</b> <span class="{cls}">({b - a:+{spec}})</span>'


def _summary(rep: Report) -> str:
    rows: list[tuple[str, str]] = [("job", escape(rep.job_name)), ("model", escape(rep.model)),
                                   ("run", f"{escape(rep.kind)} — {escape(rep.status)}"),
                                   ("started", _when(rep.started_at)),
                                   ("wall time", _duration(rep.wall_time_s))]
    if rep.kind == "train":
        total = "?" if rep.steps_total is None else str(rep.steps_total)
        rows.insert(2, ("steps", f"{rep.steps_done if rep.steps_done is not None else 0} / {total}"))
        rows.append(("train rollouts", str(sum(s.n_rollouts for s in rep.train.values()))))
    if rep.evals:
        first, last = rep.evals[min(rep.evals)], rep.evals[max(rep.evals)]
        label = "baseline → final eval" if rep.kind == "train" and len(rep.evals) > 1 else "eval"
        if first is last:
            rows += [("eval reward", f"<b>{_f(last.reward.mean)}</b> ± {_f(last.reward.std)} "
                                     f"({last.reward.n_graded} graded)"),
                     ("pass rate", _f(last.pass_rate)),
                     ("tool calls per rollout", _f(last.tool_calls.mean, ".2f"))]
        else:
            rows += [(f"{label} reward", _change(first.reward.mean, last.reward.mean)),
                     (f"{label} pass rate", _change(first.pass_rate, last.pass_rate)),
                     (f"{label} tool calls per rollout",
                      _change(first.tool_calls.mean, last.tool_calls.mean, ".2f")),
                     (f"{label} parallel-call turns",
                      _change(first.tool_calls.parallel_turn_share,
                              last.tool_calls.parallel_turn_share, ".2f")),
                     (f"{label} critical-path tool latency (s)",
                      _change(first.tool_calls.critical_path_mean_s,
                              last.tool_calls.critical_path_mean_s, ".2f"))]
    else:
        rows.append(("eval reward", '<span class="na">not recorded: the run has no evaluation '
                                    "(no validation set)</span>"))
    o = rep.overall
    rows.append(("failures", f"{o.n_infra_failed} infra-failed, {o.reward.n_grader_errors} grader "
                             f"errors, {o.parse_errors_total} parse errors over {o.n_rollouts} rollouts"))
    table = "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in rows)
    notes = "".join(f'<p class="note">Note: {escape(n)}.</p>' for n in rep.notes)
    return _section("summary", "Summary", f'<table class="kv">{table}</table>{notes}')


def _evals_table(rep: Report) -> str:
    if not rep.evals:
        return _section("evaluations", "Evaluations",
                        '<p class="na">not recorded: the run made no evaluation</p>')
    subs = sorted({n for s in rep.evals.values() for n in s.reward.sub_score_means})
    headers = ["eval", "rollouts", "reward", "± std", "pass rate", "pass@1", "calls mean", "calls p95",
               "calls max", "parallel turns", "tool rounds", "critical path s", "parse errors",
               "parse error rate", "constrained calls", "sampled tokens", "infra failed", *subs]
    rows = []
    for step, s in rep.evals.items():
        t = s.tool_calls
        rows.append([escape(rep.eval_labels.get(step, str(step))), str(s.n_rollouts), _f(s.reward.mean),
                     _f(s.reward.std), _f(s.pass_rate), _f(s.pass_at_k.get(1)), _f(t.mean, ".2f"),
                     _f(t.p95, ".1f"), str(t.max if t.max is not None else "n/a"),
                     _pct(t.parallel_turn_share), _f(t.rounds_mean, ".2f"),
                     _f(t.critical_path_mean_s, ".2f"), str(s.parse_errors_total),
                     _pct(s.parse_error_rate), _pct(s.constrained_call_share),
                     _f(s.tokens.mean_sampled_tokens, ".0f"), str(s.n_infra_failed),
                     *[_f(s.reward.sub_score_means.get(n)) for n in subs]])
    return _section("evaluations", "Evaluations",
                    _table(headers, rows, numeric=set(range(1, len(headers)))))


def _tool_table(s: EvalSummary) -> str:
    rows = [[escape(name), str(t.calls), str(t.errors), f"{t.error_rate:.1%}",
             escape(", ".join(f"{k} {v}" for k, v in t.errors_by_status.items()) or "—"),
             f"{t.mean_latency_s * 1000:.1f}", f"{t.p95_latency_s * 1000:.1f}"]
            for name, t in s.tools.items()]
    return _table(["tool", "calls", "errors", "error rate", "errors by status", "mean ms", "p95 ms"],
                  rows, numeric={1, 2, 3, 5, 6})


def _rollout_table(rep: Report, rows: list[RolloutRow], other: list[RolloutRow]) -> str:
    if not rows:
        why = f"every graded rollout scored {_f(other[0].reward)}" if other else "no rollout was graded"
        return f'<p class="na">none: {why}</p>'
    body = []
    for r in rows:
        href = escape(f"{rep.viewer_url}/rollouts/{r.trace_id}", quote=True)
        body.append([f'<a href="{href}"><code>{escape(r.trace_id)}</code></a>', escape(r.task_id),
                     "—" if r.step is None else str(r.step), _f(r.reward), str(r.calls),
                     f"{escape(r.status)} / {escape(r.finish_reason)}",
                     f'<span class="answer">{escape(r.answer) or "<i>(empty)</i>"}</span>'])
    return _table(["trace_id", "task", "step", "reward", "calls", "status / finish", "final answer"],
                  body, numeric={2, 3, 4})


def _extremes_section(rep: Report) -> str:
    parts = [f'<p class="note">Each trace_id opens the rollout in the trajectory viewer '
             f"(<code>arft view {escape(rep.run_dir)}</code> serves it at "
             f"<code>{escape(rep.viewer_url)}</code>).</p>"]
    for source, (best, worst) in rep.extremes.items():
        parts.append(f"<h3>Best — {escape(source)}</h3>{_rollout_table(rep, best, worst)}")
        parts.append(f"<h3>Worst — {escape(source)}</h3>{_rollout_table(rep, worst, best)}")
    return _section("rollouts", "Best and worst rollouts", "".join(parts))


def _histogram_panels(rep: Report) -> list[tuple[str, EvalSummary]]:
    """Baseline vs latest eval; without evals, the first vs the last train step."""
    source = rep.evals or rep.train
    if not source:
        return []
    first, last = min(source), max(source)
    if rep.kind == "eval":
        titles = {s: rep.eval_labels.get(s, str(s)) for s in (first, last)}
    elif rep.evals:
        titles = {first: f"baseline (step {first} eval)", last: f"latest eval (step {last})"}
    else:
        titles = {first: f"first train step ({first})", last: f"latest train step ({last})"}
    return [(titles[s], source[s]) for s in sorted({first, last})]


def render_html(rep: Report) -> str:
    """The report page: every figure embedded, no external files."""
    no_steps = ("not recorded: an evaluation run has no training steps (its numbers are in "
                "Summary and Evaluations)" if rep.kind == "eval"
                else "not recorded: no train rollout has a known step yet")
    has_subs = any(s.reward.sub_score_means for s in [*rep.train.values(), *rep.evals.values()])
    steps = rep.kind == "train"
    sections = [
        _summary(rep),
        _monitors_section(rep),
        _section("reward", "Reward", _img(plots.reward_curve(rep.train, rep.evals) if steps else None,
                                          "Reward over steps", no_steps)),
        _section("sub-scores", "Sub-grader scores", _img(
            plots.sub_score_curves(rep.train, rep.evals) if steps else None, "Sub-grader scores",
            no_steps if has_subs else "not recorded: the grader returned no sub-scores")),
        _evals_table(rep),
        _section("tool-calls", "Tool calls per rollout", _img(
            plots.tool_call_histograms(_histogram_panels(rep)), "Tool calls per rollout",
            "not recorded: no rollouts")),
        _section("tool-usage", "Tool usage over steps", _img(
            plots.tool_usage(rep.train), "Tool calls per rollout by tool",
            no_steps if not rep.train else "not recorded: no tool was called in training")),
        _section("tool-health", "Tool latency and errors", _img(
            plots.tool_health(rep.overall, rep.train), "Tool latency and errors",
            "not recorded: no tool was called") + (_tool_table(rep.overall) if rep.overall.tools else "")),
        _section("tokens", "Tokens per rollout", _img(
            plots.token_curves(rep.train, rep.evals) if steps else None, "Tokens per rollout",
            no_steps if not steps else "not recorded: the engine exposed no tokens")),
        _update_section(rep, no_steps),
        _extremes_section(rep),
    ]
    title = f"arft report — {rep.job_name}"
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>"
            f'<p class="sub"><code>{escape(rep.run_dir)}</code></p>{"".join(sections)}</body></html>\n')


def _monitors_section(rep: Report) -> str:
    """The live monitors' alarms (docs/monitors.md): an audit of the run, not a verdict on it."""
    if rep.kind != "train":
        return ""
    if not rep.monitors_on and not rep.alarms:
        return _section("monitors", "Monitor alarms", '<p class="na">not recorded: the run had the live monitors '
                                                      "off (monitors.enabled: false)</p>")
    framing = ('<p class="note">The monitors audit the run by rules on its own baseline (docs/monitors.md); on '
               "small batches they can miss a problem or flag a healthy change. Read an alarm as a reason to "
               "look at the curves and rollouts of that step.</p>")
    if not rep.alarms:
        return _section("monitors", "Monitor alarms", "<p>No alarm.</p>" + framing)
    rows = [[str(a.step), f"<code>{escape(a.monitor)}</code>", escape(a.message)] for a in rep.alarms]
    return _section("monitors", "Monitor alarms", _table(["step", "monitor", "what it saw"], rows, {0}) + framing)


def _update_section(rep: Report, no_steps: str) -> str:
    if rep.kind != "train":
        return _section("update", "Update metrics", f'<p class="na">{escape(no_steps)}</p>')
    described = {**UPDATE_METRICS, **OTHER_STEP_METRICS}
    # A metric with one value at every step is a line, not a chart: say it in words.
    constant = {n: next(iter(v.values())) for n, v in rep.step_metrics.items()
                if len(v) > 1 and len(set(v.values())) == 1}
    varying = {n: v for n, v in rep.step_metrics.items() if n not in constant}
    png = plots.metric_grid(varying, {n: d for n, d in described.items() if n in varying})
    body = _img(png, "Update metrics", "not recorded: the run has no update metrics")
    if constant:
        items = ", ".join(f"<code>{escape(n)}</code> = {v:.4g}" for n, v in constant.items())
        body += f'<p class="note">The same at every step: {items}.</p>'
    skipped = sorted(s for s, v in rep.step_metrics.get("update/tokens", {}).items() if v == 0)
    if skipped:
        body += (f'<p class="note">No update at step{"s" if len(skipped) > 1 else ""} '
                 f'{", ".join(map(str, skipped))}: no rollout had an advantage (every group had equal '
                 "rewards or failed), so the other update metrics have no point there.</p>")
    if rep.not_recorded:
        items = "".join(f"<li><code>{escape(n)}</code> — {escape(why)}</li>"
                        for n, why in rep.not_recorded.items())
        body += f'<div class="na">Not recorded:<ul>{items}</ul></div>'
    return _section("update", "Update metrics", body)


def write_report(run_dir: Path, out: Path | None = None, viewer_url: str = DEFAULT_VIEWER_URL) -> Path:
    """Collect ``run_dir`` and write its report (default ``RUN_DIR/report.html``); returns the path."""
    path = out or RunDir(run_dir).report
    page = render_html(collect(run_dir, viewer_url))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
