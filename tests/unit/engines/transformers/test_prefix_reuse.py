"""KV reuse in TransformersEngine: the cached path gives the uncached path's tokens and logprobs.

Each test runs the same requests through an engine with the prefix store and one without
(``prefix_cache_mb=0``) on the same tiny float32 model, and checks what the store saved.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, AsyncIterator

import pytest
import torch

from arft.cpu import attention
from arft.engines.base import Generation, SamplingParams
from arft.engines.transformers.prefix_cache import PrefixCache
from arft.engines.transformers.engine import TransformersEngine
from tests.specs import sampling
from tests.unit.engines.transformers.test_engine import hf_greedy, varied_model

GREEDY = sampling(temperature=0.0, max_new_tokens=10)


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    torch.set_num_threads(1)
    return varied_model(tokenizer, seed=4)


@pytest.fixture
async def engines(model: Any, tokenizer: Any) -> AsyncIterator[tuple[TransformersEngine, TransformersEngine]]:
    cached = TransformersEngine(model, tokenizer, max_batch_size=8)
    plain = TransformersEngine(model, tokenizer, max_batch_size=8, prefix_cache_mb=0)
    yield cached, plain
    await cached.aclose()
    await plain.aclose()


def ids(n: int, rng: random.Random) -> list[int]:
    return [rng.randrange(3, 49152) for _ in range(n)]


async def three_turns(engine: TransformersEngine, starts: list[list[int]],
                      params: list[SamplingParams]) -> list[list[Generation]]:
    """Concurrent conversations: each turn's prompt is the last prompt, its completion and a
    'tool result' of a few tokens (the same for both engines)."""
    convs = [list(s) for s in starts]
    out: list[list[Generation]] = [[] for _ in starts]

    async def one(i: int) -> None:
        rng = random.Random(100 + i)
        for turn in range(3):
            gen = await engine.generate(convs[i], params[i].model_copy(
                update={"seed": None if params[i].seed is None else params[i].seed + turn}))
            out[i].append(gen)
            convs[i] += list(gen.token_ids) + ids(5 + turn, rng)

    await asyncio.gather(*(one(i) for i in range(len(starts))))
    return out


def assert_same(a: list[list[Generation]], b: list[list[Generation]]) -> None:
    for conv_a, conv_b in zip(a, b):
        for ga, gb in zip(conv_a, conv_b):
            assert ga.token_ids == gb.token_ids
            assert ga.logprobs == pytest.approx(gb.logprobs, abs=1e-4)


async def test_greedy_turns_reuse_the_cache_and_match_uncached(engines: Any, model: Any) -> None:
    cached, plain = engines
    rng = random.Random(1)
    starts = [ids(rng.randrange(8, 30), rng) for _ in range(4)]
    got = await three_turns(cached, starts, [GREEDY] * 4)
    assert_same(got, await three_turns(plain, starts, [GREEDY] * 4))
    # later turns ran only their new tokens: every earlier token came from the store
    assert cached.prefix_cache.stats.hits >= 8
    assert cached.stats.prefill_tokens < plain.stats.prefill_tokens / 2
    assert cached.stats.prompt_tokens == plain.stats.prompt_tokens
    turn2 = starts[0] + list(got[0][0].token_ids) + ids(5, random.Random(100))  # as three_turns
    assert list(got[0][1].token_ids) == hf_greedy(model, turn2, GREEDY.max_new_tokens)


async def test_seeded_sampling_matches_uncached(engines: Any) -> None:
    cached, plain = engines
    rng = random.Random(2)
    starts = [ids(rng.randrange(8, 30), rng) for _ in range(3)]
    params = [sampling(temperature=1.0, max_new_tokens=8, seed=10 * i) for i in range(3)]
    assert_same(await three_turns(cached, starts, params), await three_turns(plain, starts, params))
    assert cached.prefix_cache.stats.reused_tokens > 0


async def test_group_samples_run_their_prompt_once(engines: Any) -> None:
    cached, plain = engines
    prompt = ids(25, random.Random(3))
    params = [sampling(temperature=1.0, max_new_tokens=6, seed=s) for s in range(4)]
    got = await asyncio.gather(*(cached.generate(prompt, p) for p in params))
    want = await asyncio.gather(*(plain.generate(prompt, p) for p in params))
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)
    assert cached.stats.prefill_tokens == len(prompt)  # one distinct prompt, run once
    assert plain.stats.prefill_tokens == 4 * len(prompt)  # off: every prompt runs


async def test_shared_system_prefix_runs_once(engines: Any, model: Any) -> None:
    cached, plain = engines
    rng = random.Random(4)
    system = ids(40, rng)
    ps = [system + ids(rng.randrange(3, 9), rng) for _ in range(4)]
    got = await asyncio.gather(*(cached.generate(p, GREEDY) for p in ps))
    want = await asyncio.gather(*(plain.generate(p, GREEDY) for p in ps))
    for p, g, w in zip(ps, got, want):
        assert g.token_ids == w.token_ids
        assert list(g.token_ids) == hf_greedy(model, p, GREEDY.max_new_tokens)
    assert cached.stats.prefill_tokens == len(system) + sum(len(p) - len(system) for p in ps)
    assert cached.stats.prefills == 2  # the shared prefix, then the four suffixes together


async def test_decode_reads_a_shared_system_prompt_once(engines: Any, model: Any) -> None:
    # cascade attention: rows sharing a system prompt keep it in the same columns (rows that join
    # the running batch too) and decode steps read it once; same tokens as the uncached engine
    cached, plain = engines
    rng = random.Random(6)
    system = ids(40, rng)
    starts = [system + ids(rng.randrange(3, 15), rng) for _ in range(5)]
    params = [sampling(temperature=1.0, max_new_tokens=rng.randrange(4, 12), seed=i) for i in range(5)]
    got = await three_turns(cached, starts, params)
    assert_same(got, await three_turns(plain, starts, params))
    assert model.config._attn_implementation == attention.NAME  # arft's, which cascades the engine's calls
    assert cached.stats.cascade_steps > cached.stats.decode_steps / 2
    assert plain.stats.cascade_steps == 0
    off = TransformersEngine(model, cached.tokenizer, max_batch_size=8, cascade_attention=False)
    try:  # the switch: the same store and layout, every row reading its own copy
        assert_same(got, await three_turns(off, starts, params))
        assert off.stats.cascade_steps == 0 and off.stats.decode_steps > 0
    finally:
        await off.aclose()


async def test_stop_look_ahead_tokens_are_not_stored(engines: Any, tokenizer: Any) -> None:
    # A look-ahead after a stop string runs tokens that are then dropped from the completion:
    # the stored sequence must be the completion, not what the batch happened to compute.
    cached, plain = engines
    rng = random.Random(5)
    starts = [ids(12, rng) for _ in range(3)]
    stop = [tokenizer.decode([t]) for t in range(300, 340)]
    params = [sampling(temperature=1.0, max_new_tokens=12, seed=i, stop=tuple(stop),
                       stop_unless_followed_by=("<tool_call>",)) for i in range(3)]
    assert_same(await three_turns(cached, starts, params), await three_turns(plain, starts, params))


async def test_eviction_under_a_small_budget(model: Any, tokenizer: Any) -> None:
    # 2 layers x (K + V) x 2 kv heads x 16 dims x 4 bytes = 512 bytes a token: room for ~60.
    small = TransformersEngine(model, tokenizer, max_batch_size=8, prefix_cache_mb=30_000 / 2**20)
    plain = TransformersEngine(model, tokenizer, max_batch_size=8, prefix_cache_mb=0)
    try:
        rng = random.Random(6)
        starts = [ids(20, rng) for _ in range(4)]
        got = await three_turns(small, starts, [GREEDY] * 4)
        assert_same(got, await three_turns(plain, starts, [GREEDY] * 4))
        stats = small.prefix_cache.stats
        assert stats.evicted > 0
        assert stats.peak_bytes <= small.prefix_cache.budget_bytes
        assert small.prefix_cache.nbytes <= small.prefix_cache.budget_bytes
    finally:
        await small.aclose()
        await plain.aclose()


async def test_weights_changed_in_place_clear_the_store(tokenizer: Any) -> None:
    model = varied_model(tokenizer, seed=5)
    eng = TransformersEngine(model, tokenizer)
    try:
        p = ids(20, random.Random(7))
        first = await eng.generate(p, GREEDY)
        assert eng.prefix_cache.entries
        with torch.no_grad():  # a trainer step: same parameters, new values
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.1)
        turn2 = p + list(first.token_ids) + [11, 12, 13]
        got = await eng.generate(turn2, GREEDY)
        assert list(got.token_ids) == hf_greedy(model, turn2, GREEDY.max_new_tokens)
        assert eng.prefix_cache.stats.cleared == 1
        assert eng.prefix_cache.stats.hits == 0
    finally:
        await eng.aclose()


def kv(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.zeros(1, n, 2), torch.zeros(1, n, 2))]  # 16 bytes a token


def test_store_lookup_supersedes_and_evicts() -> None:
    store = PrefixCache(budget_bytes=16 * 10)
    assert store.insert([1, 2, 3], kv(3))
    assert store.lookup([1, 2, 3]) == (store.entries[0], 2)  # the last prompt token always runs
    assert store.lookup([9, 9]) == (None, 0)
    assert store.insert([1, 2, 3, 4, 5], kv(5))  # supersedes [1, 2, 3]
    assert [list(e.ids) for e in store.entries] == [[1, 2, 3, 4, 5]]
    assert not store.insert([1, 2, 3], kv(3))  # already covered
    assert store.insert([7, 8, 9, 10, 11], kv(5))  # 160 bytes: still within the budget
    assert store.lookup([1, 2, 3, 4, 5, 6])[1] == 5  # touches [1..5]: [7..11] is now the oldest
    assert store.insert([20, 21], kv(2))
    assert [list(e.ids) for e in store.entries] == [[1, 2, 3, 4, 5], [20, 21]]
    assert store.stats.evicted == 1 and store.nbytes == 16 * 7
    assert not store.insert(list(range(11)), kv(11))  # alone larger than the budget
    assert store.reusable([20, 21, 22]) == 2 and store.stats.hits == 2
    store.check_weights("v1")  # a new fingerprint clears
    assert store.entries == [] and store.stats.cleared == 1


def test_negative_budget_is_refused(model: Any, tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="prefix_cache_mb"):
        TransformersEngine(model, tokenizer, prefix_cache_mb=-1)
