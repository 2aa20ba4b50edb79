"""The run viewer: a local web app (``arft view RUN_DIR``) to browse and read a run's rollouts.

Pages: ``/`` lists rollouts with filters (query parameters, so links can point at filtered
views) and paging; ``/rollouts/{trace_id}`` shows one rollout: header, the conversation with
every tool call's arguments, status, latency and output, and the grade breakdown. The same
data is JSON at ``/api/rollouts`` and ``/api/rollouts/{trace_id}`` for scripts.

HTML is rendered on the server. Everything that comes from a rollout (model output, tool
output, task ids, grader messages) is untrusted and goes through ``html.escape``; the only
script is a few lines that drop blank fields from the filter form's URL.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse

from arft.records import Message, Rollout, ToolCallRecord
from arft.report.trajectory import truncate
from arft.report.viewer_data import (FLAG_FILTERS, PAGE_SIZE, SPLITS, STATUSES, FilterError,
                                     Choices, Filters, ListRow, Page, RunData, RunSummary)

MAX_TEXT_CHARS = 20_000
"""Longer message contents and tool outputs are cut, with a marker saying how much."""

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1f2328;
 background:#f6f8fa}
header.top{background:#24292f;color:#fff;padding:10px 24px;display:flex;gap:16px;
 align-items:baseline}
header.top a{color:#fff;text-decoration:none;font-weight:600}
header.top .dir{color:#9da5ae;font-family:ui-monospace,monospace;font-size:12px}
main{padding:16px 24px;max-width:1280px}
a{color:#0969da}
h1{font-size:20px;margin:4px 0 12px}
h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;border:1px solid #d0d7de}
th,td{padding:5px 9px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600;font-size:12px;color:#57606a}
table.list tr:hover td{background:#f3f8ff}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.mono,code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0}
.badge{display:inline-block;padding:0 7px;border-radius:10px;font-size:12px;
 background:#eaeef2;margin:1px 2px 1px 0;white-space:nowrap}
.bad{background:#ffebe9;color:#a40e26}.good{background:#dafbe1;color:#116329}
.warn{background:#fff8c5;color:#7d4e00}.muted{color:#6e7781}
form.filters{background:#fff;border:1px solid #d0d7de;padding:10px 12px;display:flex;
 flex-wrap:wrap;gap:10px 16px;align-items:end;margin-bottom:12px}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:#57606a}
form.filters input,form.filters select{font:inherit;padding:3px 5px;min-width:80px}
form.filters input.short{width:70px;min-width:0}
.runs{margin:0 0 12px;display:flex;flex-wrap:wrap;gap:6px}
.runs a{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:3px 9px;
 text-decoration:none;font-size:13px}
.pager{margin:10px 0;display:flex;gap:12px;align-items:center}
.kv th{width:130px;background:#fff;color:#57606a}
.msg{background:#fff;border:1px solid #d0d7de;border-left:4px solid #8c959f;margin:8px 0;
 padding:6px 12px}
.msg .role{font-weight:600;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.role-system,.role-developer{border-left-color:#8250df}.role-user{border-left-color:#1a7f37}
.role-assistant{border-left-color:#0969da}.role-tool{border-left-color:#bf8700}
.call{border-top:1px dashed #d0d7de;margin-top:6px;padding-top:4px}
.divider{margin:14px 0 6px;padding:2px 0;border-bottom:2px solid #0969da;color:#0969da;
 font-size:12px;font-weight:600}
.grid{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:16px}
"""

_STRIP_BLANK_FIELDS = """<script>
document.querySelector('form.filters').addEventListener('submit', e => {
  for (const el of e.target.elements) if (el.name && !el.value) el.disabled = true;
});</script>"""


