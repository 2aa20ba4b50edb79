"""A rich progress display for commands that run many rollouts."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn,
                           TimeElapsedColumn)

from arft.app.train import Hooks, TrainResult
from arft.metrics.summary import EvalSummary
from arft.monitors import Alarm
from arft.records import Rollout
from arft.report.summary import summary_line


class RolloutProgress:
    """Spinner while loading, then a bar over rollouts with a running mean reward; ``add`` puts
    more bars beside it (``arft train`` runs an evaluation beside a step's rollouts)."""

    def __init__(self, console: Console, total: int | None = None) -> None:
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn("{task.fields[extra]}"), console=console, transient=False)
        self._tallies: dict[TaskID, _Tally] = {}
        self._task = self.add("starting", total) if total is not None else None

    def __enter__(self) -> "RolloutProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()

    def add(self, description: str, total: int) -> TaskID:
        """A new bar below the others; ``status`` and ``done`` take it as ``bar``."""
        bar = self._progress.add_task(description, total=total, extra="")
        self._tallies[bar] = _Tally()
        return bar

    def status(self, text: str, bar: TaskID | None = None) -> None:
        self._progress.update(self._bar(bar), description=text)

    def done(self, rollout: Rollout, bar: TaskID | None = None) -> None:
        bar = self._bar(bar)
        extra = self._tallies[bar].add(rollout)
        self._progress.update(bar, advance=1, extra=extra)

    def finish(self, bar: TaskID) -> None:
        """Print ``bar`` as it ended, above the bars still running, and take it off them."""
        task = next(t for t in self._progress.tasks if t.id == bar)
        self._progress.console.print(self._progress.make_tasks_table([task]))
        self._progress.remove_task(bar)
        del self._tallies[bar]

    def _bar(self, bar: TaskID | None) -> TaskID:
        if bar is not None:
            return bar
        if self._task is None:
            raise ValueError("this progress display was made without a bar of its own: pass the bar "
                             "that add() returned")
        return self._task


class _Tally:
    """One bar's rewards and infrastructure failures, as the text beside it."""

    def __init__(self) -> None:
        self._reward_sum, self._rewarded, self._failed = 0.0, 0, 0

    def add(self, rollout: Rollout) -> str:
        if rollout.reward is not None:
            self._reward_sum, self._rewarded = self._reward_sum + rollout.reward, self._rewarded + 1
        if rollout.status == "infra_failed":
            self._failed += 1
        mean = self._reward_sum / self._rewarded if self._rewarded else float("nan")
        return f"reward {mean:.3f}" + (f"  infra-failed {self._failed}" if self._failed else "")


