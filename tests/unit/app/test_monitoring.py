"""The live monitors in a real (tiny) training run: an alarm is a warning hook, a metric, a store
event and a report section; ``on_alarm: stop`` leaves a checkpoint and a message that says how to
go on, and the resumed run goes on without raising the same alarm again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from arft.app.monitoring import MonitorStop
from arft.app.train import Hooks, train
from arft.config import load_job
from arft.monitors import Alarm
from arft.records import Score
from arft.report.html import render_html
from arft.report.report_data import collect
from arft.tracing.store import RunStore
from tests.unit.app.test_train_loop import write_job


class ZeroGrader:
    """Every answer scores 0: every group's rewards are equal (and no group passes)."""

    name = "zero"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        return Score(score=0.0)


async def test_stop_on_alarm_then_resume(tmp_path: Path, tokenizer: Any) -> None:
    from arft.models.loading import tiny_model

    torch.set_num_threads(1)
    job_file = write_job(tmp_path)
    sets = ["training.max_steps=3", "monitors.patience=1", "monitors.on_alarm=stop"]
    job, run = load_job(job_file, sets), tmp_path / "run"
    seen: list[Alarm] = []
    with pytest.raises(MonitorStop, match=r"equal_groups \(step 1\).*arft train --resume .*monitors.on_alarm=warn"):
        await train(job, run, model=tiny_model(tokenizer, seed=5), tokenizer=tokenizer, grader=ZeroGrader(),
                    hooks=Hooks(alarm=seen.append), max_batch_size=8)
    assert [(a.monitor, a.step) for a in seen] == [("equal_groups", 1)]
    assert (run / "checkpoints" / "latest").read_text().strip().endswith("1")
    with RunStore(run / "arft.sqlite") as store:
        assert {r["run_id"]: r["status"] for r in store.runs()}["train"] == "stopped"
        assert [(e["name"], e["step"]) for e in store.events("train", "monitor")] == [("equal_groups", 1)]
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["step"] == 1 and row["monitor/equal_groups"] == 1.0 and row["monitor/equal_groups/alarm"] == 1.0

    result = await train(job, run, resume=True, model=tiny_model(tokenizer, seed=5), tokenizer=tokenizer,
                         grader=ZeroGrader(), hooks=Hooks(alarm=seen.append), max_batch_size=8)
    assert [h["step"] for h in result.history] == [2, 3] and len(seen) == 1  # not raised again
    assert [(a.monitor, a.step) for a in result.alarms] == [("equal_groups", 1)]
    report = collect(run)
    assert [(a.monitor, a.step) for a in report.alarms] == [("equal_groups", 1)] and report.status == "completed"
    page = render_html(report)
    assert 'id="monitors"' in page and "<code>equal_groups</code>" in page and "without all passing" in page
