"""Live monitors of a training run: signals of reward hacking and collapse, computed each step
from what the trainer already has, each judged by a documented rule (docs/monitors.md).

``signals`` turns a step's metrics and rollouts into numbers, ``checks`` holds one pure rule per
monitor, ``suite.Monitors`` runs the enabled ones over a run and says which alarms are new. What
an alarm does (a warning, a metric, an event in the store, a stop) is ``arft.app.monitoring``'s.
They audit a run; they do not promise an early warning.
"""

from arft.monitors.signals import EvalSignal, StepSignals, step_signals
from arft.monitors.suite import Alarm, Monitors, Observation

__all__ = ["Alarm", "EvalSignal", "Monitors", "Observation", "StepSignals", "step_signals"]
