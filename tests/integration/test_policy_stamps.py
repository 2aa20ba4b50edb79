"""Proof of the served weights on the transformers engines: a real short training run stamps every
rollout with the weights that sampled it (the doctor agrees, and a checkpoint hashes to its step's
stamp); a skipped sync stops the run at that very step; a tampered store fails the doctor."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openai
import pytest
import torch
from typer.testing import CliRunner

from arft.app.doctor.policy_checks import doctor_run
from arft.app.policy import StaleWeightsError, sync_engine
from arft.app.serve.fingerprint import checkpoint_stamp, stamp_of
from arft.app.serve.models import served_models
from arft.app.serve.server import build_app
from arft.app.train import train
from arft.cli.main import app as cli
from arft.config import TrainingSpec, load_job
from arft.engines.base import SamplingParams
from arft.engines.transformers.engine import TransformersEngine
from arft.engines.transformers.snapshot import SnapshotEngine
from arft.records import PolicyStamp
from arft.tracing.run_dir import RunDir
from arft.trainer.learner import Learner, wrap_policy
from tests.integration.test_train import tiny, write_job
from tests.servers import serve
from tests.training import LengthGrader

GREEDY = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=3, seed=1)


def short_job(tmp: Path) -> Any:
    job = load_job(write_job(tmp))
    return job.model_copy(update={"training": job.training.model_copy(update={"max_steps": 2})})


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """A real two-step run of the tiny model (LoRA, merged into the engine's copy at every sync)."""
    tmp = tmp_path_factory.mktemp("stamps")
    asyncio.run(train(short_job(tmp), tmp / "run", model=tiny(tokenizer), tokenizer=tokenizer, grader=LengthGrader()))
    return tmp / "run"


async def test_a_training_run_stamps_every_rollout_and_the_doctor_agrees(trained: Path, tmp_path: Path) -> None:
    shutil.copytree(trained, tmp_path / "run")  # the store is tampered with below
    with RunDir(tmp_path / "run").open_store() as store:
        rollouts = store.rollouts()
    train_rs = [r for r in rollouts if r.run_id == "train"]
    evals = [r for r in rollouts if r.run_id.startswith("train:eval-")]
    assert train_rs and evals and all(r.policy is not None for r in rollouts)
    # train rollouts of step k: the weights after step k-1; evals of step k: after step k
    assert {(r.step, r.policy.version) for r in train_rs if r.policy} == {(1, 0), (2, 1)}
    assert {(r.step, r.policy.version) for r in evals if r.policy} == {(0, 0), (2, 2)}
    hashes = {r.policy.version: r.policy.hash for r in rollouts if r.policy}
    assert len(set(hashes.values())) == 3  # every update changed the weights, and the stamps say so
    assert checkpoint_stamp(tmp_path / "run") == PolicyStamp(version=2, hash=hashes[2])
    assert doctor_run(tmp_path / "run").checks[0].verdict == "pass"
    out = CliRunner().invoke(cli, ["doctor", str(tmp_path / "run"), "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["checks"][0]["id"] == "run.policy"

    # a rollout of step 2 that says the base sampled it: the doctor fails the run and names it
    stale = train_rs[-1].model_copy(update={"trace_id": "trace_stale", "policy": PolicyStamp(version=0, hash="0" * 16)})
    with RunDir(tmp_path / "run").open_store() as store:
        store.add_rollout(stale)
    check = doctor_run(tmp_path / "run").checks[0]
    assert check.verdict == "fail"
    assert any("trace_stale" in d and "expected step 1's" in d for d in check.details)
    assert any("step 0's weights appear with 2 hashes" in d for d in check.details)
    assert CliRunner().invoke(cli, ["doctor", str(tmp_path / "run")]).exit_code == 1


async def test_a_skipped_sync_stops_the_run_at_that_step(tmp_path: Path, tokenizer: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    job = short_job(tmp_path)
    synced: list[int] = []
    real = SnapshotEngine.sync

    async def skip_step_1(self: SnapshotEngine, policy: Any, step: int) -> float:
        synced.append(step)
        return 0.0 if step == 1 else await real(self, policy, step)

    monkeypatch.setattr(SnapshotEngine, "sync", skip_step_1)
    with pytest.raises(StaleWeightsError, match=r"samples from weights \w{16} \(step 0\) but step 1 trained \w{16}"):
        await train(job, tmp_path / "run", model=tiny(tokenizer), tokenizer=tokenizer, grader=LengthGrader())
    assert synced == [0, 1]  # caught at the skipped sync itself: no rollout of step 2 was sampled
    with RunDir(tmp_path / "run").open_store() as store:
        assert {r.step for r in store.rollouts("train")} == {1}


async def test_arft_serve_names_the_checkpoint_it_loaded(trained: Path, tokenizer: Any) -> None:
    models = served_models(str(trained), model=tiny(tokenizer), tokenizer=tokenizer)
    tuned, base = (stamp_of(m.engine) for m in models)
    assert tuned == checkpoint_stamp(trained) and tuned is not None and tuned.version == 2
    assert base is not None and base.version == 0 and base.hash != tuned.hash
    try:
        with serve(build_app(models)) as url:
            c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
            ask = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0}
            raw = c.chat.completions.with_raw_response.create(model="run", **ask)  # type: ignore[call-overload]
            assert raw.headers["x-arft-policy"] == f"step=2; hash={tuned.hash}"
            assert raw.parse().system_fingerprint == f"arft-2-{tuned.hash}"
            chunks = list(c.chat.completions.create(model="run", stream=True, **ask))  # type: ignore[call-overload]
            assert chunks and {ch.system_fingerprint for ch in chunks} == {f"arft-2-{tuned.hash}"}
            plain = c.chat.completions.create(model="smollm2-135m-instruct", **ask)  # type: ignore[call-overload]
            assert plain.system_fingerprint == f"arft-0-{base.hash}"
    finally:
        for m in models:
            await m.engine.aclose()


def nudge(policy: Any) -> None:
    """An update: every trainable weight moves."""
    with torch.no_grad():
        for p in policy.parameters():
            if p.requires_grad:
                p.add_(0.01)


@pytest.mark.parametrize("merge", [False, True])
async def test_a_snapshot_engine_is_checked_after_every_sync(tokenizer: Any, merge: bool) -> None:
    spec = TrainingSpec(lora={"r": 4, "alpha": 8})
    policy = wrap_policy(tiny(tokenizer), spec, 0)
    learner = Learner(policy, spec, 1e-3, 2, 1.0, tokenizer.pad_token_id or 0)
    engine = SnapshotEngine.of(policy, tokenizer, merge_lora=merge, max_batch_size=2)
    s: Any = SimpleNamespace(run=SimpleNamespace(engine=engine), learner=learner)
    try:
        await sync_engine(s, 0)
        first = engine.policy
        assert first is not None and first.version == 0
        assert (await engine.generate([1, 2, 3], GREEDY)).policy == first
        nudge(policy)
        await sync_engine(s, 1)
        assert engine.policy is not None and engine.policy.version == 1 and engine.policy.hash != first.hash
        nudge(policy)
        engine.sync = lambda policy, step: _no_sync()  # type: ignore[method-assign]
        with pytest.raises(StaleWeightsError, match="step 2 trained"):
            await sync_engine(s, 2)
    finally:
        await engine.aclose()


async def _no_sync() -> float:
    return 0.0


async def test_an_engine_sharing_the_policy_is_stamped_and_never_stale(tokenizer: Any) -> None:
    spec = TrainingSpec(lora={"r": 4, "alpha": 8})
    policy = wrap_policy(tiny(tokenizer), spec, 0)
    learner = Learner(policy, spec, 1e-3, 2, 1.0, tokenizer.pad_token_id or 0)
    engine = TransformersEngine(policy, tokenizer, max_batch_size=2)
    s: Any = SimpleNamespace(run=SimpleNamespace(engine=engine), learner=learner)
    try:
        for step in (0, 1):
            nudge(policy)
            assert set(await sync_engine(s, step)) == {"time/weight_check_s"}  # nothing to sync
            assert (await engine.generate([1, 2, 3], GREEDY)).policy == PolicyStamp(
                version=step, hash=learner.weights_hash())
    finally:
        await engine.aclose()
