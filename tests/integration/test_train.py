"""Training on a tiny model built from a config: steps change weights, resume is exact, the merged
model loads in plain transformers."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch

from arft.config import load_job
from arft.trainer.merge import merge_run
from arft.app.train import train
from arft.trainer.learner import wrap_policy
from arft.tracing.export import export_rollouts
from tests.training import LengthGrader, TraceGrader, write_datasets


def write_job(tmp: Path) -> Path:
    write_datasets(tmp, 6, 2)
    job = {"model": "smollm2-135m-instruct", "training_file": "train.jsonl", "validation_file": "val.jsonl",
           "seed": 3, "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "string_check", "name": "unused", "input": "x", "reference": "x",
                          "operation": "eq"},
               "hyperparameters": {"batch_size": 2, "eval_interval": 2, "eval_samples": 2}}},
           "sampling": {"max_new_tokens": 8},
           "rollout": {"max_turns": 2, "max_tokens": 512, "concurrency": 4},
           "training": {"group_size": 3, "max_steps": 3, "checkpoint_every": 1, "learning_rate": 0.05,
                        "micro_batch_size": 4, "bf16_autocast": False, "lora": {"r": 4, "alpha": 8}}}
    (tmp / "job.json").write_text(json.dumps(job))
    return tmp / "job.json"


def tiny(tokenizer: Any) -> Any:
    from arft.models.loading import tiny_model

    torch.set_num_threads(1)
    return tiny_model(tokenizer, seed=5)


def adapter(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return load_file(str(run_dir / "checkpoints" / latest / "trainable.safetensors"))


async def test_resume_equals_uninterrupted_and_merge_loads(tmp_path: Path, tokenizer: Any) -> None:
    job = load_job(write_job(tmp_path))
    # One request per forward pass: batching composition then cannot change the floating point.
    kw = dict(tokenizer=tokenizer, grader=LengthGrader(), max_batch_size=1)
    straight = await train(job, tmp_path / "a", model=tiny(tokenizer), **kw)
    assert straight.steps == 3 and len(straight.history) == 3
    assert set(straight.evals) == {0, 2, 3}
    assert any((tmp_path / "a" / "tensorboard").iterdir())  # TensorBoard events when installed
    lines = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 6  # 3 steps + evals at 0, 2, 3
    for m in straight.history:
        assert m["update/tokens"] > 0 and m["update/grad_norm"] > 0
        assert all(v == v for k, v in m.items() if k.startswith("update/"))  # finite, no NaN

    short = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": 1})})
    await train(short, tmp_path / "b", model=tiny(tokenizer), **kw)
    resumed = await train(job, tmp_path / "b", resume=True, model=tiny(tokenizer), **kw)
    assert [m["step"] for m in resumed.history] == [2, 3]
    assert set(resumed.evals) == {0, 1, 2, 3}  # evals made before the interruption are kept
    a, b = adapter(tmp_path / "a"), adapter(tmp_path / "b")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.history[-1]["train/reward_mean"] == straight.history[-1]["train/reward_mean"]
    initial = tiny(tokenizer)
    from arft.trainer.learner import wrap_policy

    fresh = wrap_policy(initial, job.training, job.seed)
    from peft import get_peft_model_state_dict

    init = get_peft_model_state_dict(fresh)
    assert any(not torch.equal(init[k], a[k]) for k in a)  # training changed the adapter

    out = merge_run(tmp_path / "a", tmp_path / "merged", model=tiny(tokenizer), tokenizer=tokenizer)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    gen = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] == ids["input_ids"].shape[1] + 4


async def test_eval_tasks_limit_evals_and_metrics_reach_mlflow(tmp_path: Path, tokenizer: Any) -> None:
    job = load_job(write_job(tmp_path))
    from arft.config import LoggingSpec, MlflowSpec

    job = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": 1,
                                                                              "eval_tasks": 1}),
                                 "logging": LoggingSpec(tensorboard=False, mlflow=MlflowSpec())})
    result = await train(job, tmp_path / "run", model=tiny(tokenizer), tokenizer=tokenizer,
                         grader=LengthGrader(), max_batch_size=4)
    # one validation task (of two) x eval_samples 2, at the baseline and after the step
    assert set(result.evals) == {0, 1}
    assert all(s.n_rollouts == 2 for s in result.evals.values())
    from arft.tracing.store import RunStore

    with RunStore(tmp_path / "run" / "arft.sqlite") as store:  # every rollout knows its step
        steps = sorted((r.run_id, r.step) for r in store.rollouts())
        exported = io.StringIO()
        export_rollouts(store, exported)
    # batch 2 x group 3 train rollouts at step 1; 2 eval rollouts at steps 0 and 1
    assert steps == [("train", 1)] * 6 + [("train:eval-000000", 0)] * 2 + [("train:eval-000001", 1)] * 2
    rows = [json.loads(line) for line in exported.getvalue().splitlines()]  # arft export says the same
    assert sorted((r["split"], r["step"], r["sample"]) for r in rows) == sorted(
        [("train", 1, k) for k in (0, 1, 2)] * 2 + [("validation", s, k) for s in (0, 1) for k in (0, 1)])
    from mlflow.tracking import MlflowClient  # the job asked for MLflow: the metrics are there

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'run' / 'mlflow.db'}")
    run_id = (tmp_path / "run" / "mlflow_run_id.txt").read_text().strip()
    assert [m.step for m in client.get_metric_history(run_id, "eval/reward_mean")] == [0, 1]
    assert client.get_metric_history(run_id, "update/tokens")[0].value > 0


async def test_async_rollouts_generate_the_next_step_during_the_update(tmp_path: Path, tokenizer: Any) -> None:
    from arft.app.session import Hooks
    from arft.tracing.store import RunStore

    job = load_job(write_job(tmp_path))
    job = job.model_copy(update={"training": job.training.model_copy(update={"max_off_policy_steps": 1})})
    events: list[tuple[str, int]] = []
    hooks = Hooks(point=lambda name, step: events.append((name, step)) if name in ("step", "update") else None,
                  step_done=lambda step, m: events.append(("done", step)))
    # every group has reward variance (TraceGrader), so every step trains: LengthGrader failed this
    # once on a fresh clone, a step whose groups all had equal rewards trained no token
    result = await train(job, tmp_path / "run", model=tiny(tokenizer), tokenizer=tokenizer, grader=TraceGrader(),
                         max_batch_size=4, hooks=hooks)
    assert [m["step"] for m in result.history] == [1, 2, 3] and set(result.evals) == {0, 2, 3}
    # step 2's rollouts began before step 1's update ended, from the weights before it
    assert events.index(("step", 2)) < events.index(("done", 1))
    assert [m["train/off_policy_steps"] for m in result.history] == [0.0, 1.0, 1.0]
    assert [m["train/stale_dropped"] for m in result.history] == [0, 0, 0]
    assert all(m["update/tokens"] > 0 for m in result.history), [m["update/tokens"] for m in result.history]
    assert all(m["time/weight_sync_s"] >= 0 and "time/wait_rollouts_s" in m for m in result.history)
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:  # each step's rollouts stored once
        steps = sorted(r.step for r in store.rollouts("train"))
    assert steps == [1] * 6 + [2] * 6 + [3] * 6
    from peft import get_peft_model_state_dict

    saved = adapter(tmp_path / "run")  # the policy was trained (not the engine's copy)
    fresh = get_peft_model_state_dict(wrap_policy(tiny(tokenizer), job.training, job.seed))
    assert any(not torch.equal(fresh[k], saved[k]) for k in saved)


class NothingGrader:
    """Every rollout fails: every group teaches nothing, so rescue samples each again with its hint."""

    name = "nothing"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Any:
        from arft.records import Score

        assert "HINT-" not in json.dumps(sample)  # the grader never sees the hint
        return Score(score=0.0)


async def test_rescue_samples_zero_signal_groups_again_with_the_hint(tmp_path: Path, tokenizer: Any) -> None:
    from arft.config.sections import RescueSpec
    from arft.tracing.store import RunStore

    job = load_job(write_job(tmp_path))
    job = job.model_copy(update={"training": job.training.model_copy(update={
        "max_steps": 1, "eval_tasks": 1, "rescue": RescueSpec(hint="HINT-{{ item.id }}", samples=2)})})
    result = await train(job, tmp_path / "run", model=tiny(tokenizer), tokenizer=tokenizer,
                         grader=NothingGrader(), max_batch_size=4)
    step = result.history[0]
    assert step["train/groups_dropped"] == 2 and step["train/groups_rescued"] == 0  # nobody did better
    assert step["train/hinted_share"] == 0.0
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        hinted = store.rollouts("train:rescue")
        assert "train:rescue" in {r["run_id"] for r in store.runs()}
    assert len(hinted) == 2 * 2 and all(r.step == 1 for r in hinted)  # 2 groups x 2 hinted samples
    assert all("HINT-" not in (m.content or "") for r in hinted for m in r.messages)
    assert any("HINT-" in tokenizer.decode(list(r.token_ids[:r.prompt_len])) for r in hinted)  # the policy saw it
