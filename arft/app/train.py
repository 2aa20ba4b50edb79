"""``arft train``: orchestration only.

Each step: take the next ``batch_size`` tasks of the data order (``arft.data.order``), run
``group_size`` rollouts of each with the current weights (the engine shares the policy
in-process, or holds a copy, e.g. with LoRA merged, that is synced after every update: the
policy and its engine are ``arft.app.policy``'s), grade, turn rewards into group-relative
advantages, update, record metrics; checkpoint every ``checkpoint_every`` steps and at the end;
evaluate on the validation set before step 0, every ``eval_interval`` steps and at the end. An
evaluation runs beside the next step's rollouts (both sample from the same weights, so they share
the engine's batches), and the next update waits for it. The maths lives in ``arft.trainer``
(reward shaping and advantages, batching, loss, learner), which sees only token ids, masks, old
logprobs and advantages; the run's engine, tools, grader and store come from ``open_run``; every
seed comes from ``arft.seeds``.

With ``training.max_off_policy_steps`` above 0 the rollouts run ahead (``arft.app.ahead``): the
batch of step N+1 is generated, from the engine's own copy of the weights, while step N updates
in a worker thread; each update syncs that copy. Checkpoints and evaluations still follow
their step's update, so an evaluation at step N measures the weights of step N.

Resuming (``resume=True``) continues from the latest checkpoint after dropping what the
interrupted process recorded after it (``arft.app.resume``), so every step's rollouts,
grades, metric rows and evaluations are stored exactly once however often the run was killed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from arft.app.ahead import Ahead, Generated, fresh
from arft.app.policy import apply_init_from, policy_engine, sync_engine
from arft.app.rescue import RESCUE_RUN_ID, rescue, with_hint
from arft.app.resume import resume as resume_from
from arft.app.run import Run, job_record, open_run
from arft.app.monitoring import announce, open_monitors, watch_evals, watch_step
from arft.app.session import Hooks, Session, TrainResult, evaluate_step, on_done
from arft.config import JobError, JobSpec
from arft.cpu import threads as cpu_threads
from arft.data.order import Cursor, batch_for, steps_per_epoch
from arft.data.splits import Split, load_split
from arft.graders.base import Grader
from arft.metrics.sinks import close_sinks, open_sinks
from arft.metrics.summary import flat_metrics, summarize
from arft.records import Rollout, Task, TrainBatch
from arft.rollout.runner import RolloutRunner
from arft.together import together
from arft.tools.cassette import cassette_counts
from arft.tracing.run_dir import RunDir
from arft.seeds import step_seed
from arft.trainer.advantages import batch_advantages, budget_penalty_of, shaped_group_advantages
from arft.trainer.batching import to_train_batch
from arft.trainer.checkpoints import CheckpointError, save_checkpoint
from arft.trainer.learner import Learner, base_learning_rate
from arft.trainer.memory import release_memory

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["Hooks", "TRAIN_RUN_ID", "TrainResult", "train"]

_T = TypeVar("_T")

TRAIN_RUN_ID = "train"
"""The run id of a training run in its store (its evaluations are ``train:eval-NNNNNN``)."""


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


def _resampled(job: JobSpec, plan: _Plan, n_rollouts: int) -> dict[str, float]:
    """``train/groups_resampled`` (groups drawn beyond the batch) when dynamic sampling is on."""
    if not job.training.dynamic_sampling:
        return {}
    batch = min(job.rl.hyperparameters.resolved("batch_size"), len(plan.train_tasks))
    return {"train/groups_resampled": float(max(n_rollouts // plan.group_size - batch, 0))}


def _rescue_metrics(job: JobSpec, plan: _Plan, rollouts: list[Rollout], batch: TrainBatch) -> dict[str, float]:
    """Under ``training.rescue``: ``train/groups_rescued`` (by either rung), ``train/groups_explored``
    (by the exploration rung), and the shares of the trained sequences that were hinted or hotter."""
    if job.training.rescue is None:
        return {}
    g = plan.group_size
    groups = [rollouts[i:i + g] for i in range(0, len(rollouts), g)]
    trained = max(len(batch.trace_ids), 1)

    def share(of: Callable[[Rollout], bool]) -> float:
        ids = {r.trace_id for r in rollouts if of(r)}
        return sum(t in ids for t in batch.trace_ids) / trained

    return {"train/groups_rescued": float(sum(any(r.rescued for r in group) for group in groups)),
            "train/groups_explored": float(sum(any(r.rescued == "explore" for r in group) for group in groups)),
            "train/hinted_share": share(lambda r: r.hinted),
            "train/explored_share": share(lambda r: r.rescued == "explore")}


def _cassette_metrics(t: Session) -> dict[str, float]:
    """``cassette/*`` (so far in this process) when the job records or replays its tool calls."""
    counts = cassette_counts(t.run.toolbox) if isinstance(t.run, Run) else None
    return counts.metrics() if counts is not None else {}


async def _generate(t: Session, plan: _Plan, cursor: Cursor, version: int) -> Generated[Cursor]:
    """The rollouts of the step after ``cursor``, sampled from the weights after ``version`` updates."""
    job = t.run.job
    t0 = time.perf_counter()
    idx, after = batch_for(cursor, len(plan.train_tasks), job.rl.hyperparameters.resolved("batch_size"),
                           job.seed)
    tasks = [plan.train_tasks[i] for i in idx]
    t.telemetry.step_begin(after.step)
    t.hooks.phase(f"step {after.step}/{plan.total_steps}", len(tasks) * plan.group_size)
    t.hooks.point("step", after.step)
    rollouts = await _run_tasks(t, plan, tasks, after.step, done=0)
    if job.training.rescue is not None:  # before dynamic sampling: a rescued group teaches
        t.hooks.phase(f"step {after.step}/{plan.total_steps}: rescue of stuck groups", 0)
        runner = t.run.runner
        assert isinstance(runner, RolloutRunner), "the job refuses training.rescue with cluster.ray"
        rollouts = (await rescue(runner, job.training.rescue, rollouts, plan.group_size, tasks,
                                 base_seed=job.seed, step=after.step, budget=job.budget)).rollouts
    if job.training.dynamic_sampling:
        rollouts, after = await _resample(t, plan, rollouts, after, len(tasks))
    release_memory()
    return Generated(after.step, version, rollouts, time.perf_counter() - t0, after)


async def _run_tasks(t: Session, plan: _Plan, tasks: list[Task], step: int, done: int) -> list[Rollout]:
    """``group_size`` rollouts of each task for ``step``; ``done``: tasks this step ran before
    (their rollouts took the seeds before these)."""
    seed = step_seed(t.run.job.seed, step, plan.group_size, tasks_before=done)
    return await t.run.runner.run_many(tasks, plan.group_size, run_id=TRAIN_RUN_ID, step=step, seed=seed,
                                       on_done=on_done(t.hooks, "generation", step))


async def _resample(t: Session, plan: _Plan, rollouts: list[Rollout], after: Cursor, wanted: int
                    ) -> tuple[list[Rollout], Cursor]:
    """Dynamic sampling (``training.dynamic_sampling`` rounds): for each group whose training
    rewards were all equal, the next task of the data order, until ``wanted`` groups teach
    something. Returns every rollout run (in groups) and the cursor past every task drawn."""
    job, g = t.run.job, plan.group_size

    def useful(rs: list[Rollout]) -> int:
        return sum(not shaped_group_advantages(group, [budget_penalty_of(r, job.budget) for r in group],
                                               job.training.normalize_std).dropped
                   for group in (rs[i:i + g] for i in range(0, len(rs), g)))

    need = wanted - useful(rollouts)
    for _ in range(job.training.dynamic_sampling):
        if need <= 0:
            break
        idx, nxt = batch_for(after, len(plan.train_tasks), need, job.seed)
        after = replace(nxt, step=after.step)
        t.hooks.phase(f"step {after.step}/{plan.total_steps}: {len(idx)} more tasks for groups of equal "
                      "rewards", len(idx) * g)
        more = await _run_tasks(t, plan, [plan.train_tasks[i] for i in idx], after.step, len(rollouts) // g)
        rollouts, need = rollouts + more, need - useful(more)
    return rollouts, after


async def _learn(t: Session, plan: _Plan, generated: Generated[Cursor], waited_s: float) -> Cursor:
    """Grade-to-advantage, update and sync the engine for one generated batch; record the step.
    ``waited_s``: how long the trainer waited for the batch (all of its generation when synchronous)."""
    job = t.run.job
    after, bound = generated.cursor, job.training.max_off_policy_steps
    t1 = time.perf_counter()
    rollouts, stale = fresh(generated, bound)
    rescue = job.training.rescue
    advantages, reward_metrics = batch_advantages(rollouts, plan.group_size, job.budget, job.training.normalize_std,
                                                  train_unhinted=rescue is None or rescue.unhinted == "train")
    batch = to_train_batch(rollouts, advantages)
    t.hooks.point("update", after.step)
    with t.telemetry.update(after.step):
        if not batch.input_ids:
            update = {"update/tokens": 0.0}
        elif bound > 0:  # the next steps' rollouts are generated meanwhile, from the engine's own copy
            update = await cpu_threads.to_thread(t.learner.update, batch)
        else:
            update = t.learner.update(batch)
    release_memory()
    if batch.input_ids:  # the weights changed: the engine's copy must follow
        with t.telemetry.sync(after.step):
            update |= await sync_engine(t, after.step)
    t_update = time.perf_counter() - t1
    values = {**flat_metrics(summarize(rollouts), "train"), **reward_metrics, **update,
              "train/sequences": float(len(batch.input_ids)),
              "train/off_policy_steps": float(generated.off_policy_steps()),
              "train/stale_dropped": float(stale),
              **_resampled(job, plan, len(rollouts)), **_rescue_metrics(job, plan, rollouts, batch),
              **_cassette_metrics(t),
              "time/rollouts_s": generated.seconds, "time/update_s": t_update,
              "time/step_s": waited_s + t_update}
    if bound > 0:
        values["time/wait_rollouts_s"] = waited_s
    watched = watch_step(t, plan.group_size, after.step, values, rollouts)  # the live monitors
    values |= watched.values
    t.metrics(after.step, values)
    t.telemetry.step_end(after.step, values)
    t.result.history.append({"step": after.step, **values})
    t.hooks.step_done(after.step, values)
    announce(t, after, plan.total_steps, watched.alarms)  # under monitors.on_alarm: stop, ends the run
    return after


async def train(job: JobSpec, run_dir: RunDir | Path, *, resume: bool = False, model: Any = None,
                tokenizer: "PreTrainedTokenizerBase | None" = None, grader: Grader | None = None,
                hooks: Hooks | None = None, max_batch_size: int | None = None) -> TrainResult:
    """Train ``job`` into ``run_dir`` (continuing from its latest checkpoint when ``resume``).

    ``model``/``tokenizer``/``grader`` may be passed in (tests, notebooks); otherwise they come
    from the job.
    """
    rd, hooks, job = RunDir.of(run_dir), hooks or Hooks(), with_hint(job)  # hint: auto, made concrete
    checkpoint = rd.latest_checkpoint() if resume else None
    if resume and checkpoint is None:
        raise CheckpointError(f"{rd.path} has no checkpoint to resume from: start a new run without --resume")
    plan = _Plan.of(job)
    result = TrainResult(rd.path, plan.total_steps)
    if job.cluster.ray is not None and job.rollout.tool_cassette.mode != "off":
        raise JobError("rollout.tool_cassette records or replays in one process; the Ray workers call "
                       "their tools themselves: drop cluster.ray (or --ray) to record or replay")
    if job.cluster.ray is not None:  # the same loop, over Ray actors (arft.app.cluster)
        from arft.app.cluster.driver import open_cluster_run

        hooks.status(f"starting {job.cluster.ray.rollout_workers} rollout workers, "
                     f"{job.cluster.ray.engine_replicas} engine replicas and the learner on Ray")
        async with open_cluster_run(job, rd, plan.total_steps, model=model, tokenizer=tokenizer,
                                    grader=grader) as crun:
            nodes = {node for actors in crun.where.values() for node, _ in actors}
            hooks.status(f"on Ray: {len(nodes)} nodes")
            await _session(Session(crun, crun.learner, TRAIN_RUN_ID, plan.val_tasks, hooks, result), plan, checkpoint)
        return result
    hooks.status(f"loading model {job.model}")
    policy, engine, tokenizer = policy_engine(job, model, tokenizer, max_batch_size, rd.path, hooks.status)
    splits: dict[Split, Sequence[Task]] = {"train": plan.train_tasks, "validation": plan.val_tasks}
    async with open_run(job, rd, engine=engine, close_engine=True, grader=grader, splits=splits) as run:
        lr = base_learning_rate(job.training, job.rl.hyperparameters.resolved("learning_rate_multiplier"))
        learner = Learner(policy, job.training, lr, plan.total_steps, job.sampling.temperature,
                          tokenizer.pad_token_id or 0)
        await _session(Session(run, learner, TRAIN_RUN_ID, plan.val_tasks, hooks, result, telemetry=run.telemetry),
                       plan, checkpoint)
    return result


async def _session(t: Session, plan: _Plan, checkpoint: Path | None) -> None:
    """Resume or start the run of ``t``, train it to the end, record it as completed."""
    run = t.run
    cursor = Cursor()
    if checkpoint is not None:
        cursor = resume_from(t, checkpoint)
    else:
        apply_init_from(t)
        if not run.store.has_run(TRAIN_RUN_ID):
            run.store.create_run(TRAIN_RUN_ID, "train", job_record(run.job))
    if run.job.training.rescue is not None and not run.store.has_run(RESCUE_RUN_ID):  # arft show lists them
        run.store.create_run(RESCUE_RUN_ID, "rescue", {"hint": run.job.training.rescue.hint})
    t.sinks = open_sinks(run.job, run.run_dir.path, run.store, TRAIN_RUN_ID,
                         resumed_from=cursor.step if checkpoint is not None else None)
    open_monitors(t, plan.group_size, cursor.step if checkpoint is not None else None)
    try:
        with t.telemetry.run(TRAIN_RUN_ID, "train"):
            await _loop(t, plan, cursor)
    finally:
        close_sinks(t.sinks)
    run.store.finish_run(TRAIN_RUN_ID, "completed")


async def _loop(t: Session, plan: _Plan, cursor: Cursor) -> None:
    with t.telemetry.sync(cursor.step):
        await sync_engine(t, cursor.step)  # a resumed or warm-started policy is not the base
    due = _eval_due(t, plan, cursor.step)  # the baseline, or a resumed checkpoint's (rewind dropped it)
    bound = t.run.job.training.max_off_policy_steps
    if bound == 0:
        while cursor.step < plan.total_steps:
            generated = await _beside_eval(t, due, _generate(t, plan, cursor, cursor.step))
            cursor = await _learn(t, plan, generated, generated.seconds)
            due = _after_step(t, plan, cursor)
    else:
        ahead = Ahead(lambda c, version: _generate(t, plan, c, version), cursor, cursor.step,
                      plan.total_steps, bound, lambda c: c.step)
        async with ahead:  # an evaluation runs while the next batches generate
            while cursor.step < plan.total_steps:
                await _beside_eval(t, due, None)
                t0 = time.perf_counter()
                generated = await ahead.next()
                cursor = await _learn(t, plan, generated, time.perf_counter() - t0)
                await ahead.advanced(cursor.step)
                due = _after_step(t, plan, cursor)
    await _beside_eval(t, due, None)  # the last step's: nothing left to run beside it
    announce(t, cursor, plan.total_steps, watch_evals(t).alarms, stop=False)  # the run is over: nothing to stop


def _eval_due(t: Session, plan: _Plan, step: int) -> int | None:
    """``step`` if the validation set is due for evaluation after it (before the first step,
    every ``eval_interval`` steps and after the last) and not evaluated yet; else None."""
    interval = t.run.job.rl.hyperparameters.resolved("eval_interval")
    due = bool(plan.val_tasks) and (step % interval == 0 or step == plan.total_steps)
    return step if due and step not in t.result.evals else None


@overload
async def _beside_eval(t: Session, due: int | None, work: Awaitable[_T]) -> _T: ...


@overload
async def _beside_eval(t: Session, due: int | None, work: None) -> None: ...


async def _beside_eval(t: Session, due: int | None, work: Awaitable[_T] | None) -> _T | None:
    """``work`` (the next step's generation), with the evaluation of step ``due`` running beside
    it: both sample from the same weights, so their rollouts fill the engine's batches together
    (an evaluation's last long rollouts no longer decode alone). Both finish before this returns,
    so the next update waits for the evaluation; an error in either cancels the other. Lockstep
    rollouts (``rollout.schedule``) run the evaluation first, then the work."""
    jobs: list[Awaitable[Any]] = [] if due is None else [evaluate_step(t, due)]
    if t.run.job.rollout.schedule == "lockstep":  # one after the other: rounds are per run_many
        results = [await job for job in [*jobs, *([] if work is None else [work])]]
    else:
        results = await together(*jobs, *([] if work is None else [work]))
    return results[-1] if work is not None else None


def _after_step(t: Session, plan: _Plan, cursor: Cursor) -> int | None:
    """Write the checkpoint due after ``cursor``'s step; returns the step if its evaluation is due.

    The checkpoint comes first, so the evaluation can run beside the next step's rollouts; a run
    killed before that evaluation finished runs it again when resumed (``rewind``)."""
    every = t.run.job.training.checkpoint_every
    if cursor.step % every == 0 or cursor.step == plan.total_steps:
        step = cursor.step
        save_checkpoint(t.run.run_dir.path, cursor, t.learner, {"total_steps": plan.total_steps},
                        on_file=lambda name: t.hooks.point("checkpoint", step))
        t.hooks.status(f"checkpoint step {cursor.step}")
    return _eval_due(t, plan, cursor.step)
