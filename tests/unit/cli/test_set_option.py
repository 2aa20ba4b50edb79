"""``--set SECTION.FIELD=VALUE`` on every command that loads a job, and kept for ``--resume``."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import typer.main

from arft.cli.main import COMMANDS, GROUPS, app
from arft.cli.runs import record_overrides, recorded_overrides
from arft.tracing.run_dir import RunDir
from tests.unit.cli.runner import flat, invoke

JOB = """\
training_file: train.jsonl
method:
  type: reinforcement
  reinforcement:
    grader: {type: string_check, name: exact, input: "{{ sample.output_text }}",
             reference: "{{ item.answer }}", operation: eq}
"""


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    (tmp_path / "train.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                                      "answer": "hi"}) + "\n")
    return path


def _loads_a_job(callback: object) -> bool:
    return "load_job(" in inspect.getsource(callback)  # type: ignore[arg-type]


def test_every_command_that_loads_a_job_takes_set() -> None:
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    grouped = {f"{g} {n}": c for g, _ in GROUPS for n, c in commands[g].commands.items()}
    every = {**{n: commands[n] for n, _ in COMMANDS}, **grouped}
    loaders = {name for name, cmd in every.items() if _loads_a_job(cmd.callback)}
    assert {"eval", "train", "sft", "doctor", "import", "grader audit"} <= loaders
    for name in loaders:
        assert any("--set" in p.opts for p in every[name].params), f"arft {name} has no --set"


@pytest.mark.parametrize(("command", "options"), [
    (["eval"], []), (["train"], []), (["doctor"], ["--no-rollouts"]), (["grader", "audit"], []),
    (["sft"], ["--data", "demos.jsonl"])])
def test_an_invalid_override_fails_the_command_naming_the_set(job_file: Path, command: list[str],
                                                              options: list[str]) -> None:
    out = invoke(*command, str(job_file), *options, "--set", "seed=7", "--set", "sampling.temperature=abc")
    assert out.exit_code == 2
    assert "--set sampling.temperature=abc: sampling.temperature: Input should be a valid number" in flat(out.stderr)


def test_import_takes_set_with_its_job(job_file: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs.jsonl"
    logs.write_text("")
    out = invoke("import", str(logs), "-o", str(tmp_path / "out"), "--job", str(job_file),
                 "--set", "rollout.max_turns=two")
    assert out.exit_code == 2 and "--set rollout.max_turns=two: rollout.max_turns:" in flat(out.stderr)


def test_a_resumed_run_applies_the_overrides_it_started_with(job_file: Path, tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    record_overrides(run, ["training.max_steps=3", "sampling.temperature=abc"])
    run.job_path.write_text(str(job_file))
    assert recorded_overrides(run.path) == ["training.max_steps=3", "sampling.temperature=abc"]
    assert recorded_overrides(tmp_path / "no-run") == [] and recorded_overrides(None) == []
    out = invoke("train", "--resume", str(run.path))  # the stored --set is loaded again, and fails again
    assert out.exit_code == 2 and "--set sampling.temperature=abc" in flat(out.stderr)
