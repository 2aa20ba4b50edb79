"""TransformersEngine on the tiny real model: batching, sampling, logprobs and stop conditions."""

from __future__ import annotations

import asyncio
import math
import random
import threading
from typing import Any, AsyncIterator

import pytest
import torch

from arft.cpu import threads as cpu_threads
from arft.engines.base import EngineError, Generation, TokenEngine
from arft.engines.transformers.engine import TransformersEngine
from tests.specs import sampling

GREEDY = sampling(temperature=0.0, max_new_tokens=12)


def varied_model(tokenizer: Any, seed: int = 0) -> Any:
    """A tiny untied Llama with larger weights than the shared fixture.

    The ``tiny_model`` fixture (tied embeddings, small init) mostly repeats the last prompt
    token, which would hide position or mask bugs; this one's output depends on the context. Its
    heads are 32 wide, a size arft's decode-attention kernel runs (``arft.cpu.kernels``),
    so the engine's tests run it where it builds.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=False,
                      initializer_range=0.1, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    torch.set_num_threads(1)
    return varied_model(tokenizer)


@pytest.fixture
async def engine(model: Any, tokenizer: Any) -> AsyncIterator[TransformersEngine]:
    eng = TransformersEngine(model, tokenizer, max_batch_size=8)
    yield eng
    await eng.aclose()


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    """Random prompts of different lengths (random ids give varied continuations)."""
    rng = random.Random(seed)
    return [[rng.randrange(3, 49152) for _ in range(rng.randrange(3, 30))] for _ in range(n)]


def hf_greedy(model: Any, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def teacher_forced(model: Any, prompt: list[int], gen: Generation, temperature: float) -> list[float]:
    ids = torch.tensor([prompt + list(gen.token_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(gen.token_ids).unsqueeze(-1)).squeeze(-1).tolist()


async def test_is_a_token_engine(engine: TransformersEngine) -> None:
    assert isinstance(engine, TokenEngine)


async def test_tokens_and_logprobs_aligned(tiny_model: Any, tokenizer: Any) -> None:
    engine = TransformersEngine(tiny_model, tokenizer)
    gen = await engine.generate(prompts(1)[0], sampling(temperature=1.0, max_new_tokens=9, seed=1))
    await engine.aclose()
    assert len(gen.token_ids) == len(gen.logprobs) == 9
    assert gen.finish_reason == "length"
    assert all(math.isfinite(lp) and lp <= 0 for lp in gen.logprobs)
    assert gen.text == engine.tokenizer.decode(list(gen.token_ids), skip_special_tokens=False)


async def test_greedy_batched_equals_unbatched_and_hf(engine: TransformersEngine, model: Any) -> None:
    ps = prompts(5)
    batched = await asyncio.gather(*(engine.generate(p, GREEDY) for p in ps))
    assert engine.stats.prefill_batch_sizes[5] == 1  # all five went through one prefill
    for p, got in zip(ps, batched):
        alone = await engine.generate(p, GREEDY)
        assert got.token_ids == alone.token_ids
        assert list(got.token_ids) == hf_greedy(model, p, GREEDY.max_new_tokens)


async def test_logprobs_match_teacher_forcing(engine: TransformersEngine, model: Any) -> None:
    ps = prompts(4, seed=3)
    params = [sampling(temperature=t, top_p=p, top_k=k, max_new_tokens=10, seed=i)
              for i, (t, p, k) in enumerate([(1.0, 1.0, 0), (0.7, 0.9, 0), (1.3, 1.0, 50), (0.0, 1.0, 0)])]
    gens = await asyncio.gather(*(engine.generate(p, sp) for p, sp in zip(ps, params)))
    for p, sp, gen in zip(ps, params, gens):
        expected = teacher_forced(model, p, gen, sp.temperature or 1.0)
        assert gen.logprobs == pytest.approx(expected, abs=1e-3)


async def test_concurrent_requests_share_forward_passes(engine: TransformersEngine) -> None:
    ps = prompts(6, seed=7)
    assert len({len(p) for p in ps}) > 1  # different prompt lengths
    gens = await asyncio.gather(*(engine.generate(p, GREEDY) for p in ps))
    assert all(len(g.token_ids) == GREEDY.max_new_tokens for g in gens)
    assert engine.stats.max_rows == 6
    assert engine.stats.prefills == 1
    assert engine.stats.decode_steps == GREEDY.max_new_tokens - 1  # not one pass per request


async def test_decode_loop_has_a_thread_of_its_own_and_leaves_no_openmp_pool(
        engine: TransformersEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run of the decode loop releases the caller's OpenMP pool before and its own after
    (``arft.cpu.threads``: one pool alive), always on the same thread, not the event loop's."""
    calls: list[int] = []
    monkeypatch.setattr(cpu_threads, "release_pool", lambda: calls.append(threading.get_ident()) is None)
    for p in prompts(2, seed=3):
        await engine.generate(p, GREEDY)
    # a request answered, the loop may still be running (and serve the next request in the same
    # run): a call queued behind it on the engine's one thread returns once that run has ended
    await engine._thread.run(lambda: None)
    here = threading.get_ident()
    workers = {c for c in calls if c != here}
    assert len(workers) == 1  # one thread of its own, never the event loop's
    # every run released the caller's pool before it started (the runs may interleave: a call
    # queued behind a run releases the caller's pool before that run ends) and its own after
    assert calls.count(here) == len(calls) - calls.count(here) >= 2
    assert all(calls[:i + 1].count(here) >= (i + 1) / 2 for i in range(len(calls)))


