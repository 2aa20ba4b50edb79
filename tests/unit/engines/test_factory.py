"""``arft.engines.factory``: one rule for how an engine samples a policy, whatever the role, and
the optional abilities engines declare by protocol."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from arft.config import JobSpec, OpenAIEngineSpec, TransformersEngineSpec
from arft.engines.base import (ConstrainsSampling, StreamsTokens, SyncsWeights, TakesGrammar, WritesWeights,
                               supports_constraints)
from arft.engines.factory import Policy, Sampling, build_engine, sampling
from arft.engines.scripted import ScriptedEngine
from arft.engines.transformers.engine import TransformersEngine
from arft.engines.transformers.snapshot import SnapshotEngine
from arft.models.loading import tiny_model
from arft.trainer.learner import wrap_policy


def job(lora: str = "auto", off_policy: int = 0) -> JobSpec:
    return JobSpec.model_validate({
        "method": {"type": "reinforcement", "reinforcement": {
            "grader": {"type": "string_check", "input": "a", "reference": "a", "operation": "eq"}}},
        "engine": {"lora": lora, "max_batch_size": 2}, "training": {"max_off_policy_steps": off_policy}})


@pytest.fixture(scope="module")
def lora_policy(tokenizer: Any) -> Any:
    torch.set_num_threads(1)
    j = job()
    return wrap_policy(tiny_model(tokenizer, seed=1), j.training, j.seed).eval()


def test_the_merged_lora_rule_is_the_same_for_every_role(lora_policy: Any, tokenizer: Any) -> None:
    spec = TransformersEngineSpec()
    plain = tiny_model(tokenizer, seed=1)
    for role in ("train", "replica", "serve", "expert_iteration"):
        assert sampling(job(), spec, lora_policy, role) is Sampling.MERGED  # float32 on the CPU: auto merges
        assert sampling(job(), spec.model_copy(update={"lora": "adapter"}), lora_policy, role) is Sampling.POLICY
        assert sampling(job(), spec, plain, role) is Sampling.POLICY  # nothing to merge
    # rollouts that run ahead of the update need their own copy, in this process's trainer only
    assert sampling(job(off_policy=1), spec.model_copy(update={"lora": "adapter"}), lora_policy,
                    "train") is Sampling.SNAPSHOT
    assert sampling(job(off_policy=1), spec.model_copy(update={"lora": "adapter"}), lora_policy,
                    "replica") is Sampling.POLICY


async def test_build_engine_by_role(lora_policy: Any, tokenizer: Any) -> None:
    merged = build_engine(job(), policy=Policy(lora_policy, tokenizer), role="train")
    adapter = build_engine(job("adapter"), policy=Policy(lora_policy, tokenizer), role="train")
    served = build_engine(None, policy=Policy(tiny_model(tokenizer), tokenizer), role="serve",
                          spec=TransformersEngineSpec(max_batch_size=3))
    # an openai job's warm start samples its model with the transformers engine's defaults
    openai_job = job().model_copy(update={"engine": OpenAIEngineSpec(type="openai")})
    warm = build_engine(openai_job, policy=Policy(tiny_model(tokenizer), tokenizer), role="expert_iteration")
    try:
        assert isinstance(merged, SnapshotEngine) and merged.merged_lora and isinstance(merged, SyncsWeights)
        assert merged.max_batch_size == 2  # the job's engine options
        assert type(adapter) is TransformersEngine and not isinstance(adapter, SyncsWeights)
        assert adapter.model is lora_policy  # samples the policy itself
        assert type(served) is TransformersEngine and served.max_batch_size == 3
        assert type(warm) is TransformersEngine and warm.max_batch_size == 32
    finally:
        for engine in (merged, adapter, served, warm):
            await engine.aclose()


async def test_abilities_are_declared_by_protocol(tiny_model: Any, tokenizer: Any) -> None:
    engine = TransformersEngine(tiny_model, tokenizer, max_batch_size=1)
    scripted = ScriptedEngine(tokenizer, lambda ids: "hi")
    try:
        assert isinstance(engine, TakesGrammar) and isinstance(engine, WritesWeights)
        assert isinstance(engine, StreamsTokens) and not isinstance(engine, SyncsWeights)
        assert supports_constraints(engine)
        assert isinstance(scripted, StreamsTokens) and not isinstance(scripted, ConstrainsSampling)
        assert not supports_constraints(scripted)
    finally:
        await engine.aclose()

    class Wrapper:  # a wrapper copies its inner engine's flag: the value decides, not the attribute
        supports_constraints = False

    assert isinstance(Wrapper(), ConstrainsSampling) and not supports_constraints(Wrapper())