def _page(title: str, body: str, run_dir: Path) -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<title>{escape(title)} — arft view</title><style>{_CSS}</style></head><body>"
            f"<header class=top><a href='/'>arft view</a><span class=dir>{escape(str(run_dir))}"
            f"</span></header><main>{body}</main></body></html>")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def _badge(text: str, kind: str = "") -> str:
    return f"<span class='badge {kind}'>{escape(text)}</span>"


def _status_badge(status: str) -> str:
    return _badge(status, "good" if status == "ok" else "bad")


def _rollout_href(trace_id: str) -> str:
    return escape(f"/rollouts/{quote(trace_id, safe='')}")


def _where(row: ListRow) -> tuple[str, str]:
    """The split and step cells of a row: "train"/"eval" and the step ("—" when unknown)."""
    return row["split"], "—" if row["step"] is None else str(row["step"])


# -- list page ---------------------------------------------------------------------------------

def _select(name: str, current: str | None, options: list[tuple[str, str]]) -> str:
    opts = "".join(f"<option value='{escape(v)}'{' selected' if v == (current or '') else ''}>"
                   f"{escape(label)}</option>" for v, label in options)
    return f"<select name={name}>{opts}</select>"


def _field(label: str, control: str) -> str:
    return f"<label>{escape(label)}{control}</label>"


def _input(name: str, value: object, placeholder: str = "", cls: str = "short") -> str:
    shown = "" if value is None else escape(str(value))
    return (f"<input name={name} class={cls} value='{shown}' "
            f"placeholder='{escape(placeholder)}'>")


def _filter_form(f: Filters, choices: Choices) -> str:
    any_ = [("", "any")]
    flags = [(k, v) for k, v in FLAG_FILTERS.items()] + [(x, f"flag: {x}") for x in choices.flags]
    parts = [
        _field("split", _select("split", f.split, [(s, s) for s in SPLITS])),
        _field("step", _select("step", None if f.step is None else str(f.step),
                               any_ + [(str(s), str(s)) for s in choices.steps])),
        _field("task", _input("task", f.task, "exact task id", "")),
        _field("reward ≥", _input("min_reward", f.min_reward, "min")),
        _field("reward ≤", _input("max_reward", f.max_reward, "max")),
        _field("status", _select("status", f.status, any_ + [(s, s) for s in STATUSES])),
        _field("flag", _select("flag", f.flag, any_ + flags)),
        _field("called tool", _select("tool", f.tool, any_ + [(t, t) for t in choices.tools])),
        _field("sort", _select("sort", f.sort, [("", "as recorded"), ("reward", "reward ↑"),
                                                 ("-reward", "reward ↓")])),
    ]
    if f.run is not None:
        parts.insert(0, _field("run", _input("run", f.run, "", "")))
    if f.per_page != PAGE_SIZE:
        parts.append(f"<input type=hidden name=per_page value={f.per_page}>")
    return (f"<form class=filters method=get action='/'>{''.join(parts)}"
            "<button type=submit>Filter</button> <a href='/'>clear</a></form>")


def _runs_bar(runs: list[RunSummary]) -> str:
    links = []
    for r in runs:
        what = "training" if r["split"] == "train" else "eval" if r["step"] is None \
            else f"eval of step {r['step']}"
        label = f" · {what} · {r['n']} rollout{'s' * (r['n'] != 1)} · mean reward {_fmt(r['mean_reward'])}"
        links.append(f"<a href='/?{escape(Filters(run=r['run_id']).query_string())}'><b>"
                     f"{escape(r['run_id'] or '(no run)')}</b>{escape(label)}</a>")
    return f"<div class=runs>{''.join(links)}</div>"


def _flag_badges(row: ListRow) -> str:
    out = [_badge(flag, "bad") for flag in row["flags"]]
    if row["grade_error"] is not None:
        out.append(_badge("grader error", "warn"))
    elif row["score"] is None and row["status"] != "infra_failed":
        out.append(_badge("ungraded", "warn"))
    return "".join(out)


