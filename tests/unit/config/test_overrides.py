"""``load_job(path, overrides)``: ``--set SECTION.FIELD=VALUE`` validated as the job file, with
errors that name the ``--set`` where a file's error names its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from arft.config import JobError, load_job

JOB = """\
model: smollm2-135m-instruct
training_file: train.jsonl
method:
  type: reinforcement
  reinforcement:
    grader: {type: string_check, name: exact, input: "{{ sample.output_text }}",
             reference: "{{ item.answer }}", operation: eq}
    tools:
      - {name: lookup, server_url: "https://tools.example.com/lookup"}
sampling:
  temperature: 0.7
"""


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    return path


def test_overrides_set_fields_of_any_section_typed_as_yaml(job_file: Path) -> None:
    job = load_job(job_file, ["sampling.temperature=0.9", "training.max_steps=3", "rollout.max_turns=1",
                              "seed=7", "logging.wandb.project=demo", "logging.wandb.tags=[a, b]",
                              "engine={type: transformers, lora: merged}"])
    assert (job.sampling.temperature, job.training.max_steps, job.rollout.max_turns, job.seed) == (0.9, 3, 1, 7)
    assert job.logging.wandb is not None and job.logging.wandb.tags == ["a", "b"]  # sections made on the way
    assert job.engine.type == "transformers" and job.engine.lora == "merged"
    assert load_job(job_file).sampling.temperature == 0.7  # the file itself is unchanged


def test_a_later_override_wins_and_a_number_indexes_a_list(job_file: Path) -> None:
    job = load_job(job_file, ["sampling.temperature=0.2", "sampling.temperature=0.3",
                              "method.reinforcement.tools.0.server_url=http://127.0.0.1:9/lookup"])
    assert job.sampling.temperature == 0.3
    assert job.rl.tools[0].server_url == "http://127.0.0.1:9/lookup"  # type: ignore[union-attr]


def test_an_invalid_value_names_the_set_the_field_and_the_problem(job_file: Path) -> None:
    with pytest.raises(JobError) as e:
        load_job(job_file, ["sampling.temperature=abc"])
    assert f"{job_file}: invalid job spec" in str(e.value)
    assert "--set sampling.temperature=abc: sampling.temperature: Input should be a valid number" in str(e.value)


def test_an_unknown_field_gets_did_you_mean_as_in_the_file(job_file: Path) -> None:
    with pytest.raises(JobError, match=r"--set sampling\.temprature=0\.9: sampling\.temprature: "
                                       r"unknown field 'temprature' \(did you mean 'temperature'\?\)"):
        load_job(job_file, ["sampling.temprature=0.9"])


def test_the_file_errors_keep_their_line_beside_the_override_errors(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB.replace("temperature: 0.7", "temperature: 0.7\n  top_p: high"))
    with pytest.raises(JobError) as e:
        load_job(path, ["rollout.max_turns=many"])
    assert f"{path}:12: sampling.top_p:" in str(e.value)
    assert "--set rollout.max_turns=many: rollout.max_turns: Input should be a valid integer" in str(e.value)


@pytest.mark.parametrize(("override", "says"), [
    ("sampling", "--set sampling: write SECTION.FIELD=VALUE"),
    ("sampling..x=1", "--set sampling..x=1: write SECTION.FIELD=VALUE"),
    ("model.name=x", "--set model.name=x: model is a value (str), not a section with fields; set it whole"),
    ("method.reinforcement.tools.3.name=x", "method.reinforcement.tools is a list of 1; index it by position 0..0"),
    ("rollout.stop=[a", "--set rollout.stop=[a: the value is not valid YAML"),
])
def test_an_override_that_cannot_apply_says_how_to_write_it(job_file: Path, override: str, says: str) -> None:
    with pytest.raises(JobError) as e:
        load_job(job_file, [override])
    assert says in str(e.value)


def test_applying_overrides_leaves_the_read_data_unchanged() -> None:
    from arft.config.overrides import apply_overrides, parse_override

    data = {"sampling": {"temperature": 0.7}, "method": {"reinforcement": {"tools": [{"name": "a"}]}}}
    changed = apply_overrides(data, [parse_override("sampling.temperature=0.1"),
                                     parse_override("method.reinforcement.tools.0.name=b")])
    assert changed["sampling"] == {"temperature": 0.1} and changed["method"]["reinforcement"]["tools"] == [{"name": "b"}]
    assert data == {"sampling": {"temperature": 0.7}, "method": {"reinforcement": {"tools": [{"name": "a"}]}}}
