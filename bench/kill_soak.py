"""A run SIGKILLed at random moments and resumed loses, duplicates and half-writes nothing; ends bit-identical.

Kill soak: SIGKILL a training run at random moments, resume it after each kill, and count what
its store and metrics.jsonl lost, duplicated or left half-written.

    python -m bench run kill_soak            # full size: the calculator demo, 10 steps, 5 kills
    python -m bench run kill_soak --steps 3 --kills 5 --tasks 2 --checkpoint-every 1 --tiny   # smoke size

One command runs (1) an uninterrupted seeded run of examples/calculator/job.yaml on the embedded
135M model and (2) the same job in a second run directory, SIGKILLed at --kills moments that a
seeded RNG picks among generation, grading, the update and the checkpoint write (``--points``;
see ``arft.app.faults``), resumed after each kill, then resumed to the end. Every kill lands in
a step after the run's latest checkpoint, and after its first one (before it there is nothing to
resume from). Then it compares the two run directories: the final adapters (bit-identical, or the
largest difference), and, keyed by step, task and sample, the training and evaluation rollouts,
their grades and tool calls, the store's metric rows and metrics.jsonl's rows: lost (in the
uninterrupted run, missing here), duplicated (more often than there), half-written (a rollout
without its grade row, a metrics.jsonl line that is not JSON, a ``.tmp-*`` checkpoint folder, a
run never finished) and differing (the same rollout with other tokens or reward).
Goal: 0 lost, 0 duplicated, 0 half-written, identical adapter, over >= 5 kills.

Determinism: the engine answers one request per forward pass (``--max-batch-size 1``, the
default here). With continuous batching, which requests share a forward pass depends on thread
timing, and another batch shape can flip a near tie when sampling, so two uninterrupted runs need
not be bit-identical then either (``arft.engines.transformers.engine``).

Writes bench/out/kill_soak/result.json; the two run directories stay in bench/out/kill_soak/runs/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from arft.tracing.run_dir import RunDir
from arft.tracing.store import RunStore
from bench.lib.harness import OUT as BENCH_OUT
from bench.lib.harness import ROOT, record

SLOW = True  # an uninterrupted run and a killed-and-resumed one, each process loading a model
QUICK = ["--steps", "2", "--kills", "1", "--tasks", "2", "--checkpoint-every", "1", "--tiny"]
JOB = ROOT / "examples" / "calculator" / "job.yaml"
OUT = BENCH_OUT / "kill_soak"
KINDS = ("rollouts", "grades", "tool calls", "metric rows (store)", "metrics.jsonl rows")
CHECKPOINT_MOMENTS = 5
"""A checkpoint write has 5 moments to kill at: after each of its 4 files, and after the rename."""


# -- the job and the child process ---------------------------------------------------------------

def soak_job(args: argparse.Namespace) -> Any:
    """The calculator job, shrunk as the options say."""
    import yaml

    from arft.config import JobSpec

    spec = yaml.safe_load(JOB.read_text())
    training = spec.setdefault("training", {})
    hp = spec["method"]["reinforcement"]["hyperparameters"]
    if args.steps is not None:
        training["max_steps"] = args.steps
    if args.checkpoint_every is not None:
        training["checkpoint_every"] = args.checkpoint_every
    if args.tasks is not None:
        hp["batch_size"] = args.tasks
        training["eval_tasks"] = args.tasks
    # Bit-identical adapters need no KV reuse: a prefix stored by an evaluation serves the next
    # step's prompts in the uninterrupted run only, and KV computed in another batch differs in
    # the last float bits (same tokens, other logprobs).
    spec.setdefault("engine", {})["prefix_cache_mb"] = 0
    return JobSpec.model_validate(spec).model_copy(update={"base_dir": JOB.parent})


def child(args: argparse.Namespace) -> None:
    """One training process: train (or resume) into ``args.child`` with ``args.fault`` armed."""
    import torch

    from arft.app.faults import Fault, train_with_fault
    from arft.app.session import Hooks

    if args.threads:
        torch.set_num_threads(args.threads)
    job = soak_job(args)
    model = tokenizer = None
    if args.tiny:
        from arft.models.loading import load_tokenizer, tiny_model

        tokenizer = load_tokenizer(job.model_ref)
        model = tiny_model(tokenizer, seed=5)
    hooks = Hooks(status=lambda s: print(f"    {s}", flush=True),
                  step_done=lambda step, m: print(f"    step {step} done: train reward "
                                                  f"{m.get('train/reward_mean', float('nan')):.3f}", flush=True),
                  eval_done=lambda step, s: print(f"    eval @ step {step}: reward {s.reward.mean}", flush=True))
    fault = None if args.fault == "none" else Fault.parse(args.fault)
    asyncio.run(train_with_fault(job, Path(args.child), fault, resume=args.resume, hooks=hooks,
                                 model=model, tokenizer=tokenizer, max_batch_size=args.max_batch_size))


def run_child(args: argparse.Namespace, run_dir: Path, fault: str, resume: bool) -> tuple[int, float]:
    """Run a child process (its output shown indented); (exit code, seconds)."""
    argv = [sys.executable, "-m", "bench.kill_soak", "--child", str(run_dir), "--fault", fault,
            "--max-batch-size", str(args.max_batch_size), "--threads", str(args.threads)]
    for flag in ("steps", "checkpoint_every", "tasks"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    argv += ["--tiny"] * args.tiny + ["--resume"] * resume
    t0 = time.perf_counter()
    code = subprocess.run(argv, cwd=ROOT).returncode
    return code, time.perf_counter() - t0


# -- picking the kill moments --------------------------------------------------------------------

def pick_fault(rng: random.Random, point: str, done: int, job: Any) -> str | None:
    """A moment of ``point`` in a step the run has not checkpointed yet (after ``done``) and after
    its first checkpoint; None when ``point`` has no such moment left."""
    total, every = job.training.max_steps, job.training.checkpoint_every
    first = min(every, total)
    steps = range(max(done, first) + 1, total + 1)
    per_step = job.rl.hyperparameters.resolved("batch_size") * job.training.group_size
    if point == "checkpoint":
        steps = [s for s in steps if s % every == 0 or s == total]
    if point == "eval":
        steps = [s for s in steps if s % job.rl.hyperparameters.resolved("eval_interval") == 0 or s == total]
    if not steps:
        return None
    step = rng.choice(list(steps))
    # grading: at most half the rollouts, so the moment comes even if some rollouts are not graded
    nth = {"generation": rng.randint(1, per_step), "grading": rng.randint(1, max(1, per_step // 2)),
           "checkpoint": rng.randint(1, CHECKPOINT_MOMENTS), "metrics": rng.randint(1, 2),
           "eval": 1, "update": 1, "step": 1}[point]
    return f"{point}:{step}:{nth}"


def latest_step(run_dir: Path) -> int:
    latest = RunDir(run_dir).latest_checkpoint()
    return int(latest.name.split("-")[1]) if latest else 0


# -- counting ------------------------------------------------------------------------------------

def records(run_dir: Path) -> dict[str, Any]:
    """Counters of what a run directory holds (keyed by step, task, sample, name), each rollout's
    content, and the half-written things found."""
    counts: dict[str, Counter[Any]] = {k: Counter() for k in KINDS}
    content: dict[Any, Any] = {}
    with RunStore(RunDir(run_dir).store) as store:
        unfinished = sum(1 for r in store.runs() if r["status"] != "completed")
        for r in store.rollouts():
            if not (r.run_id == "train" or r.run_id.startswith("train:eval-")):
                continue
            key = ("train" if r.run_id == "train" else "eval", r.step, r.task_id, r.sample_index)
            counts["rollouts"][key] += 1
            content[key] = (r.token_ids, r.reward)
            counts["tool calls"].update((*key, i) for i in range(len(r.tool_calls)))
        counts["metric rows (store)"].update((m["step"], m["name"]) for m in store.metrics("train"))
    con = sqlite3.connect(RunDir(run_dir).store)
    try:
        graded = con.execute("SELECT r.run_id, r.step, r.task_id, r.sample_index FROM grades g "
                             "JOIN rollouts r USING (trace_id)").fetchall()
        ungraded = con.execute("SELECT count(*) FROM rollouts r LEFT JOIN grades g USING (trace_id) "
                               "WHERE g.trace_id IS NULL AND r.status != 'infra_failed'").fetchone()[0]
    finally:
        con.close()
    counts["grades"].update(("train" if run_id == "train" else "eval", step, task, k)
                            for run_id, step, task, k in graded)
    torn = 0
    for line in RunDir(run_dir).metrics.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            torn += 1
            continue
        counts["metrics.jsonl rows"][(row["step"], any(k.startswith("eval/") for k in row))] += 1
    tmp = [p.name for p in RunDir(run_dir).checkpoints.glob(".tmp-*")]
    return {"counts": counts, "content": content,
            "half_written": {"rollouts without a grade": ungraded, "metrics.jsonl lines not JSON": torn,
                             ".tmp checkpoint folders": len(tmp), "runs never finished": unfinished}}


def compare(run: dict[str, Any], ref: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per kind: expected (in the reference), lost, duplicated, extra; and differing rollouts."""
    figures: dict[str, dict[str, int]] = {}
    for kind in KINDS:
        got, want = run["counts"][kind], ref["counts"][kind]
        figures[kind] = {"expected": sum(want.values()),
                         "lost": sum(max(0, n - got[k]) for k, n in want.items()),
                         "duplicated": sum(max(0, n - want[k]) for k, n in got.items() if k in want),
                         "extra": sum(n for k, n in got.items() if k not in want)}
    figures["rollouts"]["differing"] = sum(1 for k, c in run["content"].items()
                                           if k in ref["content"] and ref["content"][k] != c)
    return figures


