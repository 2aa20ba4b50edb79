"""A training process SIGKILLed at named moments (mid evaluation, generation, grading, the update, between the
metric sinks, mid checkpoint write) and resumed after each kill ends exactly where an uninterrupted
seeded run ends: every step's rollouts, grades, metric rows and evaluations stored once (none
lost, none duplicated, none half-written) and a bit-identical adapter.

Bit-identical is a fair demand here: the tiny model runs on one thread with one request per
forward pass, every rollout samples from its own seed, and a checkpoint restores the weights,
the optimizer and the RNG states, so a re-run step computes the same floating point as the
first run of it.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from arft.app.train import train
from arft.config import load_job
from arft.tracing.run_dir import RunDir
from arft.tracing.store import RunStore
from tests.integration.test_train import adapter, tiny, write_job
from tests.training import LengthGrader

ROOT = Path(__file__).resolve().parents[2]
KILLS = ["eval:2:2", "generation:3:4", "grading:3:2", "update:4", "metrics:4:1", "checkpoint:4:3"]
"""The step-2 evaluation's 2nd of 4 rollouts stored (after the step-2 checkpoint: the evaluation runs
beside step 3's rollouts, and the resumed run must run it again); step 3's 4th of 6 rollouts stored;
step 3's 2nd grade; step 4's update; step 4's metric row in the store but not yet in metrics.jsonl;
the step-4 checkpoint's 3rd file (before the step-4 evaluation)."""


def kill_job(tmp: Path) -> Path:
    """4 steps of 2 tasks x 3 rollouts, checkpoints at steps 2 and 4, evaluations at 0, 2 and 4."""
    path = write_job(tmp)
    spec = json.loads(path.read_text())
    spec["training"].update({"max_steps": 4, "checkpoint_every": 2})
    # No KV reuse: a prefix stored by the step-2 evaluation would serve step 3's prompts in the
    # uninterrupted run but not in the resumed one, and KV computed in another batch differs in
    # the last float bits, so the logprobs (and the update) would too: same tokens, other floats.
    spec["engine"] = {"prefix_cache_mb": 0}
    spec["method"]["reinforcement"]["hyperparameters"]["eval_interval"] = 2
    path.write_text(json.dumps(spec))
    return path