async def test_finished_rows_leave_the_batch(engine: TransformersEngine) -> None:
    ps = prompts(3, seed=11)
    lengths = [2, 5, 9]
    gens = await asyncio.gather(*(engine.generate(p, sampling(temperature=0, max_new_tokens=n))
                                  for p, n in zip(ps, lengths)))
    assert [len(g.token_ids) for g in gens] == lengths
    assert {g.finish_reason for g in gens} == {"length"}
    # 3 rows until the first finishes, then 2, then 1 (never a dead row in the batch)
    assert engine.stats.decode_batch_sizes == {3: 1, 2: 3, 1: 4}


@pytest.mark.parametrize("running_len, late_len", [(25, 4), (4, 40)])
async def test_late_request_joins_running_batch(engine: TransformersEngine, model: Any,
                                                running_len: int, late_len: int) -> None:
    # Either cache may be the shorter one when they are merged: both get left-padded correctly.
    rng = random.Random(running_len)
    long_p = [rng.randrange(3, 49152) for _ in range(running_len)]
    short_p = [rng.randrange(3, 49152) for _ in range(late_len)]
    long_task = asyncio.create_task(engine.generate(long_p, sampling(temperature=0, max_new_tokens=60)))
    while engine.stats.decode_steps < 3:  # the long row is decoding
        await asyncio.sleep(0.001)
    short = await engine.generate(short_p, GREEDY)
    assert not long_task.done()  # the short one came back first
    long = await long_task
    assert engine.stats.max_rows == 2
    assert list(short.token_ids) == hf_greedy(model, short_p, GREEDY.max_new_tokens)
    assert list(long.token_ids) == hf_greedy(model, long_p, 60)


async def test_seed_reproducible_regardless_of_batch(engine: TransformersEngine) -> None:
    p, *others = prompts(4, seed=9)
    params = sampling(temperature=1.0, max_new_tokens=8, seed=123)
    alone = await engine.generate(p, params)
    together = await asyncio.gather(engine.generate(p, params),
                                    *(engine.generate(o, sampling(max_new_tokens=8)) for o in others))
    assert together[0].token_ids == alone.token_ids
    other_seed = await engine.generate(p, params.model_copy(update={"seed": 124}))
    assert other_seed.token_ids != alone.token_ids


async def test_top_k_one_is_greedy(engine: TransformersEngine) -> None:
    p = prompts(1, seed=2)[0]
    greedy = await engine.generate(p, GREEDY)
    top1 = await engine.generate(p, sampling(temperature=1.0, top_k=1, max_new_tokens=12))
    assert top1.token_ids == greedy.token_ids


async def test_stop_string_ends_row_and_keeps_tokens(engine: TransformersEngine, tokenizer: Any) -> None:
    p = prompts(1, seed=4)[0]
    params = sampling(temperature=1.0, max_new_tokens=20, seed=7)
    free = await engine.generate(p, params)
    stop = tokenizer.decode(list(free.token_ids[5:7]))  # text spanning two sampled tokens
    end = next(j for j in range(1, 21) if stop in tokenizer.decode(list(free.token_ids[:j])))
    stopped = await engine.generate(p, params.model_copy(update={"stop": ("never-there", stop)}))
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free.token_ids[:end]
    assert stopped.text.endswith(stop) or stop in stopped.text