class TrainDisplay:
    """Live progress for `arft train`: a bar per running phase (a step's rollouts, an evaluation
    beside them) and one summary line per step and per evaluation."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._bars: RolloutProgress | None = None
        self._phases: dict[tuple[str, int | str], TaskID] = {}

    def __enter__(self) -> "TrainDisplay":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bars is not None:
            self._bars.__exit__(None, None, None)
            self._bars, self._phases = None, {}

    def hooks(self) -> Hooks:
        return Hooks(status=self._status, phase=self._phase, rollout_done=self._rollout,
                     step_done=self._step, eval_done=self._eval, alarm=self._alarm)

    def _alarm(self, alarm: Alarm) -> None:
        """A live monitor's alarm, under the line of the step it fired at (docs/monitors.md)."""
        self.console.print(f"[bold yellow]⚠ monitor {alarm.monitor}[/] at step {alarm.step}: {escape(alarm.message)}")

    def _status(self, text: str) -> None:
        self.console.print(f"[dim]{text}[/]")

    def _phase(self, name: str, total: int) -> None:
        if self._bars is None:
            self._bars = RolloutProgress(self.console).__enter__()
        key = _phase_key(name)
        self._finish(key)  # a step drawing more tasks (dynamic sampling) gets a new bar
        self._phases[key] = self._bars.add(name, total)

    def _finish(self, key: tuple[str, int | str]) -> None:
        bar = self._phases.pop(key, None)
        if bar is not None and self._bars is not None:
            self._bars.finish(bar)

    def _rollout(self, rollout: Rollout) -> None:
        """Count ``rollout`` on its phase's bar: an evaluation's or a step's, by its run id and
        step; any other phase (a warm start's sampling) counts every rollout."""
        key = ("eval" if ":eval-" in rollout.run_id else "step", rollout.step if rollout.step is not None else -1)
        bar = self._phases.get(key)
        if bar is None:
            bar = next((b for (kind, _), b in self._phases.items() if kind == "other"), None)
        if bar is not None and self._bars is not None:
            self._bars.done(rollout, bar)

    def _step(self, step: int, m: dict[str, float]) -> None:
        self._finish(("step", step))
        g = m.get
        if "sft/tokens" in m:
            self.console.print(
                f"step {step:3d}  nll {g('sft/nll', float('nan')):.3f}  tokens {int(g('sft/tokens', 0))}  "
                f"|g| {g('update/grad_norm', 0):.2f}  lr {g('update/lr', 0):.1e}  t {g('time/step_s', 0):.0f}s")
            return
        if "update/lr" not in m:  # every group dropped (no reward variance): nothing to learn from
            self.console.print(
                f"step {step:3d}  reward {g('train/reward_mean', float('nan')):.3f}  "
                f"calls/rollout {g('train/tool_calls_mean', float('nan')):.2f}  no update: "
                f"{int(g('train/groups_dropped', 0))}/{int(g('train/groups', 0))} groups without "
                f"reward variance  t {g('time/rollouts_s', 0):.0f}s{_alarms(m)}")
            return
        self.console.print(
            f"step {step:3d}  reward {g('train/reward_mean', float('nan')):.3f}  "
            f"calls/rollout {g('train/tool_calls_mean', float('nan')):.2f}  "
            f"parse err {int(g('train/parse_errors', 0))}  dropped {int(g('train/groups_dropped', 0))}/"
            f"{int(g('train/groups', 0))} groups{_rescued(m)}  kl {g('update/kl', 0):.4f}  "
            f"ent {g('update/entropy', float('nan')):.2f}  clip {g('update/clip_fraction', 0):.2f}  "
            f"|g| {g('update/grad_norm', 0):.2f}  lr {g('update/lr', 0):.1e}  "
            f"t {g('time/rollouts_s', 0):.0f}+{g('time/update_s', 0):.0f}s{_alarms(m)}")

    def _eval(self, step: int, summary: EvalSummary) -> None:
        self._finish(("eval", step))
        self.console.print(f"[bold]eval @ step {step}[/]  {summary_line(summary)}")

    def final(self, result: TrainResult) -> None:
        """Baseline vs final eval, the tool-calls-per-rollout distribution before vs after, and
        the live monitors' alarms."""
        alarms = "; ".join(f"{a.monitor} at step {a.step}" for a in result.alarms) or "none"
        self.console.print(f"\n[bold]monitor alarms[/]  {escape(alarms)}")
        if not result.evals:
            return
        first, last = min(result.evals), max(result.evals)
        a, b = result.evals[first], result.evals[last]
        self.console.print(f"\n[bold]eval reward[/]  step {first}: {a.reward.mean}  ->  step {last}: {b.reward.mean}")
        self.console.print(f"pass@1 {a.pass_rate} -> {b.pass_rate}")
        keys = sorted(set(a.tool_calls.histogram) | set(b.tool_calls.histogram),
                      key=lambda k: (k.startswith(">"), int(k.lstrip(">="))))
        self.console.print("tool calls per rollout   before  after")
        for k in keys:
            self.console.print(f"  {k:>4}                  {a.tool_calls.histogram.get(k, 0):6d} "
                               f"{b.tool_calls.histogram.get(k, 0):6d}")


def _phase_key(name: str) -> tuple[str, int | str]:
    """Which rollouts a phase counts: ``("step", N)`` for "step N/T...", ``("eval", N)`` for
    "eval @ step N", ``("other", name)`` for anything else."""
    for kind, head in (("step", "step "), ("eval", "eval @ step ")):
        number = name[len(head):].split("/")[0].split(":")[0] if name.startswith(head) else ""
        if number.isdigit():
            return kind, int(number)
    return "other", name


def _alarms(m: dict[str, float]) -> str:
    """``  ⚠ name, name`` for the monitors whose rule holds at this step (``monitor/<name>/alarm``)."""
    names = [k.split("/")[1] for k, v in m.items() if k.startswith("monitor/") and k.endswith("/alarm") and v]
    return f"  [yellow]⚠ {', '.join(names)}[/]" if names else ""


def _rescued(m: dict[str, float]) -> str:
    """`` rescued N (hinted P%)`` under ``training.rescue``, else nothing."""
    if "train/groups_rescued" not in m:
        return ""
    explored = int(m.get("train/groups_explored", 0))
    return (f" rescued {int(m['train/groups_rescued'])}" + (f" ({explored} by exploring)" if explored else "")
            + f" (hinted {100 * m['train/hinted_share']:.0f}%)")
