"""The Ray actors of a scaled-out run: plain classes, made actors by ``arft.app.cluster.driver``
(``ray.remote(...)``), so this module imports nothing from Ray and runs in tests as is.

* ``EngineReplica``: ``arft.engines.factory``'s engine for the ``replica`` role: a
  ``TransformersEngine`` over its own copy of the policy (``load`` writes the learner's published
  weights between two forward passes, or syncs a merged-LoRA copy), or with ``engine.type: vllm``
  a vLLM server on the replica's node (``load`` syncs it as a single-process run does). A replica that
  restarts after a crash asks the learner for the latest published weights before it serves.
* ``RolloutWorker``: the job's tools, grader and a ``RolloutRunner`` whose engine is
  ``RemoteEngine`` (its replica); ``run_one`` runs one whole rollout there, so tool traffic and
  sandboxes stay on the worker's node. It keeps no store: the driver writes what it returns.
* ``LearnerActor``: the policy, the optimizer and the ``Learner``; ``publish`` keeps the weights
  the replicas should sample from.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from arft.cpu import threads as cpu_threads
from arft.config import JobSpec, local_model
from arft.engines.base import EngineError, Generation, SamplingParams, SyncsWeights, WritesWeights
from arft.models.weights_hash import weights_hash
from arft.records import PolicyStamp, Rollout, Task, TrainBatch

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from arft.engines.base import TokenEngine
    from arft.graders.base import Grader

RETRIES = 3
"""Times a generate call is retried when its replica died (it restarts meanwhile)."""


def _node() -> tuple[str, int]:
    """(Ray node id, process id) of the calling actor."""
    import ray

    return ray.get_runtime_context().get_node_id(), os.getpid()


def _load_model(job: JobSpec, model: Any, tokenizer: "PreTrainedTokenizerBase | None") -> tuple[Any, Any]:
    from arft.models.loading import load_model

    if model is not None:
        return model, tokenizer
    local = local_model(job.engine)
    dtype = "float32" if job.training.finetune == "full" else local.dtype
    return load_model(job.model_ref, dtype=dtype, device=local.device)


class LearnerActor:
    """The policy and its optimizer; every weight change happens here."""

    def __init__(self, job: JobSpec, total_steps: int, model: Any = None,
                 tokenizer: "PreTrainedTokenizerBase | None" = None) -> None:
        from arft.trainer.learner import Learner, base_learning_rate, wrap_policy

        model, tokenizer = _load_model(job, model, tokenizer)
        policy = wrap_policy(model, job.training, job.seed)
        policy.eval()
        lr = base_learning_rate(job.training, job.rl.hyperparameters.resolved("learning_rate_multiplier"))
        self.learner = Learner(policy, job.training, lr, total_steps, job.sampling.temperature,
                               tokenizer.pad_token_id or 0)
        self.published: tuple[int, dict[str, Any]] | None = None

    def update(self, batch: TrainBatch) -> dict[str, float]:
        return self.learner.update(batch)

    def supervised_update(self, batch: TrainBatch) -> dict[str, float]:
        return self.learner.supervised_update(batch)

    def trainable_state(self) -> dict[str, Any]:
        return self.learner.trainable_state()

    def load_trainable_state(self, state: dict[str, "torch.Tensor"]) -> None:
        self.learner.load_trainable_state(state)

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, dict[str, object]]) -> None:
        self.learner.load_state_dict(state)

    def weights_hash(self) -> str:
        return self.learner.weights_hash()

    def publish(self, version: int) -> dict[str, Any]:
        """Keep the current weights as version ``version`` and return them (for the replicas)."""
        self.published = (version, self.learner.trainable_state())
        return self.published[1]

    def latest(self) -> tuple[int, dict[str, Any]] | None:
        """The last published (version, weights), for a replica that restarted."""
        return self.published

    def where(self) -> tuple[str, int]:
        return _node()


class EngineReplica:
    """One engine: continuous batching over a copy of the policy."""

    def __init__(self, job: JobSpec, learner: Any = None, model: Any = None,
                 tokenizer: "PreTrainedTokenizerBase | None" = None, engine: "TokenEngine | None" = None) -> None:
        self.spec = job.training
        self._policy: Any = None
        """With ``engine.type: vllm`` or a merged-LoRA engine: a copy of the policy that published
        weights are loaded into before the engine syncs from it (vLLM reads weights from files; the
        merged copy is base + adapter)."""
        if engine is not None:
            self.engine = engine
        else:
            self.engine, self._policy = self._engine(job, model, tokenizer)
        self.version = -1
        """The published weights served (-1: the base, nothing published yet)."""
        self.policy: PolicyStamp | None = None
        """The stamp of the published weights it loaded (their version and the hash of the state it
        received), carried by every generation; None before the first load."""
        self._learner = learner
        self._started: asyncio.Future[int] | None = None

    @staticmethod
    def _engine(job: JobSpec, model: Any, tokenizer: "PreTrainedTokenizerBase | None") -> tuple[Any, Any]:
        """The replica's engine (``arft.engines.factory``, role ``replica``) over its own copy of
        the policy, and that copy when the engine syncs from it (vLLM, merged LoRA)."""
        from arft.engines.factory import Policy, build_engine
        from arft.trainer.learner import wrap_policy

        model, tokenizer = _load_model(job, model, tokenizer)
        policy = wrap_policy(model, job.training, job.seed).eval()
        if job.engine.type != "vllm":  # the engine samples this copy: no gradients (vLLM's only stages weights)
            policy.requires_grad_(False)
        run_dir = Path(tempfile.mkdtemp(prefix="arft-replica-")) if job.engine.type == "vllm" else None
        engine = build_engine(job, policy=Policy(policy, tokenizer), role="replica", run_dir=run_dir)
        return engine, policy if isinstance(engine, SyncsWeights) else None

    async def close(self) -> None:
        """Stop what the engine started (a vLLM server)."""
        await self.engine.aclose()

    async def start(self) -> int:
        """Load the learner's latest published weights, once (a restarted replica must not serve
        the base weights); the version served. Every ``generate`` waits for it."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._fetch_latest())
        return await self._started

    async def _fetch_latest(self) -> int:
        if self._learner is not None:
            latest = await self._learner.latest.remote()
            if latest is not None:
                await self.load(latest[1], latest[0])
        return self.version

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        await self.start()
        gen = await self.engine.generate(prompt_ids, params)
        return gen if self.policy is None else gen.model_copy(update={"policy": self.policy})

    async def policy_stamp(self) -> PolicyStamp | None:
        """The stamp of the weights it samples from (what the trainer checks after each sync)."""
        return self.policy

    async def load(self, state: dict[str, "torch.Tensor"], version: int) -> int:
        """Sample from ``state`` (the learner's ``trainable_state`` published as ``version``) from
        the next forward pass on; an older version than the one served is ignored."""
        from arft.trainer.learner import load_trainable

        if version > self.version:
            if self._policy is not None and isinstance(self.engine, SyncsWeights):  # through the copy, then a sync
                await cpu_threads.to_thread(load_trainable, self._policy, self.spec, state)
                await self.engine.sync(self._policy, version)
            elif isinstance(self.engine, WritesWeights):  # the engine's own model, between two passes
                await cpu_threads.to_thread(self.engine.write_weights,
                                            lambda model: load_trainable(model, self.spec, state))
            else:
                raise TypeError(f"{type(self.engine).__name__} can neither sync nor write weights")
            self.version = version
            self.policy = PolicyStamp(version=version, hash=await cpu_threads.to_thread(weights_hash, state))
        return self.version

    def where(self) -> tuple[str, int]:
        return _node()


