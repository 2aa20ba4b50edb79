"""The suite: only enabled monitors run, an alarm is reported when its rule starts to hold (not
every step it keeps holding), every step has its ``monitor/...`` values, and a replayed history
(a resumed run) reports nothing but remembers what was firing."""

from __future__ import annotations

from arft.config import MonitorsSpec
from arft.monitors import EvalSignal, Monitors, StepSignals
from arft.monitors.suite import STEP_MONITORS, section_of


def stuck(step: int, share: float = 1.0) -> StepSignals:
    return StepSignals(step=step, reward=0.0, equal_groups=share)


def test_an_alarm_is_reported_once_per_episode() -> None:
    m = Monitors(MonitorsSpec())
    seen = [m.observe(stuck(i, share)) for i, share in enumerate([1.0, 1.0, 1.0, 0.5, 1.0, 1.0], start=1)]
    assert [[a.monitor for a in o.alarms] for o in seen] == [[], ["equal_groups"], [], [], [], ["equal_groups"]]
    assert [o.values["monitor/equal_groups/alarm"] for o in seen] == [0, 1, 1, 0, 0, 1]
    assert seen[0].values["monitor/equal_groups"] == 1.0
    assert all(f"monitor/{n}/alarm" in seen[0].values for n in STEP_MONITORS)


def test_monitors_can_be_turned_off_one_by_one_or_all() -> None:
    spec = MonitorsSpec.model_validate({"equal_groups": {"enabled": False}, "sub_graders": {"enabled": False}})
    names = Monitors(spec).names
    assert "equal_groups" not in names and "sub_grader_dominance" not in names and "entropy_collapse" in names
    assert Monitors(spec).observe(stuck(1)).values.keys().isdisjoint({"monitor/equal_groups/alarm"})
    assert Monitors(MonitorsSpec(enabled=False)).names == []
    assert section_of("sub_grader_divergence") == "sub_graders" and section_of("train_eval_divergence") == \
        "train_eval_divergence"


def test_replay_reports_nothing_and_remembers_a_firing_alarm() -> None:
    m = Monitors(MonitorsSpec())
    m.replay([stuck(1), stuck(2)], [EvalSignal(0, 0.0)])
    assert [s.step for s in m.steps] == [1, 2] and [e.step for e in m.evals] == [0]
    assert m.observe(stuck(3)).alarms == []  # still the same episode as the one step 2 raised


def test_divergence_is_judged_at_evaluations() -> None:
    m = Monitors(MonitorsSpec())
    for i, r in enumerate([0.1, 0.2, 0.5, 0.7], start=1):
        m.observe(StepSignals(step=i, reward=r))
    assert m.observe_eval(EvalSignal(0, 0.6)).alarms == []
    o = m.observe_eval(EvalSignal(4, 0.3))
    assert [a.monitor for a in o.alarms] == ["train_eval_divergence"] and o.alarms[0].step == 4
