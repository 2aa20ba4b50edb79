"""The job-spec loader: hosted JSON unchanged, YAML with arft sections, errors with file:line:field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arft.config import EndpointToolSpec, JobError, JobSpec, PythonToolSpec, load_job

GRADER = {"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
          "reference": "{{ item.answer }}", "operation": "eq"}

HOSTED = {
    "model": "gpt-5-mini",
    "training_file": "train.jsonl",
    "validation_file": "val.jsonl",
    "seed": 7,
    "suffix": "lookup-agent",
    "method": {
        "type": "reinforcement",
        "reinforcement": {
            "grader": GRADER,
            "tools": [{"name": "lookup", "server_url": "https://tools.example.com/lookup",
                       "headers": {"Authorization": "Bearer token"}}],
            "max_episode_steps": 5,
            "hyperparameters": {
                "n_epochs": "auto", "batch_size": "auto", "compute_multiplier": "auto",
                "eval_interval": "auto", "eval_samples": "auto",
                "learning_rate_multiplier": "auto", "reasoning_effort": "auto",
            },
        },
    },
}

ARFT_YAML = """\
model: smollm2-135m-instruct
training_file: data/train.jsonl
method:
  type: reinforcement
  reinforcement:
    grader: {type: string_check, name: exact, input: "{{ sample.output_text }}",
             reference: "{{ item.answer }}", operation: eq}
    tools:
      - {type: python, function: tools.py:lookup}
      - {type: shell, timeout_s: 5}
    hyperparameters: {n_epochs: 3, batch_size: 2}
engine: {type: transformers, dtype: float32, device: cpu}
sampling: {temperature: 0.7, max_new_tokens: 64}
rollout:
  max_turns: 4
  on_max_episode_steps: end
budget: {soft_limit: 3, penalty: 0.1}
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def job_error(path: Path) -> str:
    with pytest.raises(JobError) as err:
        load_job(path)
    return str(err.value)


def test_hosted_json_loads_unchanged(tmp_path: Path) -> None:
    job = load_job(write(tmp_path / "job.json", json.dumps(HOSTED)))
    assert (job.model, job.seed, job.suffix) == ("gpt-5-mini", 7, "lookup-agent")
    assert job.rl.grader_dict == GRADER
    assert job.rl.max_steps == 5
    (tool,) = job.rl.tools
    assert isinstance(tool, EndpointToolSpec)
    assert tool.name == "lookup" and tool.server_url == "https://tools.example.com/lookup"
    assert tool.headers == {"Authorization": "Bearer token"}
    hp = job.rl.hyperparameters
    assert hp.n_epochs == "auto" and hp.resolved("n_epochs") == 1
    assert hp.resolved("batch_size") == 4 and hp.resolved("learning_rate_multiplier") == 1.0
    assert hp.resolved("reasoning_effort") == "medium"
    assert job.engine.type == "transformers" and job.rollout.max_turns == 8  # arft defaults


def test_hosted_read_only_fields_are_ignored(tmp_path: Path) -> None:
    # A job object read back from the hosted API carries id/status/...: accept it as is.
    data = {**HOSTED, "object": "fine_tuning.job", "id": "ftjob-1", "status": "queued",
            "created_at": 1, "metadata": {"team": "x"}, "integrations": []}
    job = load_job(write(tmp_path / "job.json", json.dumps(data)))
    assert job.model == "gpt-5-mini"


def test_hosted_shape_without_tools_or_hyperparameters(tmp_path: Path) -> None:
    data = {"method": {"type": "reinforcement", "reinforcement": {"grader": GRADER}}}
    job = load_job(write(tmp_path / "job.yaml", json.dumps(data)))  # JSON is valid YAML
    assert job.rl.tools == [] and job.rl.max_steps == 10
    assert job.model == "smollm2-135m-instruct"


def test_yaml_with_arft_sections(tmp_path: Path) -> None:
    job = load_job(write(tmp_path / "job.yaml", ARFT_YAML))
    python_tool, shell_tool = job.rl.tools
    assert isinstance(python_tool, PythonToolSpec) and python_tool.function == "tools.py:lookup"
    assert shell_tool.type == "shell" and shell_tool.timeout_s == 5
    assert job.rl.hyperparameters.resolved("n_epochs") == 3
    assert (job.engine.dtype, job.engine.device) == ("float32", "cpu")
    assert job.sampling.temperature == 0.7 and job.sampling.max_new_tokens == 64
    assert job.rollout.max_turns == 4 and job.rollout.on_max_episode_steps == "end"
    assert job.budget.soft_limit == 3 and job.budget.penalty == 0.1
    assert job.rl.grader.type == "string_check" and job.rl.grader.reference == "{{ item.answer }}"


