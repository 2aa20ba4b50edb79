"""The driver of a scaled-out run: it only schedules and writes the store.

``open_cluster_run(job, run_dir)`` connects to Ray, reserves one placement group for the whole
run (the learner, ``engine_replicas`` engines and ``rollout_workers`` workers, spread over the
nodes), starts the actors of ``arft.app.cluster.actors`` and yields a ``ClusterRun``: the same
``runner`` / ``engine`` / ``store`` faces the single-process trainer uses, so ``arft.app.train``
runs its own loop over it unchanged, plus a ``RemoteLearner`` in place of the in-process
``Learner``.

* ``ClusterRunner.run_many`` sends each rollout to a worker (round robin, the same per-rollout
  seeds as the in-process runner, so the data order and rollout counts match), awaits them with
  Ray's own futures, writes every returned rollout to the store in the driver (the single source
  of truth) and calls ``on_done``. A rollout whose worker died is sent again to the next worker
  (the dead one restarts, ``max_restarts``), so nothing is lost and nothing is stored twice;
  after ``max_restarts + 1`` failed tries, or ``rollout_timeout_s``, it raises, naming the task.
* ``ClusterEngines.sync`` publishes the learner's weights once into Ray's object store and every
  replica loads them before the next rollouts (a replica that restarts loads the latest itself);
  ``replica_stamps`` says which weights each replica holds, which the trainer checks after the sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arft.app.cluster import actors
from arft.config import JobSpec, RaySpec
from arft.errors import ArftError
from arft.records import PolicyStamp, Rollout, Task, TrainBatch
from arft.seeds import sample_seed
from arft.together import together
from arft.tracing.run_dir import RunDir
from arft.tracing.store import RunStore

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from arft.engines.base import TokenEngine
    from arft.graders.base import Grader


_RESTART_WAIT_S = 0.5
"""The first wait before resending a rollout whose worker is restarting (doubled on each try, up
to ``_RESTART_WAIT_MAX_S``): a loaded machine restarts an actor in seconds, and an immediate
resend may find it still down."""
_RESTART_WAIT_MAX_S = 8.0
_RESTART_PATIENCE_S = 120.0
"""How long a rollout waits, in all, for restarting workers before the run stops: a restart is
not a death (only deaths count against ``cluster.ray.max_restarts``), but one that never ends is."""


async def _pause(seconds: float) -> None:
    """The wait before resending to a restarting worker (its own name, so a test can count them)."""
    await asyncio.sleep(seconds)


class ClusterError(ArftError):
    """The cluster could not run the job (no cluster, too few resources, a lost learner)."""


@dataclass
class ClusterRunner:
    """``run_many`` over rollout worker actors (see the module docstring)."""

    workers: list[Any]
    store: RunStore
    spec: RaySpec
    owners: dict[str, int] = field(default_factory=dict)
    """trace_id -> the index of the worker that ran it."""
    resent: int = 0
    """Rollouts sent again because their worker died."""
    _next: itertools.count = field(default_factory=itertools.count)

    async def run_many(self, tasks: Sequence[Task], samples: int, *, run_id: str = "",
                       step: int | None = None, seed: int | None = None,
                       on_done: Callable[[Rollout], None] | None = None) -> list[Rollout]:
        """``samples`` rollouts of every task, in task order (as ``RolloutRunner.run_many``)."""

        async def one(i: int, task: Task, k: int) -> Rollout:
            rollout_seed = None if seed is None else sample_seed(seed, samples, i, k)
            rollout = await self._run_somewhere(task, k, run_id, step, rollout_seed)
            self.store.add_rollout(rollout)
            if on_done is not None:
                on_done(rollout)
            return rollout

        return await together(*(one(i, t, k) for i, t in enumerate(tasks) for k in range(samples)))

    async def _run_somewhere(self, task: Task, k: int, run_id: str, step: int | None,
                             seed: int | None) -> Rollout:
        from ray.exceptions import ActorUnavailableError, RayActorError

        tries = self.spec.max_restarts + 1
        deaths, waits, waited = 0, 0, 0.0
        while True:
            w = next(self._next) % len(self.workers)
            try:
                rollout: Rollout = await asyncio.wait_for(
                    self.workers[w].run_one.remote(task, k, run_id, step, seed), self.spec.rollout_timeout_s)
            except ActorUnavailableError as e:  # restarting, not dead: give it time to come back
                self.resent += 1
                if waited >= _RESTART_PATIENCE_S:
                    raise ClusterError(f"task {task.id}: its rollout's workers stayed unavailable (restarting) "
                                       f"for {waited:.0f} s ({e}); see `ray status` and the workers' logs, "
                                       "then resume with --resume") from e
                pause = min(_RESTART_WAIT_S * 2 ** waits, _RESTART_WAIT_MAX_S)
                await _pause(pause)
                waits, waited = waits + 1, waited + pause
                continue
            except RayActorError as e:
                self.resent += 1
                deaths += 1
                if deaths == tries:
                    raise ClusterError(f"task {task.id}: its rollout's worker died {tries} times ({e}); "
                                       "see `ray status` and the workers' logs, then resume with --resume") from e
                continue
            except TimeoutError:
                raise ClusterError(f"task {task.id}: a rollout did not return within "
                                   f"cluster.ray.rollout_timeout_s ({self.spec.rollout_timeout_s:.0f} s)") from None
            self.owners[rollout.trace_id] = w
            return rollout


@dataclass
class ClusterEngines:
    """The engine replicas, seen by the trainer as one engine with ``sync``."""

    replicas: list[Any]
    learner: Any
    version: int = 0

    async def sync(self, policy: Any, step: int) -> float:
        """Publish the learner's weights as ``step`` and load them into every replica (``policy``:
        the ``RemoteLearner``'s, unused: the weights are the learner actor's)."""
        import time

        start = time.perf_counter()
        weights = self.learner.publish.remote(step)  # one object, fetched by every replica
        await asyncio.gather(*(r.load.remote(weights, step) for r in self.replicas))
        self.version = step
        return time.perf_counter() - start

    async def replica_stamps(self) -> list[PolicyStamp | None]:
        """The stamp of the weights each replica samples from, in replica order."""
        return list(await asyncio.gather(*(r.policy_stamp.remote() for r in self.replicas)))

    async def aclose(self) -> None:
        """The replicas end with the run's placement group."""


