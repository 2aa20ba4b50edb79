"""The monitors of one training run: the steps so far, each monitor's verdict per step, and which
alarms are new.

``Monitors.observe(signals)`` after every step and ``Monitors.observe_eval(eval)`` after every
evaluation return an ``Observation``: the ``monitor/<name>`` values for the metrics (with
``monitor/<name>/alarm`` 1 or 0, so a curve shows when a rule held) and the alarms that start
this step. An alarm is reported once when its rule starts to hold, and again only after the
rule stopped holding for a step; the ``/alarm`` metric shows every step it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from arft.config.monitors import MonitorSpec, MonitorsSpec
from arft.monitors import checks
from arft.monitors.rules import Verdict
from arft.monitors.signals import EvalSignal, StepSignals

StepCheck = Callable[[Sequence[StepSignals], MonitorsSpec], Verdict]

STEP_MONITORS: dict[str, tuple[StepCheck, str]] = {
    "entropy_collapse": (checks.entropy_collapse, "entropy_collapse"),
    "kl_acceleration": (checks.kl_acceleration, "kl_acceleration"),
    "clip_fraction_spike": (checks.clip_fraction_spike, "clip_fraction_spike"),
    "grad_norm_spike": (checks.grad_norm_spike, "grad_norm_spike"),
    "sub_grader_dominance": (checks.sub_grader_dominance, "sub_graders"),
    "sub_grader_divergence": (checks.sub_grader_divergence, "sub_graders"),
    "length_drift": (checks.length_drift, "length_drift"),
    "tool_calls_drift": (checks.tool_calls_drift, "tool_calls_drift"),
    "equal_groups": (checks.equal_groups, "equal_groups"),
}
"""Monitor name -> (its rule, its section of ``monitors``). Names are the metric names."""

EVAL_MONITOR = "train_eval_divergence"
"""The monitor that runs at evaluations (``monitors.train_eval_divergence``)."""

METRIC_PREFIX = "monitor"


@dataclass(frozen=True)
class Alarm:
    """A monitor's rule started to hold at ``step``."""

    monitor: str
    step: int
    message: str
    value: float | None = None


@dataclass(frozen=True)
class Observation:
    """What one step (or evaluation) made of the monitors: metric values and new alarms."""

    values: dict[str, float] = field(default_factory=dict)
    alarms: list[Alarm] = field(default_factory=list)


class Monitors:
    """The enabled monitors of ``spec`` over one run's steps and evaluations."""

    def __init__(self, spec: MonitorsSpec) -> None:
        self.spec = spec
        self.steps: list[StepSignals] = []
        self.evals: list[EvalSignal] = []
        self._firing: set[str] = set()
        on = spec.enabled
        self._step_checks = {n: check for n, (check, section) in STEP_MONITORS.items()
                             if on and _section(spec, section).enabled}
        self._eval_on = on and spec.train_eval_divergence.enabled

    @property
    def names(self) -> list[str]:
        """The monitors that run."""
        return [*self._step_checks, *([EVAL_MONITOR] if self._eval_on else [])]

    def observe(self, signals: StepSignals) -> Observation:
        """Add a step and judge it with every step monitor."""
        self.steps.append(signals)
        verdicts = {n: check(self.steps, self.spec) for n, check in self._step_checks.items()}
        return self._judged(signals.step, verdicts)

    def observe_eval(self, signal: EvalSignal) -> Observation:
        """Add an evaluation and judge the train/eval divergence at its step."""
        self.evals.append(signal)
        if not self._eval_on:
            return Observation()
        verdict = checks.train_eval_divergence(self.steps, self.evals, self.spec)
        return self._judged(signal.step, {EVAL_MONITOR: verdict})

    def replay(self, steps: Iterable[StepSignals], evals: Iterable[EvalSignal]) -> None:
        """Rebuild the history of a resumed run (its stored steps and evaluations, in order),
        reporting nothing: an alarm that was firing stays known as firing."""
        by_step = sorted(evals, key=lambda e: e.step)
        for s in sorted(steps, key=lambda s: s.step):
            while by_step and by_step[0].step < s.step:
                self.observe_eval(by_step.pop(0))
            self.observe(s)
        for e in by_step:
            self.observe_eval(e)

    def _judged(self, step: int, verdicts: dict[str, Verdict]) -> Observation:
        values: dict[str, float] = {}
        alarms = []
        for name, v in verdicts.items():
            if v.value is not None:
                values[f"{METRIC_PREFIX}/{name}"] = v.value
            values[f"{METRIC_PREFIX}/{name}/alarm"] = float(v.alarm is not None)
            if v.alarm is None:
                self._firing.discard(name)
            elif name not in self._firing:
                self._firing.add(name)
                alarms.append(Alarm(name, step, v.alarm, v.value))
        return Observation(values, alarms)


def section_of(monitor: str) -> str:
    """The ``monitors`` field that configures ``monitor`` (what ``--set monitors.<field>.enabled=false`` names)."""
    return STEP_MONITORS[monitor][1] if monitor in STEP_MONITORS else monitor


def _section(spec: MonitorsSpec, name: str) -> MonitorSpec:
    section = getattr(spec, name)
    assert isinstance(section, MonitorSpec)
    return section
