"""What ``arft train`` does with its live monitors (``arft.monitors``, configured by ``job.monitors``).

After each step's update: the step's signals go to the monitors, their values join the step's
metric row (``monitor/<name>``), and each new alarm is a warning (``Hooks.alarm``), an event in
the run store (kind ``monitor``) and an entry of ``TrainResult.alarms``; the report shows them.
Evaluations are watched when they finish (train/eval divergence, at the evaluation's step).
With ``monitors.on_alarm: stop`` a new alarm saves a checkpoint of the step and ends the run
with ``MonitorStop``, which says what fired and how to go on. A resumed run replays its stored
steps into the monitors first, so their baselines are the run's own, and an alarm that was
already raised (the one that stopped it) is not raised again while its rule keeps holding.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from arft.app.session import Session
from arft.data.order import Cursor
from arft.errors import ArftError
from arft.monitors import Alarm, EvalSignal, Monitors, Observation, StepSignals, step_signals
from arft.monitors.suite import section_of
from arft.records import Rollout
from arft.trainer.checkpoints import save_checkpoint

EVENT_KIND = "monitor"
"""The ``kind`` of a monitor's alarm in the store's ``events`` table."""


class MonitorStop(ArftError):
    """A monitor raised an alarm under ``monitors.on_alarm: stop``: the run stopped at a checkpoint."""


def open_monitors(t: Session, group_size: int, resumed_at: int | None) -> None:
    """Give ``t`` its monitors (none when ``monitors.enabled`` is false); a run resumed at step
    ``resumed_at`` replays what its store holds up to it."""
    spec = t.run.job.monitors
    t.monitors = Monitors(spec) if spec.enabled else None
    if t.monitors is None or resumed_at is None:
        return
    # An evaluation is judged in the row of the step after it: the checkpoint step's is still to come.
    evals = [(step, eval_reward(t, step)) for step in sorted(t.result.evals) if step < resumed_at]
    t.monitors.replay(stored_signals(t, group_size, resumed_at),
                      [EvalSignal(step, reward) for step, reward in evals if reward is not None])
    t.result.alarms.extend(Alarm(e["name"], e["step"], e["message"])
                           for e in t.run.store.events(t.run_id, EVENT_KIND))


def watch_step(t: Session, group_size: int, step: int, values: dict[str, float],
               rollouts: Sequence[Rollout]) -> Observation:
    """Judge the evaluations finished since the last call, then step ``step``; report the new
    alarms in the store (``announce`` shows them). Returns the step's ``monitor/...`` values and
    every new alarm."""
    if t.monitors is None:
        return Observation()
    earlier = watch_evals(t)
    seen = t.monitors.observe(step_signals(step, values, rollouts, group_size))
    for alarm in seen.alarms:
        _report(t, alarm)
    return Observation({**earlier.values, **seen.values}, [*earlier.alarms, *seen.alarms])


def watch_evals(t: Session) -> Observation:
    """Judge every evaluation in ``t.result.evals`` the monitors have not seen. Returns their
    values (they join the row of the step judged next: an evaluation's own row is its ``eval/``
    metrics) and the new alarms (recorded, not yet announced)."""
    if t.monitors is None:
        return Observation()
    seen = {e.step for e in t.monitors.evals}
    values: dict[str, float] = {}
    alarms: list[Alarm] = []
    for step in sorted(set(t.result.evals) - seen):
        reward = eval_reward(t, step)
        if reward is None:
            continue
        judged = t.monitors.observe_eval(EvalSignal(step, reward))
        for alarm in judged.alarms:
            _report(t, alarm)
        values, alarms = {**values, **judged.values}, [*alarms, *judged.alarms]
    return Observation(values, alarms)


def announce(t: Session, cursor: Cursor, total_steps: int, alarms: Sequence[Alarm], *, stop: bool = True) -> None:
    """Show the new ``alarms`` (``Hooks.alarm``, after the step's own line); under
    ``monitors.on_alarm: stop`` (and ``stop``: not after the last step) then checkpoint
    ``cursor``'s step, mark the run stopped and raise ``MonitorStop``."""
    for alarm in alarms:
        t.hooks.alarm(alarm)
    if not alarms or not stop or t.run.job.monitors.on_alarm != "stop":
        return
    run_dir = t.run.run_dir.path
    save_checkpoint(run_dir, cursor, t.learner, {"total_steps": total_steps})
    t.run.store.finish_run(t.run_id, "stopped")
    fired = "; ".join(f"{a.monitor} (step {a.step}): {a.message}" for a in alarms)
    off = " ".join(f"--set monitors.{section_of(a.monitor)}.enabled=false" for a in alarms)
    raise MonitorStop(
        f"stopped at step {cursor.step} by the live monitors (monitors.on_alarm: stop): {fired}. "
        f"A checkpoint of step {cursor.step} is saved: `arft train --resume {run_dir}` goes on from it "
        f"(an alarm already raised is not raised again while it keeps holding); add `--set "
        f"monitors.on_alarm=warn` to only warn from then on, or `{off}` to turn the monitor off.")


def stored_signals(t: Session, group_size: int, up_to: int) -> list[StepSignals]:
    """The signals of the steps ``t``'s store holds up to ``up_to``, from their metric rows and
    train rollouts (groups rebuilt from task and sample index)."""
    values: dict[int, dict[str, float]] = defaultdict(dict)
    for row in t.run.store.metrics(t.run_id):
        if row["step"] <= up_to:
            values[row["step"]][row["name"]] = row["value"]
    rollouts: dict[int, list[Rollout]] = defaultdict(list)
    for r in t.run.store.rollouts(t.run_id):
        if r.step is not None and r.step <= up_to:
            rollouts[r.step].append(r)
    steps = sorted(s for s, v in values.items() if "train/rollouts" in v)
    return [step_signals(s, values[s], _regrouped(rollouts[s]), group_size) for s in steps]


def _regrouped(rollouts: list[Rollout]) -> list[Rollout]:
    """A step's stored rollouts (stored as they finished) in groups again: by task, then sample."""
    return sorted(rollouts, key=lambda r: (r.task_id, r.sample_index, r.trace_id))


def eval_reward(t: Session, step: int) -> float | None:
    """The mean reward of the evaluation of ``step`` as the store holds it (its last completed
    run), summed exactly: the same float live and when a resumed run reads it back."""
    runs = [r["run_id"] for r in t.run.store.runs() if r["kind"] == "eval" and r["status"] == "completed"
            and r["run_id"].startswith(f"{t.run_id}:eval-") and (r.get("job") or {}).get("step") == step]
    if not runs:
        summary = t.result.evals.get(step)
        return summary.reward.mean if summary is not None else None
    rewards = [r.reward for r in t.run.store.rollouts(runs[-1]) if r.reward is not None]
    return math.fsum(rewards) / len(rewards) if rewards else None


def _report(t: Session, alarm: Alarm) -> None:
    t.result.alarms.append(alarm)
    t.run.store.add_event(t.run_id, alarm.step, EVENT_KIND, alarm.monitor, alarm.message, {"value": alarm.value})