def adapters(a: Path, b: Path) -> dict[str, Any]:
    """Whether the two runs' final trainable weights are bit-identical (else the largest gap)."""
    from safetensors.torch import load_file

    x, y = (load_file(str(RunDir(p).latest_checkpoint() / "trainable.safetensors")) for p in (a, b))
    if x.keys() != y.keys():
        return {"identical": False, "tensors": len(x), "max_abs_diff": None}
    diff = max((float((x[k].float() - y[k].float()).abs().max()) for k in x), default=0.0)
    return {"identical": all(x[k].dtype == y[k].dtype and bool((x[k] == y[k]).all()) for k in x),
            "tensors": len(x), "max_abs_diff": diff}


def audit(run_dir: Path, reference: Path) -> dict[str, Any]:
    """Everything the soak reports about ``run_dir`` against the uninterrupted ``reference``."""
    run, ref = records(run_dir), records(reference)
    return {"figures": compare(run, ref), "half_written": run["half_written"],
            "adapter": adapters(reference, run_dir)}


def show(result: dict[str, Any]) -> None:
    print(f"\n{'':22}{'expected':>9}{'lost':>6}{'duplicated':>11}{'extra':>6}{'differing':>10}")
    for kind, f in result["figures"].items():
        print(f"{kind:22}{f['expected']:>9}{f['lost']:>6}{f['duplicated']:>11}{f['extra']:>6}"
              f"{f.get('differing', ''):>10}")
    print("half-written: " + ", ".join(f"{v} {k}" for k, v in result["half_written"].items()))
    a = result["adapter"]
    print(f"final adapter: {'identical' if a['identical'] else 'DIFFERENT'} ({a['tensors']} tensors, "
          f"max |diff| {a['max_abs_diff']})")
    kills = result["kills"]
    done = [k for k in kills if k["killed"]]
    print(f"kills: {len(done)} of {len(kills)} reached "
          f"({', '.join(f'{p} {n}' for p, n in Counter(k['fault'].split(':')[0] for k in done).items())})")
    print(f"verdict: {'PASS' if result['ok'] else 'FAIL'}")


