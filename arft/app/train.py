"""``arft train``: orchestration only.

Each step: take the next ``batch_size`` tasks, run ``group_size`` rollouts of each with the
current weights (the engine shares the policy in-process, so it always samples from the newest
weights), grade, turn rewards into group-relative advantages, update, record metrics; evaluate
on the validation set before step 0 and every ``eval_interval`` steps; checkpoint every
``checkpoint_every`` steps and at the end. The maths lives in ``arft.trainer`` (advantages,
batching, loss, learner), which sees only token ids, masks, old logprobs and advantages; the run's
engine, tools, grader and store come from ``open_run``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arft.app.run import Run, job_record, open_run
from arft.budget import budget_penalty, count_calls
from arft.config import JobSpec
from arft.data.splits import load_split
from arft.engines.transformers_engine import TransformersEngine
from arft.graders.base import Grader
from arft.metrics.sinks import MetricSink, close_sinks, log_all, open_sinks
from arft.metrics.summary import EvalSummary, flat_metrics, summarize
from arft.models.loading import load_model
from arft.records import Rollout, Task
from arft.tracing.run_dir import RunDir
from arft.tracing.store import RunStore
from arft.trainer.advantages import group_advantages
from arft.trainer.batching import to_train_batch
from arft.trainer.checkpoints import Cursor, batch_for, load_checkpoint, save_checkpoint, steps_per_epoch
from arft.trainer.learner import Learner, base_learning_rate, wrap_policy
from arft.trainer.memory import release_memory

EVAL_SEED_OFFSET = 7_919_000
"""Evaluations sample with the same seeds every time, so eval curves compare like with like."""

TRAIN_RUN_ID = "train"
"""The run id of a training run in its store (its evaluations are ``train:eval-NNNNNN``)."""


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    evals: dict[int, EvalSummary] = field(default_factory=dict)
    """Step -> summary of the validation set at that step (0 = the baseline)."""
    history: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Hooks:
    """Callbacks for progress displays (all optional)."""

    status: Callable[[str], None] = lambda s: None
    phase: Callable[[str, int], None] = lambda name, total: None
    rollout_done: Callable[[Rollout], None] = lambda r: None
    step_done: Callable[[int, dict[str, float]], None] = lambda step, m: None
    eval_done: Callable[[int, EvalSummary], None] = lambda step, summary: None


@dataclass
class _Plan:
    """What the job asks for, resolved: the tasks, the group size and the number of steps."""

    train_tasks: list[Task]
    val_tasks: list[Task]
    group_size: int
    total_steps: int

    @classmethod
    def of(cls, job: JobSpec) -> "_Plan":
        train_tasks = load_split(job, "train")
        val_tasks = load_split(job, "validation", job.training.eval_tasks)
        hp = job.rl.hyperparameters
        group_size = max(1, round(job.training.group_size * hp.resolved("compute_multiplier")))
        total = job.training.max_steps or hp.resolved("n_epochs") * steps_per_epoch(
            len(train_tasks), hp.resolved("batch_size"))
        return cls(train_tasks, val_tasks, group_size, total)


@dataclass
class _Training:
    """The live objects of one training run."""

    run: Run
    learner: Learner
    plan: _Plan
    hooks: Hooks
    result: TrainResult
    sinks: list[MetricSink] = field(default_factory=list)
    """The store and metrics.jsonl always; TensorBoard / W&B / MLflow as ``job.logging`` says."""

    def metrics(self, step: int, values: dict[str, float]) -> None:
        log_all(self.sinks, step, values)


async def _evaluate(t: _Training, step: int) -> EvalSummary:
    job, store = t.run.job, t.run.store
    k = job.rl.hyperparameters.resolved("eval_samples")
    t.hooks.phase(f"eval @ step {step}", len(t.plan.val_tasks) * k)
    eval_id = f"{TRAIN_RUN_ID}:eval-{step:06d}"
    n = 1
    while store.has_run(eval_id):  # re-evaluated after a resume: keep both
        eval_id, n = f"{TRAIN_RUN_ID}:eval-{step:06d}-r{n}", n + 1
    store.create_run(eval_id, "eval", {"step": step})
    rollouts = await t.run.runner.run_many(t.plan.val_tasks, k, run_id=eval_id, step=step,
                                           seed=job.seed + EVAL_SEED_OFFSET, on_done=t.hooks.rollout_done)
    store.finish_run(eval_id, "completed")
    release_memory()
    summary = summarize(rollouts)
    t.metrics(step, flat_metrics(summary, "eval"))
    t.result.evals[step] = summary
    t.hooks.eval_done(step, summary)
    return summary


def _advantages(job: JobSpec, rollouts: list[Rollout], group_size: int
                ) -> tuple[list[float | None], dict[str, float]]:
    """Advantages for every rollout (groups of ``group_size`` in order) and reward metrics."""
    b = job.budget
    advantages: list[float | None] = []
    dropped, penalties, task_rewards = 0, [], []
    for g in range(0, len(rollouts), group_size):
        rewards: list[float | None] = []
        for r in rollouts[g:g + group_size]:
            if r.reward is None:
                rewards.append(None)  # infrastructure or grader failure: no gradient, no fake zero
                continue
            p = budget_penalty(count_calls(c.status for c in r.tool_calls), b.soft_limit, b.penalty, b.kind)
            penalties.append(p)
            task_rewards.append(r.reward)
            rewards.append(r.reward - p)
        adv = group_advantages(rewards, job.training.normalize_std)
        dropped += adv.dropped
        advantages.extend(adv.values)
    n_groups = math.ceil(len(rollouts) / group_size)
    return advantages, {"train/groups_dropped": float(dropped), "train/groups": float(n_groups),
                        "train/task_reward_mean": _mean(task_rewards),
                        "train/budget_penalty_mean": _mean(penalties)}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


async def _step(t: _Training, cursor: Cursor) -> Cursor:
    job, plan = t.run.job, t.plan
    t0 = time.perf_counter()
    idx, after = batch_for(cursor, len(plan.train_tasks), job.rl.hyperparameters.resolved("batch_size"),
                           job.seed)
    tasks = [plan.train_tasks[i] for i in idx]
    t.hooks.phase(f"step {cursor.step + 1}/{plan.total_steps}", len(tasks) * plan.group_size)
    rollouts = await t.run.runner.run_many(tasks, plan.group_size, run_id=TRAIN_RUN_ID, step=after.step,
                                           seed=job.seed + 1_000_000 * after.step,
                                           on_done=t.hooks.rollout_done)
    t_rollouts = time.perf_counter() - t0
    release_memory()
    advantages, reward_metrics = _advantages(job, rollouts, plan.group_size)
    batch = to_train_batch(rollouts, advantages)
    t1 = time.perf_counter()
    update = t.learner.update(batch) if batch.input_ids else {"update/tokens": 0.0}
    release_memory()
    t_update = time.perf_counter() - t1
    values = {**flat_metrics(summarize(rollouts), "train"), **reward_metrics, **update,
              "train/sequences": float(len(batch.input_ids)),
              "time/rollouts_s": t_rollouts, "time/update_s": t_update,
              "time/step_s": time.perf_counter() - t0}
    t.metrics(after.step, values)
    t.result.history.append({"step": after.step, **values})
    t.hooks.step_done(after.step, values)
    return after


def _policy_engine(job: JobSpec, model: Any, tokenizer: Any,
                   max_batch_size: int | None) -> tuple[Any, TransformersEngine, Any]:
    """(policy, an engine sampling from it, tokenizer): the model the job names, or the one given."""
    if model is None:
        dtype = "float32" if job.training.finetune == "full" else job.engine.dtype
        model, tokenizer = load_model(job.model_ref, dtype=dtype, device=job.engine.device)
    policy = wrap_policy(model, job.training, job.seed)
    policy.eval()
    engine = TransformersEngine(policy, tokenizer, max_batch_size=max_batch_size or job.engine.max_batch_size)
    return policy, engine, tokenizer


async def train(job: JobSpec, run_dir: RunDir | Path, *, resume: bool = False, model: Any = None,
                tokenizer: Any = None, grader: Grader | None = None, hooks: Hooks | None = None,
                max_batch_size: int | None = None) -> TrainResult:
    """Train ``job`` into ``run_dir`` (continuing from its latest checkpoint when ``resume``).

    ``model``/``tokenizer``/``grader`` may be passed in (tests, notebooks); otherwise they come
    from the job.
    """
    rd, hooks = RunDir.of(run_dir), hooks or Hooks()
    checkpoint = rd.latest_checkpoint() if resume else None
    if resume and checkpoint is None:
        raise ValueError(f"{rd.path} has no checkpoint to resume from: start a new run without --resume")
    plan = _Plan.of(job)
    hooks.status(f"loading model {job.model}")
    policy, engine, tokenizer = _policy_engine(job, model, tokenizer, max_batch_size)
    splits = {"train": plan.train_tasks, "validation": plan.val_tasks}
    async with open_run(job, rd, engine=engine, close_engine=True, grader=grader, splits=splits) as run:
        learner = Learner(policy, job.training, base_learning_rate(job.training, job.rl.hyperparameters.resolved(
            "learning_rate_multiplier")), plan.total_steps, job.sampling.temperature, tokenizer.pad_token_id or 0)
        t = _Training(run, learner, plan, hooks, TrainResult(rd.path, plan.total_steps))
        cursor = Cursor()
        if checkpoint is not None:
            cursor, _ = load_checkpoint(checkpoint, learner)
            t.result.evals.update(_stored_evals(run.store, cursor.step))
            hooks.status(f"resumed from {checkpoint.name}")
        elif not run.store.has_run(TRAIN_RUN_ID):
            run.store.create_run(TRAIN_RUN_ID, "train", job_record(job))
        t.sinks = open_sinks(job, rd.path, run.store, TRAIN_RUN_ID)
        try:
            await _loop(t, cursor, checkpoint is None)
        finally:
            close_sinks(t.sinks)
        run.store.finish_run(TRAIN_RUN_ID, "completed")
    return t.result


def _stored_evals(store: RunStore, up_to: int) -> dict[int, EvalSummary]:
    """The evaluations a resumed run already made (the baseline among them), from its store."""
    evals: dict[int, EvalSummary] = {}
    for r in store.runs():
        step = (r.get("job") or {}).get("step")
        if r["kind"] == "eval" and r["run_id"].startswith(f"{TRAIN_RUN_ID}:eval-") and step is not None \
                and step <= up_to:
            rollouts = store.rollouts(r["run_id"])
            if rollouts:
                evals[int(step)] = summarize(rollouts)
    return evals


async def _loop(t: _Training, cursor: Cursor, fresh: bool) -> None:
    interval = t.run.job.rl.hyperparameters.resolved("eval_interval")
    every = t.run.job.training.checkpoint_every
    if fresh and t.plan.val_tasks:
        await _evaluate(t, 0)
    while cursor.step < t.plan.total_steps:
        cursor = await _step(t, cursor)
        last = cursor.step == t.plan.total_steps
        if t.plan.val_tasks and (cursor.step % interval == 0 or last):
            await _evaluate(t, cursor.step)
        if cursor.step % every == 0 or last:
            save_checkpoint(t.run.run_dir.path, cursor, t.learner, {"total_steps": t.plan.total_steps})
            t.hooks.status(f"checkpoint step {cursor.step}")
