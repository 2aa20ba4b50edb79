"""The session of a weight-changing run (``arft train``, ``arft sft``): its live objects, its
progress hooks, its metric rows and the periodic evaluation of the validation set.

A session runs over a ``SessionRun`` and a ``SessionLearner``: the in-process ``Run`` and
``Learner``, or a Ray run's ``ClusterRun`` and ``RemoteLearner`` (``arft.app.cluster``), which
offer the same faces. Where its weights come from is ``arft.app.policy``; continuing an
interrupted run is ``arft.app.resume``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from arft.config import JobSpec
from arft.metrics.sinks import MetricSink
from arft.metrics.summary import EvalSummary, flat_metrics, summarize
from arft.monitors import Alarm, Monitors
from arft.records import Rollout, Task, TrainBatch
from arft.seeds import eval_seed
from arft.telemetry import NO_TELEMETRY, Telemetry
from arft.tracing.run_dir import RunDir
from arft.tracing.store import RunStore
from arft.trainer.memory import release_memory

if TYPE_CHECKING:
    import torch

EVAL_METRICS = "eval"
"""An evaluation's metrics are named ``eval/...`` (rows at its step in the training run's metrics)."""


@dataclass
class TrainResult:
    """What a weight-changing run returns: its folder, its steps, its evaluations and metrics."""

    run_dir: Path
    steps: int
    evals: dict[int, EvalSummary] = field(default_factory=dict)
    """Step -> summary of the validation set at that step (0 = the baseline)."""
    history: list[dict[str, float]] = field(default_factory=list)
    alarms: list[Alarm] = field(default_factory=list)
    """The live monitors' alarms, in the order they fired (``arft.app.monitoring``)."""


@dataclass
class Hooks:
    """Callbacks for progress displays (all optional)."""

    status: Callable[[str], None] = lambda s: None
    phase: Callable[[str, int], None] = lambda name, total: None
    rollout_done: Callable[[Rollout], None] = lambda r: None
    step_done: Callable[[int, dict[str, float]], None] = lambda step, m: None
    eval_done: Callable[[int, EvalSummary], None] = lambda step, summary: None
    alarm: Callable[[Alarm], None] = lambda alarm: None
    """A live monitor's rule started to hold (``arft.app.monitoring``)."""
    point: Callable[[str, int], None] = lambda name, step: None
    """Called at named moments of a step (``arft.app.faults.POINTS``) with the step's number, so
    a fault-injection test can kill the process exactly there; nothing else needs it."""


class Runs(Protocol):
    """What a session asks of a run's rollout runner (``RolloutRunner``, ``ClusterRunner``)."""

    async def run_many(self, tasks: Sequence[Task], samples: int, *, run_id: str = "",
                       step: int | None = None, seed: int | None = None,
                       on_done: Callable[[Rollout], None] | None = None) -> list[Rollout]: ...


class SessionRun(Protocol):
    """What a session asks of its run (``arft.app.run.Run``, ``arft.app.cluster.driver.ClusterRun``)."""

    @property
    def job(self) -> JobSpec: ...

    @property
    def run_dir(self) -> RunDir: ...

    @property
    def store(self) -> RunStore: ...

    @property
    def runner(self) -> Runs: ...

    @property
    def engine(self) -> object:
        """Synced after every update when it is a ``SyncsWeights``."""
        ...


class SessionLearner(Protocol):
    """What a session asks of its learner (``arft.trainer.learner.Learner``, ``RemoteLearner``)."""

    @property
    def policy(self) -> Any:
        """What ``SyncsWeights.sync`` reads the weights from."""
        ...

    def update(self, batch: TrainBatch) -> dict[str, float]: ...

    def supervised_update(self, batch: TrainBatch) -> dict[str, float]: ...

    def trainable_state(self) -> dict[str, "torch.Tensor"]: ...

    def load_trainable_state(self, state: dict[str, "torch.Tensor"]) -> None: ...

    def weights_hash(self) -> str:
        """The content hash of the trainable weights (what engines' ``PolicyStamp`` must match)."""
        ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: dict[str, dict[str, object]]) -> None: ...


@dataclass
class Session:
    """The live objects of one weight-changing run: its rollouts, learner, evaluation set, metric
    sinks, and the id its records carry in the store (``train``, ``sft``)."""

    run: SessionRun
    learner: SessionLearner
    run_id: str
    val_tasks: list[Task]
    hooks: Hooks
    result: TrainResult
    sinks: list[MetricSink] = field(default_factory=list)
    """The store and metrics.jsonl always; TensorBoard / W&B / MLflow as ``job.logging`` says."""
    telemetry: Telemetry = NO_TELEMETRY
    """The run's OpenTelemetry spans (``logging.opentelemetry``; a no-op by default, and on Ray)."""
    monitors: Monitors | None = None
    """The live monitors of ``arft train`` (``job.monitors``); None where none run (``arft sft``)."""

    def metrics(self, step: int, values: dict[str, float]) -> None:
        """One metric row to every sink (the ``metrics`` point after each)."""
        for sink in self.sinks:
            sink.log(step, values)
            self.hooks.point("metrics", step)


async def evaluate_step(s: Session, step: int) -> EvalSummary:
    """Evaluate the current weights on the validation tasks (stored as ``RUN_ID:eval-STEP``)."""
    job, store = s.run.job, s.run.store
    k = job.rl.hyperparameters.resolved("eval_samples")
    s.hooks.phase(f"eval @ step {step}", len(s.val_tasks) * k)
    eval_id = f"{s.run_id}:eval-{step:06d}"
    n = 1
    while store.has_run(eval_id):  # a fresh run in a used run directory: keep both (a resume drops later ones)
        eval_id, n = f"{s.run_id}:eval-{step:06d}-r{n}", n + 1
    store.create_run(eval_id, "eval", {"step": step, "split": "validation"})  # arft export reads the split
    with s.telemetry.evaluation(eval_id, step):
        rollouts = await s.run.runner.run_many(s.val_tasks, k, run_id=eval_id, step=step, seed=eval_seed(job.seed),
                                               on_done=on_done(s.hooks, "eval", step))
    release_memory()
    summary = summarize(rollouts)
    s.metrics(step, flat_metrics(summary, EVAL_METRICS))
    store.finish_run(eval_id, "completed")  # last: a completed evaluation has all its metric rows
    s.result.evals[step] = summary
    s.hooks.eval_done(step, summary)
    return summary


def on_done(hooks: Hooks, point: str, step: int) -> Callable[[Rollout], None]:
    """A runner's per-rollout callback: the display's ``rollout_done``, then ``point``."""

    def done(rollout: Rollout) -> None:
        hooks.rollout_done(rollout)
        hooks.point(point, step)

    return done