def test_relative_paths_resolve_against_the_job_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    job = load_job(write(jobs / "job.yaml", ARFT_YAML))
    assert job.path(job.training_file) == (jobs / "data" / "train.jsonl").resolve()
    assert job.path(job.validation_file) is None
    assert job.path(str(tmp_path / "abs.jsonl")) == tmp_path / "abs.jsonl"
    # base_dir is the loader's bookkeeping, not part of the spec a user writes.
    assert "base_dir" not in job.model_dump()


def test_relative_job_path_gives_absolute_base_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "job.yaml", ARFT_YAML)
    monkeypatch.chdir(tmp_path)
    job = load_job("job.yaml")
    assert job.base_dir == tmp_path.resolve()
    assert job.path(job.training_file) == (tmp_path / "data" / "train.jsonl").resolve()


@pytest.mark.parametrize("old, new, line, where, did_you_mean", [
    ("training_file:", "trainig_file:", 2, "trainig_file", "training_file"),
    ("n_epochs: 3", "n_epoch: 3", 11, "method.reinforcement.hyperparameters.n_epoch", "n_epochs"),
    ("max_turns: 4", "max_turn: 4", 15, "rollout.max_turn", "max_turns"),
    ("temperature: 0.7", "temprature: 0.7", 13, "sampling.temprature", "temperature"),
    ("engine:", "engin:", 12, "engin", "engine"),  # a flow-mapping value on the key's line
])
def test_misspelt_field_names_file_line_field_and_suggestion(
    tmp_path: Path, old: str, new: str, line: int, where: str, did_you_mean: str
) -> None:
    assert old in ARFT_YAML
    path = write(tmp_path / "job.yaml", ARFT_YAML.replace(old, new))
    message = job_error(path)
    assert f"{path}:{line}: {where}: unknown field" in message
    assert f"did you mean '{did_you_mean}'?" in message


def test_misspelt_key_of_a_block_mapping_names_the_key_line(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", ARFT_YAML.replace("  reinforcement:", "  reinforcment:"))
    message = job_error(path)
    assert "did you mean 'reinforcement'?" in message  # the suggestion itself is right
    assert f"{path}:5: method.reinforcment: unknown field" in message


def test_misspelt_field_in_json_names_the_line(tmp_path: Path) -> None:
    data = json.loads(json.dumps(HOSTED))
    data["method"]["reinforcement"]["max_episode_step"] = data["method"]["reinforcement"].pop(
        "max_episode_steps")
    path = write(tmp_path / "job.json", json.dumps(data, indent=2))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1)
                if "max_episode_step" in text)
    message = job_error(path)
    assert f"{path}:{line}: method.reinforcement.max_episode_step: unknown field" in message
    assert "did you mean 'max_episode_steps'?" in message


def test_misspelt_field_in_tool_spec_names_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", ARFT_YAML.replace("timeout_s: 5", "timeout: 5"))
    message = job_error(path)
    assert f"{path}:10: method.reinforcement.tools.1.shell.timeout: unknown field" in message


def test_misspelt_field_in_tool_spec_suggests_the_right_one(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", ARFT_YAML.replace("timeout_s: 5", "timeout: 5"))
    assert "did you mean 'timeout_s'?" in job_error(path)


def test_misspelt_server_url_is_named(tmp_path: Path) -> None:
    data = json.loads(json.dumps(HOSTED))
    data["method"]["reinforcement"]["tools"][0]["server_ur"] = "http://127.0.0.1:1/x"
    del data["method"]["reinforcement"]["tools"][0]["server_url"]
    message = job_error(write(tmp_path / "job.json", json.dumps(data, indent=2)))
    assert "server_ur" in message and "did you mean 'server_url'?" in message


def test_wrong_value_names_field_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", ARFT_YAML.replace("n_epochs: 3", "n_epochs: three"))
    message = job_error(path)
    assert f"{path}:11: method.reinforcement.hyperparameters.n_epochs" in message


@pytest.mark.parametrize("field", ["micro_batch_size: 0", "micro_batch_tokens: 0", "micro_batch_tokens: big"])
def test_micro_batch_limits_below_one_are_refused(tmp_path: Path, field: str) -> None:
    path = write(tmp_path / "job.yaml", ARFT_YAML + f"training: {{{field}}}\n")
    assert f"training.{field.split(':')[0]}" in job_error(path)


def test_an_unknown_lora_sampling_mode_is_refused_with_the_choices(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", ARFT_YAML.replace("device: cpu}", "device: cpu, lora: fused}"))
    message = job_error(path)
    assert "engine.lora" in message and "'merged'" in message and "'adapter'" in message


