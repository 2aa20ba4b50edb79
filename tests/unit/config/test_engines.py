"""The engine section: one spec per engine type, so an option of another engine is a load error
naming the file, the line and the engine type; every job the project ships still loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arft.config import (JobError, JobSpec, OpenAIEngineSpec, TransformersEngineSpec, VLLMEngineSpec, engine_as,
                         load_job)

ROOT = Path(__file__).resolve().parents[3]
HEAD = """\
method:
  type: reinforcement
  reinforcement:
    grader: {type: string_check, input: a, reference: b, operation: eq}
"""


def load(tmp_path: Path, engine: str) -> JobSpec:
    path = tmp_path / "job.yaml"
    path.write_text(HEAD + engine)
    return load_job(path)


def error(tmp_path: Path, engine: str) -> str:
    with pytest.raises(JobError) as err:
        load(tmp_path, engine)
    return str(err.value)


def test_each_engine_type_has_its_own_spec(tmp_path: Path) -> None:
    assert load(tmp_path, "").engine == TransformersEngineSpec()  # no section: the default
    assert load(tmp_path, "engine: {dtype: float32}\n").engine == TransformersEngineSpec(dtype="float32")
    vllm = load(tmp_path, "engine: {type: vllm, kv_cache_gb: 3, device: cpu}\n").engine
    assert isinstance(vllm, VLLMEngineSpec) and (vllm.kv_cache_gb, vllm.device) == (3.0, "cpu")
    openai = load(tmp_path, "engine: {type: openai, base_url: 'http://h/v1'}\n").engine
    assert isinstance(openai, OpenAIEngineSpec) and openai.base_url == "http://h/v1"


def test_an_option_of_another_engine_is_an_error_naming_the_line_and_the_type(tmp_path: Path) -> None:
    message = error(tmp_path, "engine:\n  type: vllm\n  max_batch_size: 8\n")
    assert (f"{tmp_path / 'job.yaml'}:7: engine.max_batch_size: unknown field 'max_batch_size'; "
            "it is an option of type transformers, not vllm") in message
    message = error(tmp_path, "engine:\n  dtype: float32\n  base_url: http://h\n")  # transformers, implied
    assert ":7: engine.base_url: unknown field 'base_url'; it is an option of type openai, vllm, not " \
           "transformers" in message
    assert "(did you mean 'kv_cache_gb'?)" in error(tmp_path, "engine: {type: vllm, kv_cach_gb: 1}\n")
    assert "unknown 'type' 'vlm' (did you mean 'vllm'?)" in error(tmp_path, "engine: {type: vlm}\n")
    assert ":5: engine.dtype: unknown field 'dtype'; it is an option of type transformers, vllm, not openai" \
        in error(tmp_path, "engine: {type: openai, dtype: float32}\n")


def test_every_job_the_project_ships_loads() -> None:
    jobs = sorted(p for p in (ROOT / "examples").glob("*/job*.yaml"))
    assert len(jobs) >= 10
    for path in jobs:
        assert load_job(path).engine.type == "transformers", path


def test_a_run_stored_before_the_split_still_loads() -> None:
    """A stored job held every engine's options (their defaults); those of other types are dropped."""
    job = JobSpec.model_validate(json.loads(HEAD_JSON))
    stored = job.model_dump(mode="json")
    stored["engine"] = {**stored["engine"], "type": "vllm", "vllm_python": "/v/bin/python", "max_batch_size": 32,
                        "api_key_env": "OPENAI_API_KEY", "served_model": None}
    with pytest.raises(ValueError, match="max_batch_size"):
        JobSpec.model_validate(stored)
    again = JobSpec.from_stored(stored)
    assert again.engine == VLLMEngineSpec(type="vllm", vllm_python="/v/bin/python")
    assert JobSpec.from_stored(again.model_dump(mode="json")) == again


def test_engine_as_keeps_the_options_both_engines_have() -> None:
    vllm = VLLMEngineSpec(type="vllm", dtype="float32", device="cpu", kv_cache_gb=4)
    assert engine_as(vllm, "transformers") == TransformersEngineSpec(dtype="float32", device="cpu")
    assert engine_as(TransformersEngineSpec(device="cuda", max_batch_size=4), "vllm") == VLLMEngineSpec(
        type="vllm", device="cuda")
    assert engine_as(OpenAIEngineSpec(type="openai", base_url="http://h"), "transformers") == TransformersEngineSpec()


HEAD_JSON = json.dumps({"method": {"type": "reinforcement", "reinforcement": {
    "grader": {"type": "string_check", "input": "a", "reference": "b", "operation": "eq"}}}})
