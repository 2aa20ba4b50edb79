"""The fused decode step gives Hugging Face's logits (cascade and plain attention, padded rows, after
a weight changes), is taken only for models it reproduces, and the engine samples the same
tokens with it as without it."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
import torch

from arft.cpu import packed_linear
from arft.cpu import kernels as cpu_kernels
from arft.cpu.cascade import MIN_SHARED
from arft.engines.transformers.fused_pass import FusedPass, supported
from arft.engines.transformers.kv_batch import growing_layer
from arft.engines.transformers.engine import TransformersEngine
from arft.models.hf_model import cache_keyword
from tests.specs import sampling
from tests.unit.engines.transformers.test_engine import varied_model

pytestmark = pytest.mark.skipif(not packed_linear.available(), reason="torch built without oneDNN")


def prefilled(model: Any, shared: int) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """A cache holding 3 prompts (the first ``shared`` tokens the same in every row; with
    ``shared=0``, left-padded rows of different lengths), the next token ids and their positions."""
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(shared)
    ids = torch.randint(300, 900, (3, 30), generator=gen)
    mask = torch.ones(3, 30, dtype=torch.long)
    if shared:
        ids[:, :shared] = ids[0, :shared]
    else:
        mask[1, :7] = mask[2, :19] = 0  # left padding
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    cache.layer_class_to_replicate = growing_layer()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                    **{cache_keyword(model): cache})
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    return (cache, torch.cat([mask, mask.new_ones(3, 1)], dim=1)), nxt, positions[:, -1:] + 1


def hf_step(model: Any, cache: Any, mask: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Hugging Face's own decode step (``model`` on stock sdpa, no keyword: no arft attention)."""
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                    **{cache_keyword(model): cache})
    return out.logits[:, -1]


def adapted(model: Any, seed: int = 0, target_modules: Any = "all-linear", **config: Any) -> Any:
    """``model`` under a peft LoRA adapter (every linear layer by default), its B moved off zero
    (peft starts it at zero, which would hide the adapter's products), in eval mode as the engine
    runs it."""
    from peft import LoraConfig, get_peft_model

    policy = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=target_modules, **config))
    torch.manual_seed(seed)
    for name, p in policy.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.1)
    return policy.eval()


ADAPTERS = [None, "all-linear", ["q_proj", "v_proj", "up_proj"]]
"""No adapter, one on every layer, and on some layers of a fused group only (peft's default for
Llama adapts q and v): the plain layers of a group get a zero block."""


KERNELS = [None] + ([cpu_kernels.load()] if cpu_kernels.load() is not None else [])
"""PyTorch's kernels, and arft's (``arft.cpu.kernels``) where it builds."""


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: "arft-kernel" if k else "torch")
@pytest.mark.parametrize("lora", ADAPTERS)
@pytest.mark.parametrize("shared", [0, MIN_SHARED + 4])
def test_logits_equal_hugging_faces(tokenizer: Any, shared: int, lora: Any, kernel: Any) -> None:
    model = varied_model(tokenizer, seed=1)
    if lora:  # the policy the engine samples through (engine.lora: adapter)
        model = adapted(model, target_modules=lora)
    reference = copy.deepcopy(model)
    reference.set_attn_implementation("sdpa")
    TransformersEngine(model, tokenizer)  # the engine's model: cascade attention, packed linears
    (cache, mask), ids, positions = prefilled(reference, shared)
    decoder = FusedPass.of(model, kernel)
    assert decoder is not None and decoder.kernel is kernel
    for step in range(3):  # the caches grow alike, step after step
        mine = copy.deepcopy(cache)
        want = hf_step(reference, cache, mask, ids, positions)
        with torch.no_grad():
            got = decoder.logits(ids, positions, mask, mine, shared)
        assert torch.allclose(got, want, atol=1e-4), (step, (got - want).abs().max())
        for a, b in zip(mine.layers, cache.layers):
            assert torch.allclose(a.keys, b.keys, atol=1e-5) and torch.allclose(a.values, b.values, atol=1e-5)
        cache = mine
        ids, positions = want.argmax(-1, keepdim=True), positions + 1
        mask = torch.cat([mask, mask.new_ones(3, 1)], dim=1)


