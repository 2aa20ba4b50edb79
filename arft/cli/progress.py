"""A rich progress display for commands that run many rollouts."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from arft.app.train import Hooks, TrainResult
from arft.metrics.summary import EvalSummary
from arft.records import Rollout
from arft.report.summary import summary_line


class RolloutProgress:
    """Spinner while loading, then a bar over rollouts with a running mean reward."""

    def __init__(self, console: Console, total: int) -> None:
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn("{task.fields[extra]}"), console=console, transient=False)
        self._task = self._progress.add_task("starting", total=total, extra="")
        self._rewards: list[float] = []
        self._failed = 0

    def __enter__(self) -> "RolloutProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()

    def status(self, text: str) -> None:
        self._progress.update(self._task, description=text)

    def done(self, rollout: Rollout) -> None:
        if rollout.reward is not None:
            self._rewards.append(rollout.reward)
        if rollout.status == "infra_failed":
            self._failed += 1
        mean = sum(self._rewards) / len(self._rewards) if self._rewards else float("nan")
        extra = f"reward {mean:.3f}" + (f"  infra-failed {self._failed}" if self._failed else "")
        self._progress.update(self._task, advance=1, extra=extra)


class TrainDisplay:
    """Live progress for `arft train`: a bar per phase and one summary line per step."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._bar: RolloutProgress | None = None
        self._bar_name = ""

    def __enter__(self) -> "TrainDisplay":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._close()

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def hooks(self) -> Hooks:
        return Hooks(status=self._status, phase=self._phase, rollout_done=self._rollout,
                     step_done=self._step, eval_done=self._eval)

    def _status(self, text: str) -> None:
        self.console.print(f"[dim]{text}[/]")

    def _phase(self, name: str, total: int) -> None:
        self._close()
        self._bar, self._bar_name = RolloutProgress(self.console, total).__enter__(), name
        self._bar.status(name)

    def _close_phase(self, prefix: str) -> None:
        """Close the bar if it is the phase that just ended; with async rollouts it may already
        be the next step's generation, which goes on below the printed line."""
        if self._bar_name.startswith(prefix):
            self._close()

    def _counts(self, rollout: Rollout) -> bool:
        """Whether ``rollout`` belongs to the bar's phase (with async rollouts a step's generation
        and an evaluation run at once; a bar counts its own rollouts only)."""
        name, step = self._bar_name, rollout.step
        if name.startswith("step "):
            return ":eval-" not in rollout.run_id and name.startswith(f"step {step}/")
        if name.startswith("eval @ step "):
            return ":eval-" in rollout.run_id and name == f"eval @ step {step}"
        return True

    def _rollout(self, rollout: Rollout) -> None:
        if self._bar is not None and self._counts(rollout):
            self._bar.done(rollout)

    def _step(self, step: int, m: dict[str, float]) -> None:
        self._close_phase(f"step {step}/")
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
                f"reward variance  t {g('time/rollouts_s', 0):.0f}s")
            return
        self.console.print(
            f"step {step:3d}  reward {g('train/reward_mean', float('nan')):.3f}  "
            f"calls/rollout {g('train/tool_calls_mean', float('nan')):.2f}  "
            f"parse err {int(g('train/parse_errors', 0))}  dropped {int(g('train/groups_dropped', 0))}/"
            f"{int(g('train/groups', 0))} groups  kl {g('update/kl', 0):.4f}  "
            f"ent {g('update/entropy', float('nan')):.2f}  clip {g('update/clip_fraction', 0):.2f}  "
            f"|g| {g('update/grad_norm', 0):.2f}  lr {g('update/lr', 0):.1e}  "
            f"t {g('time/rollouts_s', 0):.0f}+{g('time/update_s', 0):.0f}s")

    def _eval(self, step: int, summary: EvalSummary) -> None:
        self._close_phase(f"eval @ step {step}")
        self.console.print(f"[bold]eval @ step {step}[/]  {summary_line(summary)}")

    def final(self, result: TrainResult) -> None:
        """Baseline vs final eval, and the tool-calls-per-rollout distribution before vs after."""
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