async def test_stop_unless_followed_by(engine: TransformersEngine, tokenizer: Any) -> None:
    """A stop is cancelled when the continuation string follows it, kept (look-ahead dropped)
    when something else follows: how a turn keeps several tool calls (parallel calls)."""
    p = prompts(1, seed=4)[0]
    params = sampling(temperature=1.0, max_new_tokens=20, seed=7)
    free = await engine.generate(p, params)
    stop = tokenizer.decode(list(free.token_ids[5:7]))
    end = next(j for j in range(1, 21) if stop in tokenizer.decode(list(free.token_ids[:j])))
    after = tokenizer.decode(list(free.token_ids[end:])).lstrip()
    follows = after[:3]  # what the model really writes next: the stop must be cancelled
    assert follows
    go_on = await engine.generate(p, params.model_copy(update={"stop": (stop,),
                                                                "stop_unless_followed_by": (follows,)}))
    assert go_on.token_ids == free.token_ids and go_on.finish_reason == free.finish_reason
    other = await engine.generate(p, params.model_copy(update={
        "stop": (stop,), "stop_unless_followed_by": ("\u2603never-follows",)}))
    assert other.finish_reason == "stop" and other.token_ids == free.token_ids[:end]
    assert len(other.logprobs) == len(other.token_ids)


async def test_streamed_tokens_are_the_generation_and_never_a_dropped_look_ahead(
        engine: TransformersEngine, tokenizer: Any) -> None:
    """``on_tokens`` gets the tokens as they are sampled (many calls, in order, before the result);
    tokens sampled after a stop to look ahead are held back, and never streamed when dropped."""
    p = prompts(1, seed=4)[0]
    params = sampling(temperature=1.0, max_new_tokens=20, seed=7)
    free = await engine.generate(p, params)
    stop = tokenizer.decode(list(free.token_ids[5:7]))
    end = next(j for j in range(1, 21) if stop in tokenizer.decode(list(free.token_ids[:j])))
    follows = tokenizer.decode(list(free.token_ids[end:])).lstrip()[:3]
    cases = [params,  # no stop
             params.model_copy(update={"stop": (stop,), "stop_unless_followed_by": (follows,)}),
             params.model_copy(update={"stop": (stop,), "stop_unless_followed_by": ("\u2603never-follows",)})]
    for case in cases:
        chunks: list[tuple[int, ...]] = []
        gen = await engine.generate(p, case, on_tokens=chunks.append)
        assert [t for c in chunks for t in c] == list(gen.token_ids)
        assert len(chunks) > 1 and all(chunks)
    assert gen.finish_reason == "stop" and gen.token_ids == free.token_ids[:end]  # the look-ahead dropped
    assert engine.supports_streaming


@pytest.fixture(scope="module")
def eos_model(tokenizer: Any) -> Any:
    """A tiny model whose lm_head favours eos after a few tokens' worth of noise."""
    from arft.models.loading import tiny_model as build

    model = build(tokenizer, seed=1)
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    head.weight = model.lm_head.weight
    with torch.no_grad():
        head.bias.zero_()
        head.bias[tokenizer.eos_token_id] = 50.0
    model.lm_head = head
    return model


async def test_eos_finishes_and_is_kept(eos_model: Any, tokenizer: Any) -> None:
    eng = TransformersEngine(eos_model, tokenizer)
    try:
        gen = await eng.generate(prompts(1)[0], sampling(temperature=1.0, max_new_tokens=10))
    finally:
        await eng.aclose()
    assert gen.finish_reason == "eos"
    assert gen.token_ids == (tokenizer.eos_token_id,)
    assert gen.text == tokenizer.eos_token


async def test_cancelled_request_does_not_block_others(engine: TransformersEngine) -> None:
    a, b = prompts(2, seed=8)
    doomed = asyncio.create_task(engine.generate(a, sampling(temperature=0, max_new_tokens=200)))
    survivor = asyncio.create_task(engine.generate(b, GREEDY))
    while engine.stats.decode_steps < 2:
        await asyncio.sleep(0.001)
    doomed.cancel()
    gen = await survivor
    assert len(gen.token_ids) == GREEDY.max_new_tokens
    with pytest.raises(asyncio.CancelledError):
        await doomed
    before = engine.stats.decode_steps
    await asyncio.sleep(0.05)
    assert engine.stats.decode_steps - before <= 1  # the cancelled row stopped decoding