# -- the soak ------------------------------------------------------------------------------------

def soak(args: argparse.Namespace) -> dict[str, Any]:
    job = soak_job(args)
    if job.training.max_steps is None or min(job.training.checkpoint_every, job.training.max_steps) >= \
            job.training.max_steps:
        sys.exit("kill_soak: the run needs a checkpoint before its last step (lower --checkpoint-every, "
                 "or raise --steps), or no kill can land after one")
    runs = args.out / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    straight, killed = runs / "straight", runs / "killed"
    t0 = time.perf_counter()
    print(f"[1/3] uninterrupted run ({job.training.max_steps} steps) -> {straight}", flush=True)
    code, straight_s = run_child(args, straight, "none", resume=False)
    if code != 0:
        sys.exit(f"kill_soak: the uninterrupted run failed (exit {code})")
    rng = random.Random(args.seed)
    order = rng.sample(args.points, len(args.points))  # every point once first, then at random
    kills: list[dict[str, Any]] = []
    for i in range(args.kills):
        done = latest_step(killed)
        point = order[i] if i < len(order) else rng.choice(args.points)
        fault = pick_fault(rng, point, done, job) or pick_fault(rng, "generation", done, job)
        print(f"[2/3] kill {i + 1}/{args.kills}: {'resume from step ' + str(done) if done else 'fresh run'}, "
              f"SIGKILL at {fault}", flush=True)
        code, seconds = run_child(args, killed, fault, resume=done > 0)
        if code not in (0, -signal.SIGKILL):
            sys.exit(f"kill_soak: the run at {fault} failed (exit {code})")
        kills.append({"fault": fault, "resumed_from": done, "killed": code == -signal.SIGKILL,
                      "seconds": round(seconds, 1)})
        print(f"      {'killed' if code else 'finished without reaching it'} after {seconds:.0f} s; "
              f"latest checkpoint: step {latest_step(killed)}", flush=True)
        if code == 0:
            break
    print(f"[3/3] resume to the end from step {latest_step(killed)}", flush=True)
    code, _ = run_child(args, killed, "none", resume=True)
    if code != 0:
        sys.exit(f"kill_soak: the final resume failed (exit {code})")
    result = audit(killed, straight)
    figures = result["figures"]
    ok = (all(f["lost"] == f["duplicated"] == f["extra"] == 0 for f in figures.values())
          and not any(result["half_written"].values()) and result["adapter"]["identical"]
          and sum(k["killed"] for k in kills) >= min(args.kills, 5))
    return {**result, "ok": ok, "kills": kills,
            "config": {"job": str(JOB.relative_to(ROOT)), "steps": job.training.max_steps,
                       "checkpoint_every": job.training.checkpoint_every,
                       "tasks_per_step": job.rl.hyperparameters.resolved("batch_size"),
                       "group_size": job.training.group_size, "model": "tiny" if args.tiny else job.model,
                       "max_batch_size": args.max_batch_size, "threads": args.threads, "seed": args.seed,
                       "points": args.points},
            "seconds": {"uninterrupted": round(straight_s, 1), "total": round(time.perf_counter() - t0, 1)}}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=None, help="training.max_steps (job: 10)")
    ap.add_argument("--kills", type=int, default=5, help="how many times to SIGKILL the run (default 5)")
    ap.add_argument("--tasks", type=int, default=None, help="tasks per step and validation tasks (job: 4, all 16)")
    ap.add_argument("--checkpoint-every", type=int, default=None, help="training.checkpoint_every (job: 5)")
    ap.add_argument("--points", nargs="+", default=["generation", "grading", "update", "checkpoint"],
                    choices=["step", "generation", "grading", "update", "metrics", "eval", "checkpoint"],
                    help="the moments to kill at (arft.app.faults)")
    ap.add_argument("--seed", type=int, default=0, help="seeds the choice of kill moments")
    ap.add_argument("--tiny", action="store_true", help="a tiny random model instead of the embedded 135M one")
    ap.add_argument("--max-batch-size", type=int, default=1, help="engine requests per forward pass (default 1: exact)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--fault", default="none", help=argparse.SUPPRESS)
    ap.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return 0
    result = soak(args)
    show(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out / 'result.json'}")
    record("kill_soak", result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
