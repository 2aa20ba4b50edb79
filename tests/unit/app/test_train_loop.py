"""The training loop: one short ``train`` run on a tiny model built from a config (real
tokenizer, real SQLite store, metrics.jsonl) checked end to end (the reward shaping it applies:
tests/unit/trainer/test_advantages.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from arft.app.train import Hooks, TrainResult, train
from arft.config import load_job
from arft.records import Score
from arft.tracing.store import RunStore
from tests.training import LengthGrader, write_datasets


def write_job(tmp: Path) -> Path:
    write_datasets(tmp, 4, 1)
    job = {"training_file": "train.jsonl", "validation_file": "val.jsonl", "seed": 3,
           "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "string_check", "name": "unused", "input": "x", "reference": "x",
                          "operation": "eq"},
               "hyperparameters": {"batch_size": 2, "eval_interval": 5, "eval_samples": 2}}},
           "sampling": {"max_new_tokens": 6},
           "rollout": {"max_turns": 1, "max_tokens": 512, "concurrency": 8},
           "logging": {"tensorboard": False},
           "training": {"group_size": 3, "max_steps": 2, "checkpoint_every": 5, "learning_rate": 0.05,
                        "micro_batch_size": 6, "bf16_autocast": False, "lora": {"r": 4, "alpha": 8}}}
    (tmp / "job.json").write_text(json.dumps(job))
    return tmp / "job.json"


def same(a: float | None, b: float | None) -> bool:
    """Equal values; "no value" (NaN, or null in JSON) only equals "no value"."""
    a, b = (math.nan if x is None else x for x in (a, b))
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b)


async def test_a_short_training_run(tmp_path: Path, tokenizer: Any) -> None:
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    from arft.models.loading import tiny_model
    from arft.trainer.learner import wrap_policy

    torch.set_num_threads(1)
    job = load_job(write_job(tmp_path))
    seen: dict[str, list[Any]] = {"steps": [], "evals": [], "rollouts": [], "phases": [], "points": []}
    hooks = Hooks(step_done=lambda s, m: seen["steps"].append((s, dict(m))),
                  eval_done=lambda s, summary: seen["evals"].append((s, summary.n_rollouts)),
                  rollout_done=seen["rollouts"].append,
                  phase=lambda name, total: seen["phases"].append((name, total)),
                  point=lambda name, step: seen["points"].append((name, step, len(seen["rollouts"]))))
    result = await train(job, tmp_path / "run", model=tiny_model(tokenizer, seed=5), tokenizer=tokenizer,
                         grader=LengthGrader(), hooks=hooks, max_batch_size=8)
    assert isinstance(result, TrainResult) and result.steps == 2
    # evaluations: the baseline (step 0) and the last step (2), not step 1 (eval_interval 5)
    assert sorted(result.evals) == [0, 2] and [s for s, _ in seen["evals"]] == [0, 2]
    assert all(n == 2 for _, n in seen["evals"])  # 1 validation task x eval_samples 2
    assert [name for name, _ in seen["phases"]] == ["eval @ step 0", "step 1/2", "step 2/2", "eval @ step 2"]
    assert [total for _, total in seen["phases"]] == [2, 6, 6, 2]
    assert len(seen["rollouts"]) == 2 + 6 + 6 + 2  # rollout_done once per rollout
    # the baseline evaluation ran beside step 1's rollouts (same weights): step 1 started before
    # any evaluation rollout was done, and its update only after both were
    assert ("step", 1, 0) in seen["points"]
    done_before_update = next(n for name, step, n in seen["points"] if (name, step) == ("update", 1))
    assert done_before_update == 2 + 6
    assert {r.run_id for r in seen["rollouts"][:8]} == {"train:eval-000000", "train"}

    # training: finite update metrics, weights really updated
    assert [m["step"] for m in result.history] == [1, 2]
    assert [(s, m) for s, m in seen["steps"]] == [(h["step"], {k: v for k, v in h.items() if k != "step"})
                                                 for h in result.history]
    for h in result.history:
        assert h["update/tokens"] > 0 and h["train/sequences"] > 0
        assert math.isfinite(h["update/grad_norm"]) and h["update/grad_norm"] > 0
        assert all(math.isfinite(v) for k, v in h.items() if k.startswith("update/"))
    latest = (tmp_path / "run" / "checkpoints" / "latest").read_text().strip()
    trained = load_file(str(tmp_path / "run" / "checkpoints" / latest / "trainable.safetensors"))
    initial = get_peft_model_state_dict(wrap_policy(tiny_model(tokenizer, seed=5), job.training, job.seed))
    assert trained.keys() == initial.keys()
    assert all(torch.isfinite(t).all() for t in trained.values())
    assert any(not torch.equal(initial[k], trained[k]) for k in trained)

    # metrics: every row in metrics.jsonl and in the store, with the same values
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in lines] == [0, 1, 2, 2]  # eval@0, step 1, step 2, eval@2
    assert "eval/reward_mean" in lines[0] and "update/tokens" in lines[1] and "eval/reward_mean" in lines[3]
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        stored: dict[tuple[int, str], float] = {(r["step"], r["name"]): r["value"] for r in store.metrics("train")}
        rollouts = store.rollouts()
        runs = {r["run_id"]: r["status"] for r in store.runs()}
    flat = {(row["step"], k): v for row in lines for k, v in row.items() if k != "step"}
    assert stored.keys() == flat.keys()
    assert all(same(stored[k], flat[k]) for k in flat)
    for h in result.history:  # the hooks saw the values the sinks got
        assert all(same(flat[(h["step"], k)], v) for k, v in h.items() if k != "step")

    # every rollout knows the step it belongs to
    steps = sorted((r.run_id, r.step) for r in rollouts)
    assert steps == ([("train", 1)] * 6 + [("train", 2)] * 6
                     + [("train:eval-000000", 0)] * 2 + [("train:eval-000002", 2)] * 2)
    assert runs == {"train": "completed", "train:eval-000000": "completed", "train:eval-000002": "completed"}


class FlatOnEvenGrader(LengthGrader):
    """0.5 for every answer to a task marked ``flat`` (a group with no variance), else by length."""

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        return Score(score=0.5) if item.get("flat") else await super().grade(sample, item)


async def test_dynamic_sampling_replaces_equal_reward_groups_with_the_next_tasks(tmp_path: Path,
                                                                               tokenizer: Any) -> None:
    """DAPO's dynamic sampling: a step whose groups had all-equal rewards draws the next tasks of
    the data order until ``batch_size`` groups teach something (or its rounds are spent); the
    data order moves past every task drawn, and the extra groups are counted."""
    import random

    from arft.models.loading import tiny_model

    torch.set_num_threads(1)
    write_job(tmp_path)
    rows = [{"id": f"t{i}", "flat": i % 2 == 0, "messages": [{"role": "user", "content": f"Say something about {i}."}]}
            for i in range(40)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = load_job(tmp_path / "job.json")
    job = job.model_copy(update={"training": job.training.model_copy(update={"dynamic_sampling": 4})})
    result = await train(job, tmp_path / "run", model=tiny_model(tokenizer, seed=5), tokenizer=tokenizer,
                         grader=FlatOnEvenGrader(), max_batch_size=8)
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        rollouts = [r for r in store.rollouts() if r.run_id == "train"]
    order = list(range(40))
    random.Random(job.seed * 1_000_003).shuffle(order)  # the data order of epoch 0
    drawn: list[str] = []
    for h in result.history:
        step = [r for r in rollouts if r.step == h["step"]]
        tasks = list(dict.fromkeys(r.task_id for r in step))  # in the order they were drawn
        groups = {t: [r.reward for r in step if r.task_id == t] for t in tasks}
        assert all(len(g) == 3 for g in groups.values())
        useful = [t for t, g in groups.items() if len(set(g)) > 1]
        flat_first = sum(len(set(groups[t])) == 1 for t in tasks[:2])
        assert h["train/groups"] == len(tasks) and h["train/groups_resampled"] == len(tasks) - 2
        assert h["train/groups_dropped"] == len(tasks) - len(useful)
        assert len(useful) <= 2 and h["train/sequences"] == 3 * len(useful)
        assert (len(tasks) > 2) == (flat_first > 0)  # resampled only when the batch had a flat group
        assert len(useful) == 2 or len(tasks) <= 2 + 4 * 2  # filled, or its 4 rounds spent
        drawn += tasks
    assert drawn == [f"t{i}" for i in order[:len(drawn)]]  # no task skipped or repeated
    assert len(drawn) > 4  # the flat tasks really were replaced
    latest = (tmp_path / "run" / "checkpoints" / "latest").read_text().strip()
    state = json.loads((tmp_path / "run" / "checkpoints" / latest / "state.json").read_text())
    assert state["cursor"] == {"step": 2, "epoch": 0, "index": len(drawn)}  # a resume goes on after them
