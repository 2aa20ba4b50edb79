"""``arft sft``: a supervised warm start from demonstrations, before reinforcement learning.

The standard recipe of the field (rejection-sampling fine-tuning, expert iteration): imitate good
trajectories (a teacher's, production's, or the policy's own best-of-K successes), then run RL
from there. The run looks like an ``arft train`` run: the same policy (LoRA or full), checkpoints
and exact resume, metrics to the same sinks (run id ``sft``), an evaluation of the validation set
before the first step and after the last. ``training.init_from: RUN_DIR`` then starts
``arft train`` from its weights; ``arft merge`` exports them.

Each step takes ``batch_size`` demonstrations (reshuffled every epoch) and takes one optimizer
step on the mean negative log-likelihood of their assistant tokens; prompts and tool results are
masked out (``arft.rollout.demonstration``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arft.app.policy import apply_init_from, policy_engine, sync_engine
from arft.app.resume import resume as resume_from
from arft.app.run import job_record, open_run
from arft.app.session import Hooks, Session, TrainResult, evaluate_step
from arft.app.sft_data import load_demonstrations, select, tokenize
from arft.config import JobSpec
from arft.data.order import Cursor, batch_for
from arft.data.splits import load_split
from arft.graders.base import Grader
from arft.metrics.sinks import close_sinks, open_sinks
from arft.records import TrainBatch
from arft.rollout.demonstration import DemoError, DemoTokens
from arft.tracing.run_dir import RunDir
from arft.trainer.checkpoints import CheckpointError, save_checkpoint
from arft.trainer.learner import Learner, base_learning_rate

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SFT_RUN_ID = "sft"
"""The run id of a warm start in its store (its evaluations are ``sft:eval-NNNNNN``)."""


@dataclass(frozen=True)
class SftOptions:
    """How to pick the demonstrations and how long to imitate them."""

    epochs: int = 3
    """Passes over the demonstrations."""
    batch_size: int = 8
    """Demonstrations per optimizer step."""
    learning_rate: float | None = None
    """Default: the job's (``training.learning_rate`` x ``learning_rate_multiplier``)."""
    min_reward: float | None = None
    """Keep only rollouts graded at least this (a run directory as the source)."""
    min_scores: dict[str, float] = field(default_factory=dict)
    """Keep only rollouts whose grader sub-scores reach these (``{"verified": 1.0}``)."""
    best_of: int | None = None
    """Keep the best K rollouts of each task."""
    limit: int | None = None
    """Use the first N demonstrations only (e.g. the talk's "10 examples")."""
    evaluate: bool = True
    """Evaluate the validation set before the first step and after the last."""


@dataclass
class SftResult(TrainResult):
    demos: int = 0
    recorded: int = 0
    """Demonstrations trained on their recorded token ids (the rest were rendered)."""
    dropped: dict[str, int] = field(default_factory=dict)


def _batch(demos: list[DemoTokens]) -> TrainBatch:
    return TrainBatch(input_ids=tuple(d.token_ids for d in demos), loss_mask=tuple(d.loss_mask for d in demos),
                      old_logprobs=tuple((0.0,) * len(d.token_ids) for d in demos),
                      advantages=(1.0,) * len(demos), trace_ids=tuple(d.task_id for d in demos))


