"""The terminal trajectory viewer: one rollout, every message and tool call, in order.

Used to inspect rollouts by hand — the talk's lesson from reward hacking is that people must
read trajectories. All user and model text is printed as ``rich.text.Text``, never as markup,
so brackets in model output cannot restyle or hide anything.
"""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from arft.records import Message, Rollout, ToolCallRecord

ROLE_STYLES = {
    "system": "magenta",
    "developer": "magenta",
    "user": "green",
    "assistant": "cyan",
    "tool": "yellow",
}


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how much was left out."""
    if limit <= 0 or len(text) <= limit:
        return text
    return f"{text[:limit]}… [truncated {len(text) - limit} more chars]"


def _label(t: Text, name: str) -> Text:
    """Append a bold, fixed-width field label so header values line up."""
    return t.append(f"{name:<13}", style="bold")


def _header(r: Rollout) -> Text:
    t = Text()
    _label(t, "trace_id").append(f"{r.trace_id}\n")
    run = f"  run {r.run_id}" if r.run_id else ""
    _label(t, "task").append(f"{r.task_id}  sample {r.sample_index}{run}\n")
    status_style = "green" if r.status == "ok" else "red"
    _label(t, "status").append(r.status, style=status_style)
    t.append(f"  finish {r.finish_reason}  turns {r.n_turns}  tool calls {len(r.tool_calls)}"
             f"  parse errors {r.parse_errors}\n")
    if r.error:
        _label(t, "error").append(f"{r.error}\n", style="red")
    _append_score(t, r)
    tm = r.timings
    _label(t, "time (s)").append(
        f"generate {tm.generate_s:.2f}  tools {tm.tools_s:.2f}  grade {tm.grade_s:.2f}  "
        f"total {tm.total_s:.2f}\n")
    _label(t, "tokens").append(
        f"{len(r.token_ids)} total  {r.n_sampled_tokens} sampled  prompt {r.prompt_len}")
    return t


def _append_score(t: Text, r: Rollout) -> None:
    s = r.score
    _label(t, "reward")
    if s is None:
        t.append("not graded\n", style="yellow")
        return
    if s.error is not None:
        t.append(f"no grade (score field {s.score:g})", style="yellow")
    else:
        t.append(f"{s.score:.4g}", style="bold green" if s.score > 0 else "bold red")
    passed = "" if s.passed is None else f"  passed {s.passed}"
    grader = f"  grader {s.grader}" if s.grader else ""
    t.append(f"{passed}{grader}  latency {s.latency_s:.2f}s\n")
    if s.sub_scores:
        subs = "  ".join(f"{k} {v:.4g}" for k, v in s.sub_scores.items())
        _label(t, "sub-scores").append(f"{subs}\n")
    if s.error is not None:
        _label(t, "grader error").append(f"{s.error}\n", style="red")
    if s.flags:
        _label(t, "flags").append(f"{', '.join(s.flags)}\n", style="red")


def _tool_call_line(call: ToolCallRecord, limit: int) -> Text:
    t = Text()
    status_style = "green" if call.status == "ok" else "red"
    t.append(f"← {call.name} ", style="bold yellow")
    t.append(f"[{call.status}]", style=status_style)
    http = f"  HTTP {call.http_status}" if call.http_status is not None else ""
    t.append(f"  {call.latency_s:.3f}s{http}  turn {call.turn}  call_id {call.call_id}\n",
             style="dim")
    if call.error:
        t.append("error: ", style="bold red").append(f"{call.error}\n", style="red")
    t.append(truncate(call.output, limit))
    return t


def _message(m: Message, calls: dict[str, ToolCallRecord], shown: set[str], limit: int) -> Text:
    t = Text()
    if m.role == "tool" and m.tool_call_id in calls:
        shown.add(m.tool_call_id)
        return _tool_call_line(calls[m.tool_call_id], limit)
    if m.content:
        t.append(truncate(m.content, limit))
    for tc in m.tool_calls or ():
        if len(t):
            t.append("\n")
        t.append(f"→ {tc.function.name}", style="bold cyan")
        t.append(f"({truncate(tc.function.arguments, limit)})")
        t.append(f"  call_id {tc.id}", style="dim")
    if not len(t):
        t.append("(empty)", style="dim italic")
    return t


def render_trajectory(rollout: Rollout, console: Console, *, max_output_chars: int = 2000) -> None:
    """Print a rollout: a header panel, then every message in order with its tool results.

    Tool messages are shown from the matching ``ToolCallRecord`` (by call_id): status, error,
    latency and HTTP status beside the output. Records that no tool message answers (e.g. a
    rollout cut short by an infra failure) are listed at the end. Message content and tool
    outputs longer than ``max_output_chars`` are truncated with a marker (0 = never truncate).
    """
    console.print(Panel(_header(rollout), title="rollout", title_align="left"))
    calls = {c.call_id: c for c in rollout.tool_calls}
    shown: set[str] = set()
    for i, m in enumerate(rollout.messages):
        label = m.role if m.name is None else f"{m.role} ({m.name})"
        console.print(Rule(Text(f"{i} {label}", style=f"bold {ROLE_STYLES[m.role]}"),
                           align="left", style=ROLE_STYLES[m.role]))
        console.print(_message(m, calls, shown, max_output_chars))
    unanswered = [c for c in rollout.tool_calls if c.call_id not in shown]
    if unanswered:
        console.print(Rule(Text("tool calls without a tool message", style="bold red"),
                           align="left", style="red"))
        for call in unanswered:
            console.print(_tool_call_line(call, max_output_chars))