def _list_row(row: ListRow) -> str:
    split, step = _where(row)
    tools = escape(", ".join(row["tools"]))
    cells = [
        f"<td class=mono><a href='{_rollout_href(row['trace_id'])}'>"
        f"{escape(row['trace_id'])}</a></td>",
        f"<td>{escape(row['task_id'])}</td><td>{escape(split)}</td><td class=num>{step}</td>",
        f"<td class=num>{row['sample_index']}</td><td class=num>{_fmt(row['reward'])}</td>",
        f"<td>{_status_badge(row['status'])}</td><td>{escape(row['finish_reason'])}</td>",
        f"<td class=num title='{tools}'>{row['n_tool_calls']}</td><td class=muted>{tools}</td>",
        f"<td class=num>{row['parse_errors'] or ''}</td><td>{_flag_badges(row)}</td>",
    ]
    return f"<tr>{''.join(cells)}</tr>"


def _pager(f: Filters, page: Page) -> str:
    n = page.n_pages(f.per_page)
    prev = (f"<a href='/?{escape(f.query_string(page=f.page - 1))}'>← previous</a>"
            if f.page > 1 else "")
    nxt = (f"<a href='/?{escape(f.query_string(page=f.page + 1))}'>next →</a>"
           if f.page < n else "")
    first = (f.page - 1) * f.per_page
    shown = f"{first + 1}–{first + len(page.rows)}" if page.rows else "0"
    return (f"<div class=pager><span><b>{page.total}</b> rollouts match · showing {shown} · "
            f"page {f.page} of {n}</span>{prev}{nxt}</div>")


def list_page(data: RunData, f: Filters) -> str:
    """The rollout list: the runs, the filter form, one page of matching rows, paging links."""
    page = data.list(f)
    head = ("<tr><th>trace_id</th><th>task</th><th>split</th><th class=num>step</th>"
            "<th class=num>sample</th><th class=num>reward</th><th>status</th><th>finish</th>"
            "<th class=num>tool calls</th><th>tools</th><th class=num>parse errors</th>"
            "<th>flags</th></tr>")
    rows = "".join(_list_row(r) for r in page.rows)
    empty = "" if page.rows else "<p class=muted>No rollout matches these filters.</p>" \
        if page.total == 0 else "<p class=muted>This page is past the last one.</p>"
    body = (f"<h1>Rollouts</h1>{_runs_bar(data.runs())}{_filter_form(f, data.choices())}"
            f"{_pager(f, page)}<table class=list id=rollouts>{head}{rows}</table>{empty}"
            f"{_pager(f, page) if page.rows else ''}{_STRIP_BLANK_FIELDS}")
    return _page("Rollouts", body, data.run_dir)


# -- rollout page ------------------------------------------------------------------------------

def _kv(rows: list[tuple[str, str]]) -> str:
    """A two-column table; values are HTML the caller has already escaped."""
    return ("<table class=kv>" + "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>"
                                         for k, v in rows) + "</table>")


def _header(r: Rollout, row: ListRow) -> str:
    split, step = _where(row)
    t = r.timings
    rows = [
        ("trace_id", f"<span class=mono>{escape(r.trace_id)}</span>"),
        ("task", f"{escape(r.task_id)} · sample {r.sample_index} · "
                 f"<a href='/?{escape(Filters(task=r.task_id).query_string())}'>"
                 "all rollouts of this task</a>"),
        ("run", f"<a href='/?{escape(Filters(run=r.run_id).query_string())}'>"
                f"{escape(r.run_id or '(no run)')}</a> · {escape(split)} · step {step}"),
        ("reward", f"<b>{_fmt(row['reward'], 4)}</b>"),
        ("status", f"{_status_badge(r.status)} finish reason <b>{escape(r.finish_reason)}</b>"),
        ("turns", f"{r.n_turns} · tool calls {len(r.tool_calls)} · parse errors {r.parse_errors}"),
        ("timings (s)", f"generate {t.generate_s:.2f} · tools {t.tools_s:.2f} · "
                        f"grade {t.grade_s:.2f} · total {t.total_s:.2f}"),
        ("tokens", f"{len(r.token_ids)} total · {r.n_sampled_tokens} sampled · "
                   f"prompt {r.prompt_len}"),
    ]
    if r.error:
        rows.insert(5, ("error", f"<pre class=bad>{escape(r.error)}</pre>"))
    return _kv(rows)


