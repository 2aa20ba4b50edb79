"""`arft doctor` end to end: baseline rollouts through the real evaluator (tiny model, scripted
engine), the real store and grader audit, and the CLI (static checks) through typer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from arft.cli.main import app as cli
from arft.config import load_job
from arft.engines.scripted import ScriptedEngine
from arft.engines.transformers.engine import TransformersEngine
from arft.app.doctor import load_data, run_doctor
from arft.tracing.store import RunStore
from tests.unit.app.test_doctor import good_rows, row, write_job


async def test_baseline_with_the_tiny_model_varies(tmp_path: Path, tokenizer: Any,
                                                   tiny_model: Any) -> None:
    """Random weights at temperature 1 write different text each sample: fuzzy grades vary."""
    job = load_job(write_job(tmp_path, *good_rows()))
    engine = TransformersEngine(tiny_model, tokenizer, max_batch_size=8)
    done: list[str] = []
    try:
        report = await run_doctor(job, load_data(job), samples=3, n_tasks=2,
                                  run_dir=tmp_path / "run", engine=engine,
                                  on_done=lambda r: done.append(r.trace_id))
    finally:
        await engine.aclose()
    checks = {c.id: c for c in report.checks}
    assert len(done) == 6 and report.baseline_run == str(tmp_path / "run")
    assert checks["explore.variance"].verdict == "pass", checks["explore.variance"]
    assert checks["explore.variance"].measured.startswith("2/2 tasks vary")
    assert checks["explore.pass_at_k"].verdict == "warn"  # random text never earns full marks
    assert checks["reward.continuous"].verdict == "pass"  # fuzzy grades of random text
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        assert {r.trace_id for r in store.rollouts()} == set(done)


async def test_a_baseline_without_variance_fails(tmp_path: Path, tokenizer: Any) -> None:
    """A model that always gives the same wrong answer: nothing for GRPO to learn from."""
    job = load_job(write_job(tmp_path, *good_rows(), grader={
        "type": "string_check", "name": "eq", "input": "{{ sample.output_text }}",
        "reference": "{{ item.answer }}", "operation": "eq"}))
    engine = ScriptedEngine(tokenizer, lambda ids: "I do not know.<|im_end|>")
    report = await run_doctor(job, load_data(job), samples=4, n_tasks=3,
                              run_dir=tmp_path / "run", engine=engine)
    checks = {c.id: c for c in report.checks}
    assert engine.calls == 12
    v = checks["explore.variance"]
    assert v.verdict == "fail" and v.measured.startswith("0/3 tasks vary")
    assert v.details == ["3 task(s) always scored 0"]
    assert checks["explore.pass_at_k"].measured == "pass@1 0.000, pass@4 0.000 (+0.000)"
    assert checks["reward.continuous"].verdict == "warn"  # 12 grades, all exactly 0
    assert report.exit_code == 1


async def test_rollouts_are_skipped_when_a_row_names_a_missing_tool(tmp_path: Path,
                                                                    tokenizer: Any) -> None:
    train, val = good_rows()
    train[0]["tool_choice"] = "calculator"
    job = load_job(write_job(tmp_path, train, val))
    engine = ScriptedEngine(tokenizer, lambda ids: "x<|im_end|>")
    report = await run_doctor(job, load_data(job), run_dir=tmp_path / "run", engine=engine)
    checks = {c.id: c for c in report.checks}
    assert checks["task.tools"].verdict == "fail" and engine.calls == 0
    assert checks["explore.variance"].verdict == "skip"
    assert checks["explore.variance"].measured == "fix task.tools first"


def test_cli_static_checks_exit_codes_and_json(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    out = CliRunner().invoke(cli, ["doctor", str(write_job(good, *good_rows())), "--no-rollouts"])
    assert out.exit_code == 0, out.output
    assert "task.fields" in out.output and "reward.hacks" in out.output
    assert "7 pass, 0 warn, 0 fail, 3 skip" in out.output

    bad = tmp_path / "bad"
    bad.mkdir()
    train, val = good_rows()
    val.append(row("copy", train[0]["messages"][0]["content"], None))
    job = write_job(bad, train, val)
    out = CliRunner().invoke(cli, ["doctor", str(job), "--no-rollouts", "--json"])
    assert out.exit_code == 1, out.output
    verdicts = {c["id"]: c for c in json.loads(out.stdout)["checks"]}
    assert verdicts["task.fields"]["verdict"] == "fail"
    assert verdicts["data.overlap"]["verdict"] == "fail"
    assert verdicts["data.overlap"]["details"] == ["exact: copy = t0"]
    assert verdicts["data.sizes"]["verdict"] == "pass"
    assert verdicts["explore.variance"]["measured"] == "--no-rollouts"


def test_cli_bad_input_exits_2(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["doctor", str(tmp_path / "missing.yaml"), "--no-rollouts"])
    assert out.exit_code == 2 and "error" in out.output
    job = write_job(tmp_path, *good_rows())
    (tmp_path / "val.jsonl").write_text('{"messages": "not a list"}\n')
    out = CliRunner().invoke(cli, ["doctor", str(job), "--no-rollouts"])
    assert out.exit_code == 2 and "val.jsonl:1" in out.output
    job = write_job(tmp_path, *good_rows())
    out = CliRunner().invoke(cli, ["doctor", str(job), "--traffic", str(tmp_path / "nope.jsonl")])
    assert out.exit_code == 2 and "nope.jsonl" in out.output


def test_cli_says_which_cpu_kernels_run(tmp_path: Path) -> None:
    """After the table, one line per library of arft's CPU kernels: loaded, or off and why."""
    from arft.cpu import build, kernels

    out = CliRunner().invoke(cli, ["doctor", str(write_job(tmp_path, *good_rows())), "--no-rollouts"])
    lines = [line for line in out.output.splitlines() if line.startswith("CPU kernels: ")]
    assert len(lines) == len(build.LIBRARIES), out.output
    for line, library in zip(lines, kernels.status()):
        assert line.startswith(f"CPU kernels: {library.name} (")
        assert line.endswith(" loaded") if library.reason is None else " off because " in line
