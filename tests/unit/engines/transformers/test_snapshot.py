"""SnapshotEngine (async rollouts): it samples from its own copy of the policy, which follows the
policy only at ``sync``, and a sync lands between forward passes while requests run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from arft.config import TrainingSpec
from arft.engines.base import Generation
from arft.engines.transformers.snapshot import SnapshotEngine
from arft.engines.transformers.engine import TransformersEngine
from arft.trainer.learner import wrap_policy
from tests.specs import sampling
from tests.unit.engines.transformers.test_engine import varied_model

GREEDY = sampling(temperature=0.0, max_new_tokens=8)
PROMPTS = [[1, 2, 3, 4, 5, 6], [9, 8, 7], [400, 500, 600, 700]]


def policy(tokenizer: Any, finetune: str = "lora") -> Any:
    torch.set_num_threads(1)
    spec = TrainingSpec(finetune=finetune, lora={"r": 4, "alpha": 8, "dropout": 0.3})
    return wrap_policy(varied_model(tokenizer, seed=2), spec, seed=0).eval()


def train_a_little(p: Any) -> None:
    """Stand-in for an optimizer step: every trainable weight moves."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for param in p.parameters():
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=g) * 0.3)


async def greedy(engine: TransformersEngine) -> list[Generation]:
    return list(await asyncio.gather(*(engine.generate(p, GREEDY) for p in PROMPTS)))


def same(a: list[Generation], b: list[Generation], tol: float = 1e-5) -> bool:
    return all(x.token_ids == y.token_ids and x.logprobs == pytest.approx(y.logprobs, abs=tol)
               for x, y in zip(a, b))


MERGED = 1e-4
"""x @ (W + s BA) and x @ W + s (x @ A) @ B round differently: same tokens, logprobs within this."""


@pytest.mark.parametrize("finetune", ["lora", "full"])
async def test_the_copy_follows_the_policy_only_at_sync(tokenizer: Any, finetune: str) -> None:
    p = policy(tokenizer, finetune)
    engine = SnapshotEngine.of(p, tokenizer, max_batch_size=4)
    assert engine.model is not p and not any(w.requires_grad for w in engine.model.parameters())
    before = await greedy(engine)
    train_a_little(p)
    assert same(await greedy(engine), before)  # the policy changed, the engine's copy did not
    seconds = await engine.sync(p, 1)
    assert seconds >= 0
    after = await greedy(engine)
    reference = TransformersEngine(p, tokenizer, max_batch_size=4)
    assert same(after, await greedy(reference))  # now it samples exactly from the policy
    assert not same(after, before)
    assert engine.model.training is False  # dropout off: the copy stays in eval mode
    await engine.aclose()
    await reference.aclose()


async def test_a_sync_lands_between_forward_passes_while_requests_run(tokenizer: Any) -> None:
    p = policy(tokenizer)
    engine = SnapshotEngine.of(p, tokenizer, max_batch_size=8)
    await greedy(engine)  # fills the prefix store
    stored = len(engine.prefix_cache.entries)
    assert stored > 0
    long = sampling(temperature=0.0, max_new_tokens=400)
    running = [asyncio.ensure_future(engine.generate(pr, long)) for pr in PROMPTS]
    while engine.stats.decode_steps < 5:  # generation under way
        await asyncio.sleep(0.001)
    train_a_little(p)
    await engine.sync(p, 1)
    assert not all(r.done() for r in running)  # it did not wait for the requests to finish
    for gen in await asyncio.gather(*running):
        assert len(gen.token_ids) == len(gen.logprobs) > 5
    after = await greedy(engine)  # prefixes stored before the sync are not reused after it
    reference = TransformersEngine(p, tokenizer, max_batch_size=4, prefix_cache_mb=0)
    assert same(after, await greedy(reference))
    await engine.aclose()
    await reference.aclose()


async def test_a_merged_copy_samples_what_the_adapter_does_and_follows_each_sync(tokenizer: Any) -> None:
    from arft.engines.transformers.snapshot import _lora_layers

    p = policy(tokenizer)
    base = {n: layer.get_base_layer().weight.clone() for n, layer in _lora_layers(p).items()}
    engine = SnapshotEngine.of(p, tokenizer, merge_lora=True, max_batch_size=4)
    assert engine.merged_lora and not _lora_layers(engine.model)  # a plain model: one matmul per linear layer
    reference = TransformersEngine(p, tokenizer, max_batch_size=4)
    assert same(await greedy(engine), await greedy(reference), MERGED)
    for step in (1, 2, 3):  # merged again from the frozen base each time: nothing accumulates
        train_a_little(p)
        before = await greedy(engine)
        await engine.sync(p, step)
        after = await greedy(engine)
        assert same(after, await greedy(reference), MERGED) and not same(after, before, MERGED)
    layers = dict(engine.model.named_modules())
    for name, layer in _lora_layers(p).items():
        assert torch.equal(layer.get_base_layer().weight, base[name])  # the policy's base untouched
        want = base[name] + layer.get_delta_weight("default")
        assert torch.allclose(layers[name].weight, want, atol=1e-6)
    await engine.aclose()
    await reference.aclose()


def test_which_policies_auto_merges_and_what_cannot_be_merged(tokenizer: Any) -> None:
    from arft.engines.transformers.snapshot import merges_lora

    lora, full = policy(tokenizer), policy(tokenizer, "full")
    assert merges_lora("auto", lora) and merges_lora("merged", lora)
    assert not merges_lora("adapter", lora)
    assert not merges_lora("auto", full) and not merges_lora("merged", full)  # nothing to merge
    assert not merges_lora("auto", policy(tokenizer).to(torch.bfloat16))  # bf16 would round the deltas away
    with pytest.raises(ValueError, match="no LoRA layers to merge"):
        SnapshotEngine.of(full, tokenizer, merge_lora=True)
    lora.base_model.model.model.norm.weight.requires_grad_(True)  # trained, but not an adapter
    with pytest.raises(ValueError, match="set engine.lora to adapter"):
        SnapshotEngine.of(lora, tokenizer, merge_lora=True)