@pytest.mark.parametrize("field, choices", [("unhinted: always", ("'baseline'", "'train'")),
                                            ("correction: ppo", ("'tis'", "'none'")),
                                            ("groups: some", ("'equal'", "'unsolved'"))])
def test_an_unknown_rescue_mode_is_refused_with_its_line_and_the_choices(tmp_path: Path, field: str,
                                                                         choices: tuple[str, str]) -> None:
    path = write(tmp_path / "job.yaml", ARFT_YAML + f"training:\n  rescue: {{hint: auto, {field}}}\n")
    line = len(path.read_text().splitlines())
    message = job_error(path)
    assert f"{path}:{line}: training.rescue.{field.split(':')[0]}" in message
    assert all(choice in message for choice in choices)


def test_missing_method(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", "model: smollm2-135m-instruct\n")
    message = job_error(path)
    assert f"{path}:1: method: Field required" in message


def test_grader_without_type(tmp_path: Path) -> None:
    text = ARFT_YAML.replace("grader: {type: string_check, ", "grader: {")
    path = write(tmp_path / "job.yaml", text)
    message = job_error(path)
    assert f"{path}:6: method.reinforcement.grader" in message
    assert "needs a 'type' (one of: builtin, endpoint, label_model, multi, python" in message


def test_missing_file(tmp_path: Path) -> None:
    message = job_error(tmp_path / "nope.yaml")
    assert "nope.yaml: job file not found" in message


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "", "# only a comment\n"])
def test_not_a_mapping(tmp_path: Path, text: str) -> None:
    path = write(tmp_path / "job.yaml", text)
    assert f"{path}: a job spec must be a mapping at the top level" in job_error(path)


def test_invalid_json_and_yaml(tmp_path: Path) -> None:
    assert "not valid JSON" in job_error(write(tmp_path / "job.json", '{"method": '))
    assert "not valid YAML" in job_error(write(tmp_path / "job.yaml", "method: [unclosed\n"))


def test_spec_round_trips_through_json(tmp_path: Path) -> None:
    job = load_job(write(tmp_path / "job.yaml", ARFT_YAML))
    again = JobSpec.model_validate_json(job.model_dump_json())
    assert again.model_dump() == job.model_dump()


def test_relative_model_directory_resolves_against_the_job_file(tmp_path: Path) -> None:
    (tmp_path / "models" / "mine").mkdir(parents=True)
    job_path = tmp_path / "job.json"
    data = json.loads(json.dumps(HOSTED))
    data["model"] = "models/mine"
    job_path.write_text(json.dumps(data))
    from arft.config import load_job

    job = load_job(job_path)
    assert job.model_ref == str((tmp_path / "models" / "mine").resolve())
    data["model"] = "org/hub-model"  # not a local path: passed through as a hub id
    job_path.write_text(json.dumps(data))
    assert load_job(job_path).model_ref == "org/hub-model"


def test_a_nul_character_is_refused_where_it_is_written(tmp_path: Path) -> None:
    job = {**HOSTED, "training_file": "train\u0000.jsonl"}
    message = job_error(write(tmp_path / "job.json", json.dumps(job)))
    assert "training_file" in message and "NUL character" in message


def test_the_agent_section_by_its_keys_and_its_errors(tmp_path: Path) -> None:
    assert load_job(write(tmp_path / "a.yaml", ARFT_YAML)).agent.type == "arft"  # the default
    python = load_job(write(tmp_path / "p.yaml", ARFT_YAML + "agent: {entrypoint: my_agent.py:run}\n"))
    assert python.agent.type == "python" and python.agent.timeout_s == 600
    command = load_job(write(tmp_path / "c.yaml", ARFT_YAML + "agent: {command: [python, a.py], timeout_s: 5}\n"))
    assert command.agent.type == "command" and command.agent.command == ["python", "a.py"]
    assert "must be 'file.py:function'" in job_error(write(tmp_path / "e.yaml", ARFT_YAML + "agent: {entrypoint: a.py}\n"))
    ray = ARFT_YAML + "agent: {entrypoint: a.py:run}\ncluster: {ray: {address: local}}\n"
    assert "cluster.ray cannot drive them yet" in job_error(write(tmp_path / "r.yaml", ray))