def _grade(r: Rollout) -> str:
    s = r.score
    if s is None:
        return "<p class=muted>Not graded.</p>"
    passed = "—" if s.passed is None else _badge(str(s.passed).lower(), "good" if s.passed else "bad")
    subs = "".join(f"<tr><td>{escape(k)}</td><td class=num>{v:.4g}</td></tr>"
                   for k, v in s.sub_scores.items())
    rows = [
        ("score", f"<b>{s.score:.4g}</b>" + (" <span class=muted>(not a real grade: the grader "
                                             "failed)</span>" if s.error else "")),
        ("passed", passed),
        ("grader", escape(s.grader) or "—"),
        ("latency", f"{s.latency_s:.3f} s"),
        ("flags", "".join(_badge(x, "bad") for x in s.flags) or "none"),
        ("error", f"<pre class=bad>{escape(s.error)}</pre>" if s.error else "none"),
        ("sub_scores", f"<table id=sub-scores>{subs}</table>" if subs else "none"),
    ]
    return _kv(rows)


def _pretty_json(arguments: str) -> str:
    try:
        return escape(json.dumps(json.loads(arguments), indent=2, ensure_ascii=False))
    except ValueError:
        return escape(arguments) + " <span class='badge warn'>not valid JSON</span>"


def _call_result(c: ToolCallRecord) -> str:
    """A tool call's outcome: name, status, latency, HTTP status, turn, error, then its output."""
    http = f" · HTTP {c.http_status}" if c.http_status is not None else ""
    error = f"<pre class=bad>error: {escape(c.error)}</pre>" if c.error else ""
    return (f"<div class=call><b>{escape(c.name or '(unparsed call)')}</b> "
            f"{_status_badge(c.status)} <span class=muted>{c.latency_s:.3f} s{http} · turn "
            f"{c.turn} · <span class=mono>{escape(c.call_id)}</span></span>{error}"
            f"<pre class=output>{escape(truncate(c.output, MAX_TEXT_CHARS))}</pre></div>")


def _message(i: int, m: Message, calls: dict[str, ToolCallRecord], shown: set[str]) -> str:
    label = m.role if m.name is None else f"{m.role} ({m.name})"
    parts = [f"<div class=role>{i} · {escape(label)}</div>"]
    if m.role == "tool" and m.tool_call_id in calls:
        shown.add(m.tool_call_id)
        parts.append(_call_result(calls[m.tool_call_id]))
    elif m.content:
        parts.append(f"<pre class=content>{escape(truncate(m.content, MAX_TEXT_CHARS))}</pre>")
    for tc in m.tool_calls or ():
        parts.append(f"<div class='call tool-call'>→ <b>{escape(tc.function.name)}</b> "
                     f"<span class='muted mono'>{escape(tc.id)}</span>"
                     f"<pre class=arguments>{_pretty_json(tc.function.arguments)}</pre></div>")
    if len(parts) == 1:
        parts.append("<pre class=muted>(empty)</pre>")
    return f"<div class='msg role-{escape(m.role)}'>{''.join(parts)}</div>"