class Exploding(torch.nn.Module):
    """Wraps a model; its forward fails on demand (stands in for an OOM or a bad kernel)."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.generation_config = inner.generation_config
        self.armed = True

    def get_input_embeddings(self) -> Any:
        return self.inner.get_input_embeddings()

    def forward(self, cache: Any = None, **kwargs: Any) -> Any:
        if self.armed:
            raise RuntimeError("kernel exploded")
        return self.inner(cache=cache, **kwargs)


async def test_worker_error_reaches_every_waiter(tiny_model: Any, tokenizer: Any) -> None:
    model = Exploding(tiny_model)
    eng = TransformersEngine(model, tokenizer)
    try:
        results = await asyncio.gather(*(eng.generate(p, GREEDY) for p in prompts(3)), return_exceptions=True)
        assert all(isinstance(r, EngineError) and "kernel exploded" in str(r) for r in results)
        assert all(isinstance(r.__cause__, RuntimeError) for r in results)
        model.armed = False  # the engine keeps serving after a failed batch
        gen = await eng.generate(prompts(1)[0], GREEDY)
        assert len(gen.token_ids) == GREEDY.max_new_tokens
    finally:
        await eng.aclose()


async def test_bad_input_and_closed_engine(tiny_model: Any, tokenizer: Any) -> None:
    eng = TransformersEngine(tiny_model, tokenizer)
    with pytest.raises(ValueError, match="at least one prompt token"):
        await eng.generate([], GREEDY)
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        await eng.generate([1, 10**7], GREEDY)
    empty = await eng.generate([1, 2, 3], sampling(max_new_tokens=0))
    assert empty.token_ids == () and empty.finish_reason == "length"
    await eng.aclose()
    with pytest.raises(EngineError, match="closed"):
        await eng.generate([1, 2, 3], GREEDY)


async def test_model_updated_in_place_is_used(tokenizer: Any) -> None:
    model = varied_model(tokenizer, seed=2)
    eng = TransformersEngine(model, tokenizer)
    try:
        p = prompts(1, seed=6)[0]
        before = await eng.generate(p, GREEDY)
        with torch.no_grad():  # what a trainer step does: same object, new weights
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.1)
        after = await eng.generate(p, GREEDY)
        assert list(after.token_ids) == hf_greedy(model, p, GREEDY.max_new_tokens)
        assert after.token_ids != before.token_ids
    finally:
        await eng.aclose()


async def test_from_spec_loads_a_local_model_directory(tmp_path: Any, tokenizer: Any) -> None:
    from arft.config import OpenAIEngineSpec, TransformersEngineSpec

    varied_model(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    spec = TransformersEngineSpec(dtype="float32", device="cpu", max_batch_size=3)
    eng = TransformersEngine.from_spec(str(tmp_path), spec)
    try:
        assert eng.max_batch_size == 3 and eng.device.type == "cpu"
        gens = await asyncio.gather(*(eng.generate(p, GREEDY) for p in prompts(5)))
        assert all(len(g.token_ids) == GREEDY.max_new_tokens for g in gens)
        assert eng.stats.max_rows == 3  # never more rows than max_batch_size
    finally:
        await eng.aclose()
    with pytest.raises(ValueError, match="engine.type"):
        TransformersEngine.from_spec(str(tmp_path), OpenAIEngineSpec(type="openai"))


async def test_staggered_mixed_requests_match_hf(model: Any, tokenizer: Any) -> None:
    # Requests arrive while others decode, the batch is full at times, rows join and leave at
    # different steps: whatever the batch composition, each greedy result is HF's.
    eng = TransformersEngine(model, tokenizer, max_batch_size=4)
    rng = random.Random(1)
    ps = prompts(12, seed=12)
    lengths = [rng.randrange(1, 25) for _ in ps]
    tasks = []
    try:
        for p, n in zip(ps, lengths):
            tasks.append(asyncio.create_task(eng.generate(p, sampling(temperature=0, max_new_tokens=n))))
            for _ in range(rng.randrange(0, 4)):
                await asyncio.sleep(0.002)
        gens = await asyncio.gather(*tasks)
    finally:
        await eng.aclose()
    for p, n, gen in zip(ps, lengths, gens):
        assert list(gen.token_ids) == hf_greedy(model, p, n)
    assert eng.stats.max_rows <= 4
