"""`arft train`'s display of the live monitors: the step line ends with the monitors whose rule
holds, an alarm prints its message under it, and the end of the run lists every alarm."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from arft.app.session import TrainResult
from arft.cli.progress import TrainDisplay
from arft.monitors import Alarm


def test_a_step_line_warns_and_the_alarm_says_what_fired() -> None:
    out = io.StringIO()
    with TrainDisplay(Console(file=out, width=300, force_terminal=False)) as display:
        hooks = display.hooks()
        hooks.step_done(3, {"train/reward_mean": 0.0, "update/lr": 1e-4, "monitor/equal_groups/alarm": 1.0,
                            "monitor/length_drift/alarm": 0.0, "monitor/equal_groups": 1.0})
        hooks.alarm(Alarm("equal_groups", 3, "100% of the groups had equal rewards [x]"))
        display.final(TrainResult(Path("run"), 3, alarms=[Alarm("equal_groups", 3, "m")]))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("step   3") and lines[0].endswith("⚠ equal_groups")
    assert lines[1] == "⚠ monitor equal_groups at step 3: 100% of the groups had equal rewards [x]"
    assert lines[-1] == "monitor alarms  equal_groups at step 3"