async def sft(job: JobSpec, data: Path, run_dir: RunDir | Path, *, options: SftOptions = SftOptions(),
              resume: bool = False, model: Any = None, tokenizer: "PreTrainedTokenizerBase | None" = None,
              grader: Grader | None = None, hooks: Hooks | None = None, max_batch_size: int | None = None) -> SftResult:
    """Fine-tune ``job``'s model on the demonstrations in ``data`` into ``run_dir``.

    Raises ``DemoError`` when no demonstration is left after filtering and rendering (the message
    lists why each was dropped), ``CheckpointError`` when ``resume`` finds no checkpoint.
    """
    rd, hooks = RunDir.of(run_dir), hooks or Hooks()
    checkpoint = rd.latest_checkpoint() if resume else None
    if resume and checkpoint is None:
        raise CheckpointError(f"{rd.path} has no checkpoint to resume from: start a new run without --resume")
    chosen = select(load_demonstrations(job, data), min_reward=options.min_reward, min_scores=options.min_scores,
                    best_of=options.best_of, limit=options.limit)
    val_tasks = load_split(job, "validation", job.training.eval_tasks) if options.evaluate else []
    if job.cluster.ray is not None:
        hooks.status("cluster.ray is set, but arft sft runs in this process (only arft train scales out on Ray)")
    hooks.status(f"loading model {job.model}")
    policy, engine, tokenizer = policy_engine(job, model, tokenizer, max_batch_size, rd.path, hooks.status)
    async with open_run(job, rd, engine=engine, close_engine=True, grader=grader,
                        splits={"validation": val_tasks}) as run:
        demos, dropped = await tokenize(run, chosen.demos)
        dropped.update(chosen.dropped)
        if not demos:
            raise DemoError(_nothing_left(data, dropped))
        total = options.epochs * max(len(demos) // min(options.batch_size, len(demos)), 1)
        lr = options.learning_rate or base_learning_rate(
            job.training, job.rl.hyperparameters.resolved("learning_rate_multiplier"))
        learner = Learner(policy, job.training, lr, total, 1.0, tokenizer.pad_token_id or 0)
        result = SftResult(rd.path, total, demos=len(demos), recorded=sum(d.recorded for d in demos),
                           dropped=dict(dropped))
        s = Session(run, learner, SFT_RUN_ID, val_tasks, hooks, result)
        cursor = Cursor()
        if checkpoint is not None:
            cursor = resume_from(s, checkpoint)
        else:
            apply_init_from(s)
            run.store.create_run(SFT_RUN_ID, "sft", job_record(job))
            _write_summary(rd, data, options, result)
        s.sinks = open_sinks(job, rd.path, run.store, SFT_RUN_ID,
                             resumed_from=cursor.step if checkpoint is not None else None)
        try:
            await _loop(s, demos, options, cursor, total)
        finally:
            close_sinks(s.sinks)
        run.store.finish_run(SFT_RUN_ID, "completed")
    return result


def _nothing_left(data: Path, dropped: dict[str, int]) -> str:
    reasons = "\n".join(f"  {n} x {why}" for why, n in sorted(dropped.items(), key=lambda kv: -kv[1]))
    return (f"{data}: no demonstration is left to train on{':' if reasons else ''}\n{reasons}\n"
            "loosen --min-reward / --best-of, or give demonstrations of the job's training tasks").strip()


def _write_summary(rd: RunDir, data: Path, options: SftOptions, result: SftResult) -> None:
    (rd.path / "sft.json").write_text(json.dumps(
        {"data": str(data.resolve()), "options": asdict(options), "demos": result.demos,
         "recorded": result.recorded, "dropped": result.dropped, "steps": result.steps}, indent=2))


async def _loop(s: Session, demos: list[DemoTokens], options: SftOptions, cursor: Cursor, total: int) -> None:
    job = s.run.job
    await sync_engine(s, cursor.step)  # a resumed or warm-started policy is not the base
    if cursor.step == 0 and s.val_tasks:
        await evaluate_step(s, 0)
    while cursor.step < total:
        t0 = time.perf_counter()
        idx, cursor = batch_for(cursor, len(demos), options.batch_size, job.seed)
        values = s.learner.supervised_update(_batch([demos[i] for i in idx]))
        values |= await sync_engine(s, cursor.step)  # an engine with its own weights follows
        values["sft/epoch"] = float(cursor.epoch)
        values["time/step_s"] = time.perf_counter() - t0
        s.metrics(cursor.step, values)
        s.result.history.append({"step": cursor.step, **values})
        s.hooks.step_done(cursor.step, values)
        last = cursor.step == total
        if cursor.step % job.training.checkpoint_every == 0 or last:
            save_checkpoint(s.run.run_dir.path, cursor, s.learner, {"total_steps": total})
            s.hooks.status(f"checkpoint step {cursor.step}")
    if s.val_tasks and total not in s.result.evals:
        await evaluate_step(s, total)