class Children:
    """Training children forked by ``kill_child --serve`` (torch and arft imported once, not in
    each child), one at a time; ``run`` gives a child's exit code as ``subprocess`` would."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.server = subprocess.Popen([sys.executable, "-m", "tests.integration.kill_child", "--serve"], cwd=ROOT,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def __enter__(self) -> "Children":
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server.stdin is not None
        self.server.stdin.close()  # the server ends with its input
        self.server.wait(timeout=60)

    def run(self, job: Path, run_dir: Path, fault: str, resume: bool) -> int:
        assert self.server.stdin is not None and self.server.stdout is not None
        argv = [str(job), str(run_dir), fault] + (["--resume"] if resume else [])
        self.server.stdin.write(json.dumps({"argv": argv, "log": str(self.log)}) + "\n")
        self.server.stdin.flush()
        answer = self.server.stdout.readline()
        assert answer, f"the fork server ended (exit {self.server.wait()})\n{self.log.read_text()[-3000:]}"
        return int(answer)


def timed(name: str) -> bool:
    """A wall-clock metric (``time/step_s``, ``eval/time_generate_s``, latencies): never the same twice."""
    return name.startswith("time/") or "/time_" in name or "critical_path_s" in name


def recorded(run_dir: Path) -> dict[str, Any]:
    """What a run directory holds, in a form two runs can be compared by (times left out)."""
    with RunStore(RunDir(run_dir).store) as store:
        rollouts = sorted((r.run_id, r.step, r.task_id, r.sample_index, r.token_ids, r.reward)
                          for r in store.rollouts())
        metrics = sorted((m["step"], m["name"], None if timed(m["name"]) or m["value"] != m["value"] else m["value"])
                         for m in store.metrics("train"))  # NaN (no value) as None: NaN != NaN
        runs = sorted((r["run_id"], r["status"]) for r in store.runs())
    con = sqlite3.connect(RunDir(run_dir).store)
    ungraded = con.execute("SELECT count(*) FROM rollouts LEFT JOIN grades USING (trace_id) "
                           "WHERE grades.trace_id IS NULL").fetchone()[0]
    con.close()
    lines = [json.loads(x) for x in RunDir(run_dir).metrics.read_text().splitlines()]
    return {"rollouts": rollouts, "metrics": metrics, "runs": runs, "ungraded": ungraded,
            "jsonl": [(row["step"], sorted(row)) for row in lines]}


def eval_rollouts(run_dir: Path, step: int) -> int:
    with RunStore(RunDir(run_dir).store) as store:
        return sum(1 for r in store.rollouts(f"train:eval-{step:06d}"))


def step_rollouts(run_dir: Path, step: int) -> int:
    with RunStore(RunDir(run_dir).store) as store:
        return sum(1 for r in store.rollouts("train") if r.step == step)


async def test_killed_and_resumed_run_equals_the_uninterrupted_one(tmp_path: Path, tokenizer: Any) -> None:
    job_path = kill_job(tmp_path)
    run, log = tmp_path / "killed", tmp_path / "children.log"
    with Children(log) as children:  # the fork server imports beside the uninterrupted run
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as the children run: another thread count sums floats in another order
        try:
            straight = await train(load_job(job_path), tmp_path / "straight", model=tiny(tokenizer),
                                   tokenizer=tokenizer, grader=LengthGrader(), max_batch_size=1)
        finally:
            torch.set_num_threads(threads)
        assert set(straight.evals) == {0, 2, 4}

        for i, fault in enumerate(KILLS):
            code = children.run(job_path, run, fault, resume=i > 0)
            assert code == -signal.SIGKILL, f"{fault}: exit {code}, not killed\n{log.read_text()[-3000:]}"
            assert RunDir(run).latest_checkpoint() == RunDir(run).checkpoints / "step-000002"
            if fault == "eval:2:2":  # half an evaluation at the checkpoint's step: what the resume re-runs
                assert eval_rollouts(run, 2) == 2
            if fault == "generation:3:4":  # the killed process left part of step 3 behind: what the resume must drop
                assert step_rollouts(run, 3) == 4
        assert (RunDir(run).checkpoints / ".tmp-step-000004").is_dir()  # the last kill was mid-write
        assert children.run(job_path, run, "none", resume=True) == 0, log.read_text()[-3000:]

    got, want = recorded(run), recorded(tmp_path / "straight")
    # per step: 6 training rollouts at steps 1-4, 4 evaluation rollouts at steps 0, 2 and 4
    per_step: dict[tuple[str, int | None], int] = {}
    for run_id, step, *_ in got["rollouts"]:
        per_step[run_id, step] = per_step.get((run_id, step), 0) + 1
    assert per_step == {**{("train", s): 6 for s in (1, 2, 3, 4)},
                        **{(f"train:eval-{s:06d}", s): 4 for s in (0, 2, 4)}}
    assert got["rollouts"] == want["rollouts"]  # the same samples and rewards, each exactly once
    assert got["ungraded"] == want["ungraded"] == 0  # every rollout has its grade row
    assert got["metrics"] == want["metrics"]  # every metric row once, with the same value (times aside)
    assert got["jsonl"] == want["jsonl"] and [s for s, _ in got["jsonl"]] == [0, 1, 2, 2, 3, 4, 4]
    assert got["runs"] == want["runs"] and all(status == "completed" for _, status in got["runs"])
    checkpoints = sorted(p.name for p in RunDir(run).checkpoints.iterdir())
    assert checkpoints == ["latest", "step-000002", "step-000004"]  # nothing half-written left
    assert not RunDir(run).workspaces.exists() or not any(RunDir(run).workspaces.iterdir())
    a, b = adapter(tmp_path / "straight"), adapter(run)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # bit-identical
    check_the_soaks_audit(run, tmp_path / "straight", tmp_path / "broken")


def check_the_soaks_audit(run: Path, straight: Path, broken: Path) -> None:
    """bench/kill_soak.py's audit finds nothing wrong here, and counts what the old bug did."""
    import importlib.util
    import shutil

    from arft.records import new_trace_id

    spec = importlib.util.spec_from_file_location("kill_soak", ROOT / "bench" / "kill_soak.py")
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    clean = soak.audit(run, straight)
    assert all(f["lost"] == f["duplicated"] == f["extra"] == 0 for f in clean["figures"].values())
    assert clean["figures"]["rollouts"] == {"expected": 36, "lost": 0, "duplicated": 0, "extra": 0, "differing": 0}
    assert not any(clean["half_written"].values()) and clean["adapter"]["identical"]

    shutil.copytree(run, broken)  # what the killed run left beside the re-run one before the fix
    with RunStore(RunDir(broken).store) as store:
        step4 = [r for r in store.rollouts("train") if r.step == 4]
        store.add_rollout(step4[0].model_copy(update={"trace_id": new_trace_id()}))
        store.add_metrics("train", 4, {"update/tokens": 1.0})
    with RunDir(broken).metrics.open("a") as f:
        f.write('{"step": 4, "train/rew')
    hurt = soak.audit(broken, straight)
    assert hurt["figures"]["rollouts"]["duplicated"] == hurt["figures"]["grades"]["duplicated"] == 1
    assert hurt["figures"]["metric rows (store)"]["duplicated"] == 1
    assert hurt["half_written"]["metrics.jsonl lines not JSON"] == 1
