"""Whether the vLLM engine or async rollouts train the demo in <= 0.5x the transformers engine's time.

The calculator demo (`make demo`'s job) trained with the transformers engine and with the vLLM
engine, each synchronous and with async rollouts, one after the other in one command, on this
machine.

Each arm is `arft train examples/calculator/job.yaml` (same seed, steps and evals) with only
`engine.type` and `training.max_off_policy_steps` changed (`+async`: 1, the next step's rollouts
are generated during the update); the vLLM arms' wall time includes starting the server.
Printed per arm: wall time, the eval reward at every eval, the mean seconds the trainer waited
for rollouts and spent updating per step, and the ratio of wall times to the first arm (goal,
issue 13: the vLLM arms reach the transformers arm's final reward in <= 0.5x its wall time).

    python -m bench run demo_vllm [--steps 10] [--arms transformers,transformers+async,vllm,vllm+async] [--repeats 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence


from bench.lib.harness import OUT as BENCH_OUT
from bench.lib.harness import ROOT, record

NEEDS = {"vllm"}
SLOW = True
QUICK = ["--steps", "1", "--arms", "transformers,vllm"]
JOB = ROOT / "examples" / "calculator" / "job.yaml"
OUT = BENCH_OUT / "demo_vllm"


ARMS = ["transformers", "transformers+async", "vllm", "vllm+async"]


def arm(name: str, steps: int | None, run_dir: Path) -> dict[str, Any]:
    from arft.app.train import train
    from arft.config import engine_as, load_job

    engine, _, mode = name.partition("+")
    job = load_job(JOB)
    training = {"max_off_policy_steps": 1 if mode == "async" else 0}
    if steps is not None:
        training["max_steps"] = steps
    job = job.model_copy(update={"engine": engine_as(job.engine, engine),
                                 "training": job.training.model_copy(update=training)})
    start = time.perf_counter()
    result = asyncio.run(train(job, run_dir))
    wall = time.perf_counter() - start
    evals = {step: s.reward.mean for step, s in sorted(result.evals.items())}
    h = result.history
    wait = sum(m.get("time/wait_rollouts_s", m["time/rollouts_s"]) for m in h) / len(h)
    update = sum(m["time/update_s"] for m in h) / len(h)
    print(f"  {name}: {wall:.0f} s, eval reward {evals}, per step: waited {wait:.1f} s for rollouts, "
          f"update+sync {update:.1f} s", flush=True)
    curve = [round(m["train/reward_mean"], 3) for m in h]
    print(f"    train reward by step: {curve}", flush=True)
    return {"arm": name, "wall_s": wall, "evals": evals, "wait_s": wait, "update_s": update,
            "train_reward": curve, "off_policy_steps": [m.get("train/off_policy_steps") for m in h]}


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, help="override training.max_steps (default: the job's)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, from {ARMS}; the first is the baseline")
    p.add_argument("--repeats", type=int, default=1, help="run the arms this many times, taking turns; "
                   "wall times are the median (this machine is shared and noisy)")
    args = p.parse_args(argv)
    names = args.arms.split(",")
    unknown = [n for n in names if n not in ARMS]
    if unknown:
        p.error(f"unknown arms {unknown}: choose from {ARMS}")
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name in names:
                runs[name].append(arm(name, args.steps, Path(tmp) / f"{name.replace('+', '-')}-{r}"))
    arms = [{**rs[0], "wall_s": statistics.median(x["wall_s"] for x in rs), "walls": [x["wall_s"] for x in rs],
             "wait_s": statistics.median(x["wait_s"] for x in rs),
             "update_s": statistics.median(x["update_s"] for x in rs)} for rs in runs.values()]
    base = arms[0]
    target = list(base["evals"].values())[-1]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "result.json").write_text(json.dumps({"arms": arms, "runs": runs}, indent=2, default=str))
    print(f"\n| arm | wall time{' (median; each)' if args.repeats > 1 else ''} | vs {base['arm']} "
          f"| waited for rollouts / step | update+sync / step | eval reward by step (first run) "
          f"| reaches {target:.2f} at step |\n|---|---|---|---|---|---|---|")
    for a in arms:
        reached = next((step for step, r in a["evals"].items() if r >= target), None)
        each = f" ({', '.join(f'{w:.0f}' for w in a['walls'])})" if args.repeats > 1 else ""
        print(f"| {a['arm']} | {a['wall_s']:.0f} s{each} | {a['wall_s'] / base['wall_s']:.2f}x | {a['wait_s']:.1f} s "
              f"| {a['update_s']:.1f} s | " + ", ".join(f"{s}: {r:.2f}" for s, r in a["evals"].items())
              + f" | {reached if reached is not None else 'not reached'} |")
    print("\ngoal (issue 13): the vLLM arms reach the first arm's final reward in <= 0.5x its wall time")
    print("command: python -m bench " + " ".join(sys.argv[1:]))
    record("demo_vllm", {"arms": arms, "target_reward": target})


if __name__ == "__main__":
    main()