class RemoteEngine:
    """A ``TokenEngine`` in a rollout worker whose generations run on an ``EngineReplica`` actor
    (every turn of every rollout of this worker: session affinity). A call whose replica died
    is retried once it restarted; after ``RETRIES`` it fails with ``EngineError``, which marks the
    rollout ``infra_failed`` with the reason."""

    supports_constraints = True

    def __init__(self, replica: Any, tokenizer: "PreTrainedTokenizerBase") -> None:
        from arft.engines.grammar import ToolCallMasker

        self.replica, self.tokenizer = replica, tokenizer
        self.masker = ToolCallMasker(tokenizer, len(tokenizer), [tokenizer.eos_token_id])

    def check_grammar(self, grammar: Any) -> None:
        """Compile ``grammar`` here (the replica compiles the same one)."""
        self.masker.compile(grammar)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        from ray.exceptions import RayActorError

        for attempt in range(RETRIES + 1):
            try:
                return await self.replica.generate.remote(list(prompt_ids), params)
            except RayActorError as e:
                if attempt == RETRIES:
                    raise EngineError(f"the engine replica died {RETRIES + 1} times during this rollout "
                                      f"({e.__class__.__name__}); see `ray status` and the replica's log") from e
                await asyncio.sleep(1.0 * (attempt + 1))  # it restarts meanwhile (max_restarts)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """The replica belongs to the driver, which stops it."""


class RolloutWorker:
    """Runs whole rollouts (tools, sandboxes, grading) near its own tools."""

    def __init__(self, job: JobSpec, replica: Any, grader: "Grader | None" = None,
                 tokenizer: "PreTrainedTokenizerBase | None" = None) -> None:
        self.job, self.replica, self._grader, self._tokenizer = job, replica, grader, tokenizer
        self.runner: Any = None
        self._close: list[Any] = []

    async def start(self) -> tuple[str, int]:
        """Open the job's tools and grader; (node id, pid) of this worker."""
        from arft.graders.registry import build_grader
        from arft.models.loading import load_tokenizer
        from arft.rollout.runner import RolloutRunner
        from arft.tools.registry import open_toolbox

        if self.runner is None:
            tokenizer = self._tokenizer if self._tokenizer is not None else load_tokenizer(self.job.model_ref)
            grader = self._grader if self._grader is not None else build_grader(self.job.rl.grader, self.job.base_dir)
            if self._grader is None:
                from arft.graders.base import close_grader

                self._close.append(lambda: close_grader(grader))
            toolbox = await open_toolbox(self.job.rl.tools, self.job.base_dir)
            self._close.append(toolbox.aclose)
            workspaces = Path(tempfile.mkdtemp(prefix="arft-worker-"))
            self.runner = RolloutRunner.from_job(self.job, RemoteEngine(self.replica, tokenizer), toolbox, grader,
                                                 workspace_root=workspaces)
        return _node()

    async def run_one(self, task: Task, sample_index: int, run_id: str, step: int | None,
                      seed: int | None) -> Rollout:
        if self.runner is None:
            await self.start()
        return await self.runner.run_one(task, sample_index, run_id=run_id, step=step, seed=seed)

    async def close(self) -> None:
        for close in reversed(self._close):
            await close()
        self._close = []
