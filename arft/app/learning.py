"""What every weight-changing command shares (``arft train``, ``arft sft``): the policy and the
engine that samples from it, the progress hooks, the periodic evaluation of the validation set,
resuming from a checkpoint (the interrupted process's records after it are dropped first, so a
re-run step is stored once), the evaluations a resumed run already made, and a warm start from
another run's weights (``training.init_from``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arft.app.run import Run
from arft.config import JobSpec
from arft.engines.base import TokenEngine
from arft.engines.factory import transformers_options
from arft.engines.transformers.engine import TransformersEngine
from arft.metrics.sinks import JsonlSink, MetricSink
from arft.metrics.summary import EvalSummary, flat_metrics, summarize
from arft.models.loading import load_model
from arft.records import Rollout, Task
from arft.sandbox.workspace import remove_workspace
from arft.tracing.run_dir import RunDir
from arft.tracing.store import Discarded, RunStore
from arft.trainer.checkpoints import Cursor, discard_checkpoints_after, load_checkpoint
from arft.trainer.learner import Learner, wrap_policy
from arft.trainer.merge import run_job
from arft.trainer.memory import release_memory

EVAL_SEED_OFFSET = 7_919_000
"""Evaluations sample with the same seeds every time, so eval curves compare like with like."""
EVAL_METRICS = "eval"
"""An evaluation's metrics are named ``eval/...`` (rows at its step in the training run's metrics)."""

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
    point: Callable[[str, int], None] = lambda name, step: None
    """Called at named moments of a step (``arft.app.faults.POINTS``) with the step's number, so
    a fault-injection test can kill the process exactly there; nothing else needs it."""


@dataclass
class Session:
    """The live objects of one weight-changing run: its rollouts, learner, evaluation set, metric
    sinks, and the id its records carry in the store (``train``, ``sft``)."""

    run: Run
    learner: Learner
    run_id: str
    val_tasks: list[Task]
    hooks: Hooks
    result: TrainResult
    sinks: list[MetricSink] = field(default_factory=list)
    """The store and metrics.jsonl always; TensorBoard / W&B / MLflow as ``job.logging`` says."""

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
    store.create_run(eval_id, "eval", {"step": step})
    rollouts = await s.run.runner.run_many(s.val_tasks, k, run_id=eval_id, step=step,
                                           seed=job.seed + EVAL_SEED_OFFSET, on_done=on_done(s.hooks, "eval", step))
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


def _eval_runs(store: RunStore, run_id: str) -> list[tuple[str, int, bool]]:
    """(eval run id, step, completed) of every evaluation ``run_id`` made, oldest first."""
    found = []
    for r in store.runs():
        step = (r.get("job") or {}).get("step")
        if r["kind"] == "eval" and r["run_id"].startswith(f"{run_id}:eval-") and step is not None:
            found.append((r["run_id"], int(step), r["status"] == "completed"))
    return found


def stored_evals(store: RunStore, run_id: str, up_to: int) -> dict[int, EvalSummary]:
    """The evaluations a resumed run already made (the baseline among them), from its store."""
    evals: dict[int, EvalSummary] = {}
    for eval_id, step, _ in _eval_runs(store, run_id):
        rollouts = store.rollouts(eval_id) if step <= up_to else []
        if rollouts:
            evals[step] = summarize(rollouts)
    return evals


@dataclass(frozen=True)
class Rewound:
    """What ``rewind`` dropped: store rows, metrics.jsonl lines, checkpoint and workspace folders."""

    store: Discarded
    jsonl_lines: int
    checkpoints: int
    workspaces: int

    def describe(self) -> str:
        s = self.store
        return (f"dropped what the interrupted run recorded after its checkpoint: {s.rollouts} rollouts "
                f"({s.grades} grades, {s.tool_calls} tool calls), {s.runs} evaluations, {s.metrics} metric "
                f"values, {self.jsonl_lines} metrics.jsonl lines, {self.checkpoints} unfinished checkpoints, "
                f"{self.workspaces} leftover workspaces")


def rewind(run: Run, run_id: str, step: int) -> Rewound:
    """Drop everything ``run_id`` recorded after checkpoint ``step``, so the steps a resumed run
    re-runs are recorded once: its rollouts (with their grades and tool calls), metric rows and
    evaluations after ``step``, and an evaluation of ``step`` that did not finish with its metric
    rows (one store transaction), then metrics.jsonl's rows likewise (rewritten atomically),
    checkpoint folders after ``step`` or half-written, and the workspaces of rollouts the kill
    interrupted. Each part is idempotent: a kill during the rewind is repaired by the next resume.

    A step's checkpoint is written before its evaluation (which runs beside the next step's
    rollouts), so the kill may have cut that evaluation short: the resumed run runs it again."""
    rd = run.run_dir
    evals = _eval_runs(run.store, run_id)
    cut_short = [eval_id for eval_id, at, completed in evals if at == step and not completed]
    later = [eval_id for eval_id, at, _ in evals if at > step] + cut_short
    its_rows = f"{EVAL_METRICS}/" if cut_short else ""
    discarded = run.store.discard_after(run_id, step, later, metrics_at_step=its_rows)
    lines = JsonlSink(rd.metrics).discard_after(step, rows_at_step=its_rows)
    checkpoints = discard_checkpoints_after(rd.path, step)
    workspaces = sorted(rd.workspaces.iterdir()) if rd.workspaces.is_dir() else []
    for w in workspaces:  # nothing runs in this run directory before the resumed run starts
        remove_workspace(w)
    return Rewound(discarded, lines, len(checkpoints), len(workspaces))


def resume(s: Session, checkpoint: Path) -> Cursor:
    """Continue ``s`` from ``checkpoint``: weights, optimizer and RNG states back, the interrupted
    process's later records dropped (``rewind``), the evaluations made before it kept. Returns
    the cursor to continue from."""
    cursor, _ = load_checkpoint(checkpoint, s.learner)
    rewound = rewind(s.run, s.run_id, cursor.step)
    if rewound.store.total or rewound.jsonl_lines or rewound.checkpoints or rewound.workspaces:
        s.hooks.status(rewound.describe())
    s.result.evals.update(stored_evals(s.run.store, s.run_id, cursor.step))
    s.hooks.status(f"resumed from {checkpoint.name}")
    return cursor


def policy_engine(job: JobSpec, model: Any, tokenizer: Any, max_batch_size: int | None,
                  run_dir: Path | None = None, on_status: Callable[[str], None] = lambda s: None
                  ) -> tuple[Any, TokenEngine, Any]:
    """(policy, an engine sampling from it, tokenizer): the model the job names, or the one given.
    With ``engine.type: vllm`` the engine is a vLLM server (its log in ``run_dir``). A
    transformers engine samples from its own copy of the policy (``SnapshotEngine``) with
    ``training.max_off_policy_steps`` above 0, or when it merges LoRA into the weights
    (``engine.lora``); ``sync_engine`` keeps either on the policy's weights. Otherwise the
    engine samples from the policy itself."""
    if model is None:
        dtype = "float32" if job.training.finetune == "full" else job.engine.dtype
        model, tokenizer = load_model(job.model_ref, dtype=dtype, device=job.engine.device)
    policy = wrap_policy(model, job.training, job.seed)
    policy.eval()
    if job.engine.type == "vllm":
        from arft.engines.vllm.engine import VLLMEngine

        return policy, VLLMEngine.from_job(job, run_dir or Path("."), tokenizer, on_status), tokenizer
    from arft.engines.transformers.snapshot import SnapshotEngine, merges_lora

    options = transformers_options(job.engine, max_batch_size)
    merge = merges_lora(job.engine.lora, policy)
    if job.training.max_off_policy_steps > 0:  # the next step samples while this one updates
        if str(policy.device).startswith("cpu"):
            on_status("async rollouts on a CPU: generation and the update share its cores, so they "
                      "overlap little (bench/demo_vllm.py: 1.23x slower on 2 cores); they pay where "
                      "generation has its own device or tools are slow")
    elif not merge:
        return policy, TransformersEngine(policy, tokenizer, **options), tokenizer
    return policy, SnapshotEngine.of(policy, tokenizer, merge_lora=merge, **options), tokenizer


async def sync_engine(s: Session, step: int) -> dict[str, float]:
    """Put the policy's weights into an engine that samples from its own copy (vLLM, or the
    ``SnapshotEngine`` of async rollouts); an engine sharing the policy needs nothing. The
    seconds it took, as a metric."""
    sync = getattr(s.run.engine, "sync", None)
    if sync is None:
        return {}
    return {"time/weight_sync_s": await sync(s.learner.policy, step)}


def init_path(job: JobSpec) -> Path | None:
    """``training.init_from`` as an absolute path (relative paths: the job file's folder)."""
    init = job.training.init_from
    if init is None:
        return None
    path = Path(init).expanduser()
    return path if path.is_absolute() else (job.base_dir / path).resolve()


def warm_start(learner: Learner, job: JobSpec, source: Path) -> Path:
    """Load the weights of ``source``'s latest checkpoint (a ``train`` or ``sft`` run) into the
    learner's policy; the optimizer starts fresh. Returns the checkpoint used.

    Raises ``ValueError`` when the run has no checkpoint, or its model or adapter differ from
    ``job``'s (the weights would not fit, or would mean something else).
    """
    from safetensors.torch import load_file

    checkpoint = RunDir(source).latest_checkpoint()
    if checkpoint is None:
        raise ValueError(f"training.init_from: {source} has no checkpoint yet (did its `arft sft` "
                         "or `arft train` finish a step?)")
    theirs = run_job(source)
    _check_compatible(job, theirs, source)
    learner.load_trainable_state(load_file(str(checkpoint / "trainable.safetensors")))
    return checkpoint


def _check_compatible(job: JobSpec, theirs: JobSpec, source: Path) -> None:
    if theirs.model_ref != job.model_ref:
        raise ValueError(f"training.init_from: {source} trained {theirs.model_ref}, this job trains "
                         f"{job.model_ref}: start from a run of the same model")
    mine, other = job.training, theirs.training
    if other.finetune != mine.finetune:
        raise ValueError(f"training.init_from: {source} is a {other.finetune} run and this job is "
                         f"{mine.finetune}: use the same training.finetune (or `arft merge` it and "
                         "make the merged model this job's model)")
    if mine.finetune == "lora" and other.lora != mine.lora:
        raise ValueError(f"training.init_from: {source} trained a different adapter "
                         f"({other.lora.model_dump()}) than this job's training.lora "
                         f"({mine.lora.model_dump()}): use the same LoRA settings")


def apply_init_from(s: Session) -> None:
    """A fresh run with ``training.init_from`` starts from that run's weights."""
    source = init_path(s.run.job)
    if source is not None:
        checkpoint = warm_start(s.learner, s.run.job, source)
        s.hooks.status(f"warm start from {checkpoint}")