@pytest.mark.parametrize(("cached", "width"), [(True, 6), (False, 6), (True, packed_linear.MAX_ROWS // 2)])
@pytest.mark.parametrize("lora", ADAPTERS)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: "arft-kernel" if k else "torch")
def test_prefill_logits_equal_hugging_faces(tokenizer: Any, cached: bool, width: int, lora: Any, kernel: Any) -> None:
    # a prefill of `width` new tokens per row (one row's new tokens left-padded to 2), after a
    # cached history or into an empty cache (padding positions before any real column); the
    # padding is not run (arft.engines.transformers.ragged); a long one (more than MAX_ROWS real tokens) runs
    # F.linear instead of the packed products
    model = varied_model(tokenizer, seed=6)
    if lora:
        model = adapted(model, target_modules=lora)
    reference = copy.deepcopy(model)
    packed_linear.enable(model)
    decoder = FusedPass.of(model, kernel)
    assert decoder is not None
    if cached:
        (cache, mask), _, positions = prefilled(reference, 0)
        mask = mask[:, :-1]
        start = positions
    else:
        from transformers import DynamicCache

        cache, mask, start = DynamicCache(), torch.zeros(3, 0, dtype=torch.long), torch.zeros(3, 1, dtype=torch.long)
        cache.layer_class_to_replicate = growing_layer()
    ids = torch.randint(300, 900, (3, width), generator=torch.Generator().manual_seed(7))
    new = torch.ones(3, width, dtype=torch.long)
    new[1, :width - 2] = 0
    positions = start + (new.cumsum(-1) - 1).clamp(min=0)
    mask = torch.cat([mask, new], dim=1)
    mine = copy.deepcopy(cache)
    want = hf_step(reference, cache, mask, ids, positions)
    with torch.no_grad():
        got = decoder.logits(ids, positions, mask, mine)
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    real = mask.bool()
    for a, b in zip(mine.layers, cache.layers):  # the real columns of the caches agree
        assert torch.allclose(a.keys.transpose(1, 2)[real], b.keys.transpose(1, 2)[real], atol=1e-5)


def decoding(model: Any) -> tuple[Any, torch.Tensor, torch.Tensor, FusedPass]:
    """``model`` with packed linears, a prefilled cache (``prefilled``) and its fused decoder."""
    packed_linear.enable(model)
    state = prefilled(model, 0)
    decoder = FusedPass.of(model)
    assert decoder is not None
    return (*state, decoder)


def test_follows_a_weight_written_in_place(tokenizer: Any) -> None:
    model = varied_model(tokenizer, seed=2)
    (cache, mask), ids, positions, decoder = decoding(model)
    with torch.no_grad():
        before = decoder.logits(ids, positions, mask, copy.deepcopy(cache))
        for layer in model.model.layers:  # what an optimizer step does: the version moves
            layer.self_attn.k_proj.weight.mul_(1.5)
            layer.mlp.up_proj.weight.add_(0.05)
        after = decoder.logits(ids, positions, mask, copy.deepcopy(cache))
    want = hf_step(model, cache, mask, ids, positions)
    assert not torch.allclose(before, after, atol=1e-3)
    assert torch.allclose(after, want, atol=1e-4)


def test_follows_an_adapter_trained_in_place(tokenizer: Any) -> None:
    # the engine sampling through the policy the trainer updates: the adapters' packs are redone
    policy = adapted(varied_model(tokenizer, seed=2), target_modules=["q_proj", "v_proj", "down_proj"])
    (cache, mask), ids, positions, decoder = decoding(policy)
    with torch.no_grad():
        before = decoder.logits(ids, positions, mask, copy.deepcopy(cache))
        for name, p in policy.named_parameters():
            if "lora_" in name:  # an optimizer step on the adapter: the version moves
                p.add_(0.05 * torch.randn_like(p))
        after = decoder.logits(ids, positions, mask, copy.deepcopy(cache))
        for layer in policy.base_model.model.model.layers:  # a new scale: the B pack is redone too
            layer.self_attn.q_proj.scaling["default"] *= 3
        scaled = decoder.logits(ids, positions, mask, copy.deepcopy(cache))
    want = hf_step(policy, cache, mask, ids, positions)
    assert not torch.allclose(before, after, atol=1e-3) and not torch.allclose(after, scaled, atol=1e-3)
    assert torch.allclose(scaled, want, atol=1e-4)


@pytest.mark.parametrize("case", ["llama", "peft", "dora", "dropout", "bias", "gelu", "not llama"])
def test_takes_only_models_it_reproduces(tokenizer: Any, case: str) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    small = {"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
             "num_attention_heads": 4, "num_key_value_heads": 2}
    if case == "not llama":
        model = Qwen2ForCausalLM(Qwen2Config(**small))
    else:
        extra = {"bias": {"attention_bias": True}, "gelu": {"hidden_act": "gelu"}}.get(case, {})
        model = LlamaForCausalLM(LlamaConfig(**small, **extra))
    if case in ("peft", "dora", "dropout"):
        extra = {"dora": {"use_dora": True}, "dropout": {"lora_dropout": 0.1}}.get(case, {})
        model = adapted(model, **extra)
    if case == "dropout":
        model.train()  # dropout that runs: not reproduced
    assert supported(model) is (case in ("llama", "peft"))
    assert (FusedPass.of(model) is not None) is (case in ("llama", "peft"))
    if case == "dropout":
        model.eval()
        decoder = FusedPass.of(model)  # dropout in eval mode does nothing
        assert decoder is not None and decoder.runs_now()
        model.train()  # put back in training: the pass goes to Hugging Face's forward
        assert not decoder.runs_now()


async def same_samples(fused: Any, plain: Any, prompts: list[list[int]]) -> None:
    """Both engines sample the same tokens, greedy and seeded, with the same logprobs."""
    for p in (sampling(temperature=0.0, max_new_tokens=8), sampling(temperature=1.0, max_new_tokens=8, seed=3)):
        got = await asyncio.gather(*(fused.generate(q, p) for q in prompts))
        want = await asyncio.gather(*(plain.generate(q, p) for q in prompts))
        for g, w in zip(got, want):
            assert g.token_ids == w.token_ids
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)


async def test_engine_samples_the_same_tokens_either_way(tokenizer: Any) -> None:
    torch.set_num_threads(1)
    model = varied_model(tokenizer, seed=3)
    fused = TransformersEngine(model, tokenizer, max_batch_size=4)
    plain = TransformersEngine(copy.deepcopy(model), tokenizer, max_batch_size=4, fused_pass=False)
    assert fused._pass.fused is not None and plain._pass.fused is None
    system = list(range(300, 300 + MIN_SHARED + 8))  # shared by every row: cascade attention
    prompts = [system + [400 + i] * (i + 1) for i in range(3)]
    try:
        await same_samples(fused, plain, prompts)
        assert fused.stats.cascade_steps > 0 and fused.stats.decode_steps > 0
    finally:
        await fused.aclose()
        await plain.aclose()


async def test_an_adapter_injected_later_turns_the_fused_step_off(tokenizer: Any) -> None:
    from peft import LoraConfig, inject_adapter_in_model

    model = varied_model(tokenizer, seed=5)
    engine = TransformersEngine(model, tokenizer, max_batch_size=2)
    try:
        assert engine._pass.fused is not None
        inject_adapter_in_model(LoraConfig(r=2, target_modules=["q_proj", "v_proj"], use_dora=True), model)
        engine.clear_prefix_cache()  # what the docs ask for after an adapter change
        assert engine._pass.fused is None  # DoRA: Hugging Face's forward
        gen = await engine.generate(list(range(300, 320)), sampling(temperature=0.0, max_new_tokens=4))
        assert len(gen.token_ids) == 4
    finally:
        await engine.aclose()


async def test_engine_samples_through_an_adapter_the_same_tokens_either_way(tokenizer: Any) -> None:
    torch.set_num_threads(1)
    policy = adapted(varied_model(tokenizer, seed=3), seed=1)
    fused = TransformersEngine(policy, tokenizer, max_batch_size=4)
    plain = TransformersEngine(copy.deepcopy(policy), tokenizer, max_batch_size=4, fused_pass=False)
    base = TransformersEngine(varied_model(tokenizer, seed=3), tokenizer, max_batch_size=4)  # same weights
    assert fused._pass.fused is not None and plain._pass.fused is None
    system = list(range(300, 300 + MIN_SHARED + 8))
    prompts = [system + [400 + i] * (i + 1) for i in range(3)]
    try:
        await same_samples(fused, plain, prompts)
        # adapters switched off (the KL reference's pass, on another thread): Hugging Face's forward
        # runs it, and gives the base model's tokens
        with policy.disable_adapter():
            assert not fused._pass.fused.runs_now()
            fused.prefix_cache.clear()  # its keys and values were made with the adapter on
            off = await fused.generate(prompts[0], sampling(temperature=0.0, max_new_tokens=8))
        want_off = await base.generate(prompts[0], sampling(temperature=0.0, max_new_tokens=8))
        assert off.token_ids == want_off.token_ids
    finally:
        await fused.aclose()
        await plain.aclose()
        await base.aclose()


def test_a_prefill_row_without_new_tokens_keeps_hugging_faces_forward(tokenizer: Any) -> None:
    # the ragged prefill needs a real new token in every row; a pass without one is the model's own
    from transformers import DynamicCache

    from arft.engines.transformers.kv_batch import PassInputs
    from arft.engines.transformers.model_pass import ModelPass

    model = varied_model(tokenizer, seed=8)
    reference = copy.deepcopy(model)
    step = ModelPass(model, on_cpu=True)
    assert step.fused is not None
    ids = torch.randint(300, 900, (2, 4), generator=torch.Generator().manual_seed(9))
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        got = step(ids, positions, mask, DynamicCache())
        # beside a decode step, such a prefill runs in a pass of its own, and says so
        decode = PassInputs(ids[:1, :1], torch.zeros((1, 1), dtype=torch.long),
                            torch.ones((1, 1), dtype=torch.long), DynamicCache())
        _, filled, one_pass = step.step_and_prefill(decode, PassInputs(ids, positions, mask, DynamicCache()))
    want = hf_step(reference, DynamicCache(), mask, ids, positions)
    assert torch.allclose(got[0], want[0], atol=1e-4)
    assert one_pass is False and torch.allclose(filled[0], want[0], atol=1e-4)


async def test_a_decode_step_in_a_prefills_pass_samples_the_same_tokens(tokenizer: Any) -> None:
    # requests that arrive while others decode are prefilled in the same pass as their decode step
    torch.set_num_threads(1)
    model = varied_model(tokenizer, seed=4)
    mixed = TransformersEngine(model, tokenizer, max_batch_size=4)
    plain = TransformersEngine(copy.deepcopy(model), tokenizer, max_batch_size=4, fused_pass=False)
    system = list(range(300, 300 + MIN_SHARED + 8))
    prompts = [system + [400 + i] * (3 * i + 1) for i in range(3)]
    params = sampling(temperature=1.0, max_new_tokens=12, seed=5)

    async def staggered(engine: TransformersEngine) -> list[Any]:
        long = params.model_copy(update={"max_new_tokens": 200})  # still decoding when the others come
        first = asyncio.ensure_future(engine.generate(prompts[0], long))
        while engine.stats.decode_steps < 2:
            await asyncio.sleep(0.001)
        rest = await asyncio.gather(*(engine.generate(p, params) for p in prompts[1:]))
        return [await first, *rest]

    try:
        got, want = await staggered(mixed), await staggered(plain)
        for g, w in zip(got, want):
            assert g.token_ids == w.token_ids
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)
        assert mixed.stats.steps_in_prefills >= 1 and plain.stats.steps_in_prefills == 0
    finally:
        await mixed.aclose()
        await plain.aclose()
