"""Expert iteration as one command (``arft train JOB --warm-start K``): sample K rollouts of each
training task with the untrained policy, keep the best success of each task, imitate them
(``arft sft``), then run RL from there (``training.init_from``).

With ``training.rescue`` the samples are drawn with its hint in the prompt (``arft.app.rescue``):
where the untrained policy never succeeds on the plain prompt, the hint can find the successes to
imitate. They are imitated from the prompts *without* the hint (``arft.app.sft_data`` lays each
out on the job's own task), so the warm start teaches acting without it.

Everything lands under the RL run directory: ``warm-start/samples`` (an ``arft eval`` run of the
training tasks) and ``warm-start/sft`` (the warm start), so ``arft view`` and ``arft report`` can
read each part.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arft.app.evaluate import evaluate
from arft.app.rescue import hinted_tasks, with_hint
from arft.app.session import Hooks
from arft.app.sft import SftOptions, SftResult, sft
from arft.config import JobSpec
from arft.data.splits import load_split
from arft.engines.factory import Policy, build_engine
from arft.graders.base import Grader
from arft.rollout.demonstration import DemoError
from arft.tracing.run_dir import RunDir

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class WarmStart:
    """What the warm start samples and keeps."""

    samples: int = 8
    """Rollouts per training task (the K of best-of-K)."""
    tasks: int | None = None
    """Sample only the first N training tasks (default: all)."""
    min_reward: float | None = None
    """A success earns at least this (default: more than the lowest reward any sample earned)."""
    sft: SftOptions = SftOptions(epochs=6, batch_size=4, best_of=1, evaluate=False)
    """How the kept successes are imitated (``best_of`` 1: one per task, so no task dominates)."""


def warm_start_dir(run_dir: RunDir) -> Path:
    return run_dir.path / "warm-start"


async def expert_iteration(job: JobSpec, run_dir: RunDir | Path, plan: WarmStart, *, grader: Grader | None = None,
                           hooks: Hooks | None = None, model: Any = None,
                           tokenizer: "PreTrainedTokenizerBase | None" = None,
                           max_batch_size: int | None = None) -> tuple[JobSpec, SftResult]:
    """Sample, keep the successes, imitate them; returns ``job`` with ``training.init_from`` set to
    the warm start (for ``arft.app.train.train``) and the warm start's result.

    Raises ``DemoError`` when no sample succeeded (the message says how to get some).
    """
    hooks, job = hooks or Hooks(), with_hint(job)
    root = warm_start_dir(RunDir.of(run_dir))
    tasks = load_split(job, "train", plan.tasks)
    hint = job.training.rescue.hint if job.training.rescue is not None else None
    if hint is not None:
        tasks = hinted_tasks(tasks, hint)
    hooks.status(f"warm start: {plan.samples} samples of {len(tasks)} training tasks"
                 + (" (with training.rescue's hint in the prompt)" if hint is not None else ""))
    hooks.phase("warm start: sampling", len(tasks) * plan.samples)
    engine = None if model is None else build_engine(  # else the job's own, built by the evaluation
        job, policy=Policy(model, tokenizer), role="expert_iteration", max_batch_size=max_batch_size)
    samples = await evaluate(job, tasks, plan.samples, root / "samples", engine=engine, grader=grader,
                             split="train", on_status=hooks.status, on_done=hooks.rollout_done)
    if engine is not None:
        await engine.aclose()
    min_reward = plan.min_reward
    if min_reward is None:  # a success: better than the worst any sample did
        min_reward = min((r.reward for r in samples.rollouts if r.reward is not None), default=0.0) + 1e-9
    options = replace(plan.sft, min_reward=min_reward)
    try:
        result = await sft(job, root / "samples", root / "sft", options=options, grader=grader, hooks=hooks,
                           model=model, tokenizer=tokenizer, max_batch_size=max_batch_size)
    except ValueError as e:
        raise DemoError(f"warm start: {e}\nno sample earned {min_reward:g} or more: sample more "
                        "(--warm-start K), or start without a warm start") from None
    training = job.training.model_copy(update={"init_from": str(root / "sft")})
    return job.model_copy(update={"training": training}), result
