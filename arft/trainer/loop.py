"""`arft train` as a library call: orchestration only.

Each step: take the next ``batch_size`` tasks, run ``group_size`` rollouts of each with the
current weights (the engine shares the policy in-process, so it always samples from the newest
weights), grade, turn rewards into group-relative advantages, update, record metrics; evaluate
on the validation set before step 0 and every ``eval_interval`` steps; checkpoint every
``checkpoint_every`` steps and at the end. The maths lives in advantages / batching / loss /
learner; this module only wires them together.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from arft.config import JobSpec
from arft.graders.base import close_grader
from arft.records import Rollout, Task
from arft.trainer.advantages import group_advantages
from arft.trainer.batching import to_train_batch
from arft.trainer.checkpoints import (Cursor, batch_for, latest_checkpoint, load_checkpoint, save_checkpoint,
                                      steps_per_epoch)
from arft.trainer.memory import release_memory
from arft.trainer.tracking import MetricSink, close_sinks, open_sinks

EVAL_SEED_OFFSET = 7_919_000
"""Evaluations sample with the same seeds every time, so eval curves compare like with like."""


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    evals: dict[int, Any] = field(default_factory=dict)
    """Step -> EvalSummary of the validation set at that step (0 = the baseline)."""
    history: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Hooks:
    """Callbacks for progress displays (all optional)."""

    status: Callable[[str], None] = lambda s: None
    phase: Callable[[str, int], None] = lambda name, total: None
    rollout_done: Callable[[Rollout], None] = lambda r: None
    step_done: Callable[[int, dict[str, float]], None] = lambda step, m: None
    eval_done: Callable[[int, Any], None] = lambda step, summary: None


def budget_penalty(n_calls: int, soft_limit: int | None, penalty: float, kind: str) -> float:
    """The tool-call budget penalty (reported apart from the task reward)."""
    if soft_limit is None or n_calls <= soft_limit:
        return 0.0
    return penalty * (n_calls - soft_limit) if kind == "linear" else penalty


@dataclass
class _Run:
    """The live objects of one training run."""

    job: JobSpec
    run_dir: Path
    run_id: str
    runner: Any
    learner: Any
    store: Any
    train_tasks: list[Task]
    val_tasks: list[Task]
    total_steps: int
    group_size: int
    hooks: Hooks
    result: TrainResult
    sinks: list[MetricSink] = field(default_factory=list)
    """TensorBoard / W&B / MLflow (``job.logging``); the store and metrics.jsonl always."""

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self.store.add_metrics(self.run_id, step, values)
        with (self.run_dir / "metrics.jsonl").open("a") as f:
            f.write(json.dumps({"step": step, **values}) + "\n")
        for sink in self.sinks:
            sink.log(step, values)


async def _evaluate(run: _Run, step: int) -> Any:
    from arft.report.summary import flat_metrics, summarize

    k = run.job.rl.hyperparameters.resolved("eval_samples")
    run.hooks.phase(f"eval @ step {step}", len(run.val_tasks) * k)
    eval_id = f"{run.run_id}:eval-{step:06d}"
    n = 1
    while run.store.has_run(eval_id):  # re-evaluated after a resume: keep both
        eval_id, n = f"{run.run_id}:eval-{step:06d}-r{n}", n + 1
    run.store.create_run(eval_id, "eval", {"step": step})
    run.runner.run_id, run.runner.step = eval_id, step
    rollouts = await run.runner.run_many(run.val_tasks, k, run.hooks.rollout_done,
                                         seed=run.job.seed + EVAL_SEED_OFFSET)
    run.store.finish_run(eval_id, "completed")
    release_memory()
    summary = summarize(rollouts)
    run.metrics(step, flat_metrics(summary, "eval"))
    run.result.evals[step] = summary
    run.hooks.eval_done(step, summary)
    return summary


def _advantages(run: _Run, rollouts: list[Rollout]) -> tuple[list[float | None], dict[str, float]]:
    """Advantages for every rollout (groups of ``group_size`` in order) and reward metrics."""
    b = run.job.budget
    advantages: list[float | None] = []
    dropped, penalties, task_rewards = 0, [], []
    for g in range(0, len(rollouts), run.group_size):
        group = rollouts[g:g + run.group_size]
        rewards: list[float | None] = []
        for r in group:
            if r.status == "infra_failed" or r.score is None or r.score.error is not None:
                rewards.append(None)  # infrastructure or grader failure: no gradient, no fake zero
                continue
            p = budget_penalty(len(r.model_calls), b.soft_limit, b.penalty, b.kind)
            penalties.append(p)
            task_rewards.append(r.score.score)
            rewards.append(r.score.score - p)
        adv = group_advantages(rewards, run.job.training.normalize_std)
        dropped += adv.dropped
        advantages.extend(adv.values)
    n_groups = math.ceil(len(rollouts) / run.group_size)
    return advantages, {"train/groups_dropped": float(dropped), "train/groups": float(n_groups),
                        "train/task_reward_mean": _mean(task_rewards),
                        "train/budget_penalty_mean": _mean(penalties)}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


async def _step(run: _Run, cursor: Cursor) -> Cursor:
    from arft.report.summary import flat_metrics, summarize

    t0 = time.perf_counter()
    idx, after = batch_for(cursor, len(run.train_tasks), run.job.rl.hyperparameters.resolved("batch_size"),
                           run.job.seed)
    tasks = [run.train_tasks[i] for i in idx]
    run.hooks.phase(f"step {cursor.step + 1}/{run.total_steps}", len(tasks) * run.group_size)
    run.runner.run_id, run.runner.step = run.run_id, cursor.step + 1
    rollouts = await run.runner.run_many(tasks, run.group_size, run.hooks.rollout_done,
                                         seed=run.job.seed + 1_000_000 * (cursor.step + 1))
    t_rollouts = time.perf_counter() - t0
    release_memory()
    advantages, reward_metrics = _advantages(run, rollouts)
    batch = to_train_batch(rollouts, advantages)
    t1 = time.perf_counter()
    update = run.learner.update(batch) if batch.input_ids else {"update/tokens": 0.0}
    release_memory()
    t_update = time.perf_counter() - t1
    values = {**flat_metrics(summarize(rollouts), "train"), **reward_metrics, **update,
              "train/sequences": float(len(batch.input_ids)),
              "time/rollouts_s": t_rollouts, "time/update_s": t_update,
              "time/step_s": time.perf_counter() - t0}
    run.metrics(after.step, values)
    run.result.history.append({"step": after.step, **values})
    run.hooks.step_done(after.step, values)
    return after


async def _open(job: JobSpec, run_dir: Path, model: Any, tokenizer: Any, grader: Any,
                max_batch_size: int | None) -> tuple[Any, Any, Any, Any, Any]:
    """(policy, engine, toolbox, grader, learner-less pieces) for a run."""
    from arft.engines.transformers_engine import TransformersEngine
    from arft.graders.registry import build_grader
    from arft.models.loading import load_model
    from arft.tools.registry import open_toolbox
    from arft.trainer.learner import wrap_policy

    if grader is None:
        grader = build_grader(job.rl.grader, job.base_dir)
    if model is None:
        dtype = "float32" if job.training.finetune == "full" else job.engine.dtype
        model, tokenizer = load_model(job.model_ref, dtype=dtype, device=job.engine.device)
    policy = wrap_policy(model, job.training, job.seed)
    policy.eval()
    engine = TransformersEngine(policy, tokenizer, max_batch_size=max_batch_size or job.engine.max_batch_size)
    toolbox = await open_toolbox(job.rl.tools, job.base_dir)
    return policy, engine, toolbox, grader, tokenizer


async def train(job: JobSpec, run_dir: Path, *, resume: bool = False, model: Any = None,
                tokenizer: Any = None, grader: Any = None, hooks: Hooks | None = None,
                max_batch_size: int | None = None) -> TrainResult:
    """Train ``job`` into ``run_dir`` (continuing from its latest checkpoint when ``resume``).

    ``model``/``tokenizer``/``grader`` may be passed in (tests, notebooks); otherwise they come
    from the job.
    """
    from arft.rollout.evaluate import check_tools, load_split
    from arft.rollout.runner import RolloutRunner
    from arft.tracing.store import RunStore
    from arft.trainer.learner import Learner, base_learning_rate

    hooks = hooks or Hooks()
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:
        raise ValueError(f"{run_dir} has no checkpoint to resume from: start a new run without --resume")
    train_tasks, val_tasks = load_split(job, "train", None), load_split(job, "validation",
                                                                     job.training.eval_tasks)
    hp = job.rl.hyperparameters
    group_size = max(1, round(job.training.group_size * hp.resolved("compute_multiplier")))
    total = job.training.max_steps or hp.resolved("n_epochs") * steps_per_epoch(
        len(train_tasks), hp.resolved("batch_size"))
    run_dir.mkdir(parents=True, exist_ok=True)
    hooks.status(f"loading model {job.model}")
    policy, engine, toolbox, grader, tokenizer = await _open(job, run_dir, model, tokenizer, grader,
                                                             max_batch_size)
    try:
        check_tools(job, train_tasks, toolbox, "train")
        check_tools(job, val_tasks, toolbox, "validation")
    except BaseException:
        await toolbox.aclose()
        await engine.aclose()
        raise
    store = RunStore(run_dir / "arft.sqlite")
    try:
        learner = Learner(policy, job.training, base_learning_rate(job.training, hp.resolved(
            "learning_rate_multiplier")), total, job.sampling.temperature, tokenizer.pad_token_id or 0)
        run_id = "train"
        runner = RolloutRunner.from_job(job, engine, toolbox, grader, store=store, run_id=run_id,
                                        run_dir=run_dir)
        run = _Run(job, run_dir, run_id, runner, learner, store, train_tasks, val_tasks, total,
                   group_size, hooks, TrainResult(run_dir, total))
        cursor = Cursor()
        if checkpoint is not None:
            cursor, _ = load_checkpoint(checkpoint, learner)
            run.result.evals.update(_stored_evals(store, run_id, cursor.step))
            hooks.status(f"resumed from {checkpoint.name}")
        elif not store.has_run(run_id):
            # The model as an absolute reference: `arft merge` reloads it from anywhere.
            store.create_run(run_id, "train", job.model_copy(update={"model": job.model_ref})
                             .model_dump(mode="json"))
        run.sinks = open_sinks(job, run_dir)
        try:
            await _loop(run, cursor, checkpoint is None)
        finally:
            close_sinks(run.sinks)
        store.finish_run(run_id, "completed")
    finally:
        store.close()
        await toolbox.aclose()
        await close_grader(grader)
        await engine.aclose()
    return run.result


def _stored_evals(store: Any, run_id: str, up_to: int) -> dict[int, Any]:
    """The evaluations a resumed run already made (the baseline among them), from its store."""
    from arft.report.summary import summarize

    evals: dict[int, Any] = {}
    for r in store.runs():
        step = (r.get("job") or {}).get("step")
        if r["kind"] == "eval" and r["run_id"].startswith(f"{run_id}:eval-") and step is not None \
                and step <= up_to:
            rollouts = store.rollouts(r["run_id"])
            if rollouts:
                evals[int(step)] = summarize(rollouts)
    return evals


async def _loop(run: _Run, cursor: Cursor, fresh: bool) -> None:
    interval = run.job.rl.hyperparameters.resolved("eval_interval")
    every = run.job.training.checkpoint_every
    if fresh and run.val_tasks:
        await _evaluate(run, 0)
    while cursor.step < run.total_steps:
        cursor = await _step(run, cursor)
        last = cursor.step == run.total_steps
        if run.val_tasks and (cursor.step % interval == 0 or last):
            await _evaluate(run, cursor.step)
        if cursor.step % every == 0 or last:
            save_checkpoint(run.run_dir, cursor, run.learner, {"total_steps": run.total_steps})
            run.hooks.status(f"checkpoint step {cursor.step}")