class RemoteLearner:
    """The ``Learner`` calls the trainer and checkpoints make, forwarded to the learner actor."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.policy = actor  # what ``sync_engine`` hands to ``ClusterEngines.sync``

    def _get(self, ref: Any) -> Any:
        import ray
        from ray.exceptions import RayActorError

        try:
            return ray.get(ref)
        except RayActorError as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ClusterError(f"the learner actor was lost ({first}); the run stops here: continue it from "
                               "its last checkpoint with `arft train --resume RUN_DIR --ray ADDRESS`") from e

    def update(self, batch: TrainBatch) -> dict[str, float]:
        return self._get(self.actor.update.remote(batch))

    def supervised_update(self, batch: TrainBatch) -> dict[str, float]:
        return self._get(self.actor.supervised_update.remote(batch))

    def trainable_state(self) -> dict[str, Any]:
        return self._get(self.actor.trainable_state.remote())

    def load_trainable_state(self, state: dict[str, "torch.Tensor"]) -> None:
        self._get(self.actor.load_trainable_state.remote(state))

    def weights_hash(self) -> str:
        return self._get(self.actor.weights_hash.remote())

    def state_dict(self) -> dict[str, Any]:
        return self._get(self.actor.state_dict.remote())

    def load_state_dict(self, state: dict[str, dict[str, object]]) -> None:
        self._get(self.actor.load_state_dict.remote(state))


@dataclass
class ClusterRun:
    """What ``arft.app.train`` needs of a run (as ``arft.app.run.Run``), on a Ray cluster."""

    job: JobSpec
    run_dir: RunDir
    engine: ClusterEngines
    store: RunStore
    runner: ClusterRunner
    learner: RemoteLearner
    where: dict[str, list[tuple[str, int]]]
    """(node id, pid) of every actor: ``workers``, ``replicas``, ``learner``."""


def actor_prefix(run_dir: RunDir) -> str:
    """The start of the run's actor names (``…learner``, ``…replica-0``, ``…worker-0``): with
    ``ray.get_actor`` an operator (or a fault test) finds an actor of a run directory."""
    return f"arft:{run_dir.path.resolve()}:"


def connect(address: str | None) -> None:
    """``ray.init`` the cluster at ``address`` (``local``: a new one for this process)."""
    import ray

    if ray.is_initialized():
        return
    root = str(Path(__file__).resolve().parents[3])  # workers import arft (and tests' modules) from here
    env = {"env_vars": {"PYTHONPATH": root}}
    try:
        if address in (None, "local"):  # a new cluster for this process, even if one runs here
            ray.init(address="local", runtime_env=env, log_to_driver=False, include_dashboard=False)
        else:
            ray.init(address=address, runtime_env=env, log_to_driver=False)
    except ConnectionError as e:
        raise ClusterError(f"no Ray cluster at {address!r} ({e}): start one with `ray start --head`, or "
                           "pass its address (HOST:PORT) with --ray") from e


@contextlib.asynccontextmanager
async def open_cluster_run(job: JobSpec, run_dir: RunDir, total_steps: int, *, model: Any = None,
                           tokenizer: "PreTrainedTokenizerBase | None" = None, grader: "Grader | None" = None,
                           engine: "TokenEngine | None" = None,
                           ready_timeout_s: float = 300) -> AsyncIterator[ClusterRun]:
    """Start the run's actors on ``job.cluster.ray``'s cluster; stop them on the way out.
    ``model``/``tokenizer``/``grader``: objects to ship to the actors (tests), else the job's;
    ``engine``: a ready engine each replica serves instead of the model (benchmarks' stubs)."""
    import ray
    from ray.util.placement_group import remove_placement_group

    spec = job.cluster.ray
    assert spec is not None
    connect(spec.address)
    pg = await _reserve(spec, ready_timeout_s)
    started: list[Any] = []
    held: list[Any] = []  # the actors' arguments: a restarting actor rebuilds from them
    try:
        learner, replicas, workers = _start_actors(job, spec, pg, run_dir, total_steps, started, held,
                                                   model=model, tokenizer=tokenizer, grader=grader, engine=engine)
        where = {"learner": [await learner.where.remote()],
                 "replicas": [await r.where.remote() for r in replicas],
                 "workers": await asyncio.gather(*(w.start.remote() for w in workers))}
        with RunStore(run_dir.store) as store:
            runner = ClusterRunner(workers, store, spec)
            yield ClusterRun(job, run_dir, ClusterEngines(replicas, learner), store, runner,
                             RemoteLearner(learner), where)
    finally:
        for actor in started:
            if hasattr(actor, "close"):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(actor.close.remote(), 30)
        for actor in started:
            ray.kill(actor, no_restart=True)
        remove_placement_group(pg)


async def _reserve(spec: RaySpec, timeout_s: float) -> Any:
    """One placement group for the run: the learner, the replicas, the workers (spread over nodes)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    bundles = ([{"CPU": spec.learner_cpus, **({"GPU": spec.learner_gpus} if spec.learner_gpus else {})}]
               + [{"CPU": spec.engine_cpus, **({"GPU": spec.engine_gpus} if spec.engine_gpus else {})}]
               * spec.engine_replicas + [{"CPU": spec.worker_cpus}] * spec.rollout_workers)
    pg = placement_group(bundles, strategy="SPREAD")
    try:
        await asyncio.wait_for(pg.ready(), timeout_s)
    except TimeoutError:
        remove_placement_group(pg)
        raise ClusterError(f"the cluster cannot place the run's actors ({bundles}) within {timeout_s:.0f} s: "
                           f"it has {ray.cluster_resources()}; lower cluster.ray's worker/engine counts or CPUs, "
                           "or add nodes") from None
    return pg


def _start_actors(job: JobSpec, spec: RaySpec, pg: Any, run_dir: RunDir, total_steps: int, started: list[Any],
                  held: list[Any], **objects: Any) -> tuple[Any, list[Any], list[Any]]:
    """The learner, replicas and workers, each in its bundle of ``pg`` (appended to ``started``;
    their arguments' object refs to ``held``, which the caller keeps for the whole run)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    def on(i: int) -> dict[str, Any]:
        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)}

    # Put in the object store once; freed arguments would make an actor's restart fail.
    job_ref, grader_ref, tokenizer_ref = ray.put(job), ray.put(objects["grader"]), ray.put(objects["tokenizer"])
    model = {} if objects["model"] is None else {"model": ray.put(objects["model"]), "tokenizer": tokenizer_ref}
    stub = {} if objects["engine"] is None else {"engine": ray.put(objects["engine"])}
    held.extend([job_ref, grader_ref, tokenizer_ref, *model.values(), *stub.values()])
    restarts = {"max_restarts": spec.max_restarts, "max_task_retries": 0}
    name = actor_prefix(run_dir)
    learner = ray.remote(actors.LearnerActor).options(
        name=f"{name}learner", num_cpus=spec.learner_cpus, num_gpus=spec.learner_gpus,
        **on(0)).remote(job_ref, total_steps, **model)
    started.append(learner)
    replicas = [ray.remote(actors.EngineReplica).options(
        name=f"{name}replica-{i}", num_cpus=spec.engine_cpus, num_gpus=spec.engine_gpus, max_concurrency=1000,
        **restarts, **on(1 + i)).remote(job_ref, learner, **model, **stub) for i in range(spec.engine_replicas)]
    started.extend(replicas)
    concurrency = spec.worker_concurrency or max(1, job.rollout.concurrency // spec.rollout_workers)
    workers = [ray.remote(actors.RolloutWorker).options(
        name=f"{name}worker-{i}", num_cpus=spec.worker_cpus, max_concurrency=concurrency, **restarts,
        **on(1 + spec.engine_replicas + i)).remote(job_ref, replicas[i % len(replicas)], grader_ref, tokenizer_ref)
        for i in range(spec.rollout_workers)]
    started.extend(workers)
    return learner, replicas, workers