def _conversation(r: Rollout) -> str:
    calls = {c.call_id: c for c in r.tool_calls}
    shown: set[str] = set()
    msgs = [_message(i, m, calls, shown) for i, m in enumerate(r.messages)]
    # The agent loop never adds user messages, so the task's prompt (few-shot examples
    # included) ends at the last one; mark where the model's own turns start.
    users = [i for i, m in enumerate(r.messages) if m.role == "user"]
    if users and users[-1] < len(msgs) - 1:
        msgs.insert(users[-1] + 1, "<div class=divider>above: the task's prompt · below: this "
                                   "rollout's turns</div>")
    rest = [c for c in r.tool_calls if c.call_id not in shown]
    extra = ("<h2>Tool calls without a tool message</h2>" + "".join(
        f"<div class='msg role-tool'>{_call_result(c)}</div>" for c in rest)) if rest else ""
    return f"<div id=conversation>{''.join(msgs)}</div>{extra}"


def rollout_page(data: RunData, r: Rollout, row: ListRow) -> str:
    """One rollout: header, grade breakdown, item, then every message with its tool calls."""
    item = escape(json.dumps(r.item, indent=2, ensure_ascii=False, default=str))
    body = (f"<p><a href='/'>← all rollouts</a></p><h1>Rollout · {escape(r.task_id)}</h1>"
            f"<div class=grid><div><h2>Rollout</h2>{_header(r, row)}</div>"
            f"<div id=grade><h2>Grade</h2>{_grade(r)}</div></div>"
            f"<details><summary>Task item (what the grader reads)</summary><pre>{item}</pre>"
            f"</details><h2>Conversation</h2>{_conversation(r)}")
    return _page(f"{r.task_id} {r.trace_id}", body, data.run_dir)


def not_found_page(data: RunData, trace_id: str) -> str:
    body = (f"<h1>No rollout with trace_id <span class=mono>{escape(trace_id)}</span></h1>"
            f"<p>This run ({escape(str(data.run_dir))}) has no such rollout. Pick one from "
            f"<a href='/'>the rollout list</a>, or list the ids with "
            f"<code>arft show {escape(str(data.run_dir))}</code>.</p>")
    return _page("Not found", body, data.run_dir)


def _error_page(data: RunData, message: str) -> str:
    return _page("Bad filter", f"<h1>Bad filter</h1><pre class=bad>{escape(message)}</pre>"
                               "<p><a href='/'>Show every rollout</a></p>", data.run_dir)


# -- app ---------------------------------------------------------------------------------------

def create_app(run_dir: Path) -> FastAPI:
    """The viewer app for one run directory; raises ``NotARunDirError`` when it has no store."""
    data = RunData(run_dir)
    app = FastAPI(title="arft view", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        try:
            f = Filters.parse(request.query_params)
        except FilterError as e:
            return HTMLResponse(_error_page(data, str(e)), status_code=400)
        return HTMLResponse(list_page(data, f))

    @app.get("/rollouts/{trace_id}", response_class=HTMLResponse)
    def rollout(trace_id: str) -> HTMLResponse:
        r, row = data.rollout(trace_id), data.row(trace_id)
        if r is None or row is None:
            return HTMLResponse(not_found_page(data, trace_id), status_code=404)
        return HTMLResponse(rollout_page(data, r, row))

    @app.get("/api/rollouts")
    def api_list(request: Request) -> JSONResponse:
        try:
            f = Filters.parse(request.query_params)
        except FilterError as e:
            return JSONResponse({"detail": str(e)}, status_code=400)
        page = data.list(f)
        return JSONResponse({"total": page.total, "page": f.page, "per_page": f.per_page,
                             "n_pages": page.n_pages(f.per_page), "rollouts": page.rows})

    @app.get("/api/rollouts/{trace_id}")
    def api_rollout(trace_id: str) -> JSONResponse:
        r, row = data.rollout(trace_id), data.row(trace_id)
        if r is None or row is None:
            return JSONResponse({"detail": f"no rollout with trace_id {trace_id!r}; list them "
                                           "at /api/rollouts"}, status_code=404)
        return JSONResponse({**r.model_dump(mode="json"), "split": row["split"],
                             "step": row["step"], "reward": row["reward"]})

    return app
