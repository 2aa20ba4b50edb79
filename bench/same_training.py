"""A refactor leaves arft's seeded training unchanged: the same metrics to the last digit at two revisions.

Same training, two commits: does a refactor leave arft's behaviour unchanged?

    python -m bench run same_training OLD_REV [NEW_REV]      (NEW_REV default: the working tree)

Trains the calculator job for 2 short steps (4 tasks a step, evals on 4 validation tasks, fp32,
no bf16 autocast: deterministic on one machine) with each revision, one after the other in this
one command, and prints each step's metrics side by side with whether they are equal to the last
digit. Each revision runs from its own git worktree (``git worktree add --detach``) with that
tree on ``PYTHONPATH``; the old ``arft.trainer.loop.train`` and the new ``arft.app.train.train``
are both found.

Measured for the application-layer refactor (1fce8af -> the tree after it): identical rewards,
gradient norms, ratios and token counts at every step. Run-to-run noise: on an AMD EPYC (2 cores,
2026-12-06) one revision against itself (``same_training 551906e 551906e``) gave gradient norms
1e-6 apart in some runs (two discrete values, which both revisions produce; ``MKL_CBWR`` did not
remove it), rewards, token counts and evals equal. A difference of that size and shape is noise;
run the revision against itself to see it on the machine at hand.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from bench.lib.harness import ROOT, record

SLOW = True  # two short trainings of the embedded model
QUICK = ["HEAD"]  # the last commit against the working tree

KEYS = ("eval/reward_mean", "eval/tool_calls_mean", "train/task_reward_mean", "update/kl",
        "update/grad_norm", "update/ratio_mean", "update/tokens")

RUN = """
import asyncio, json, sys, pathlib, yaml
root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
spec = yaml.safe_load((root / "examples/calculator/job.yaml").read_text())
spec["training"].update({"max_steps": 2, "eval_tasks": 4, "checkpoint_every": 2, "bf16_autocast": False})
spec.setdefault("engine", {})["dtype"] = "float32"
spec["method"]["reinforcement"]["hyperparameters"].update({"eval_samples": 2, "eval_interval": 2})
path = root / "examples/calculator/_same_training_job.yaml"
path.write_text(yaml.safe_dump(spec))
from arft.config import load_job
try:
    from arft.app.train import train
except ImportError:  # before the application layer
    from arft.trainer.loop import train
try:
    asyncio.run(train(load_job(path), out))
finally:
    path.unlink()  # the job must sit beside the example's files; leave no trace there
"""


def run(tree: Path, out: Path) -> list[dict[str, float]]:
    print(f"training with {tree} ...", flush=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", RUN, str(tree), str(out)], env=env, check=True)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def tree_of(rev: str | None, work: Path, arm: int) -> Path:
    if rev is None:
        return ROOT
    tree = work / f"tree-{arm}-{rev}"  # the arm too: a revision against itself measures the noise
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
    return tree


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new", nargs="?", default=None, help="default: the working tree")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        trees = [tree_of(args.old, work, 0), tree_of(args.new, work, 1)]
        try:
            rows = [run(tree, work / f"run{i}") for i, tree in enumerate(trees)]
        finally:
            for tree in trees:
                if tree != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])
    same = True
    print(f"| step | metric | {args.old} | {args.new or 'working tree'} | equal |\n|---|---|---|---|---|")
    for a, b in zip(*rows):
        for k in KEYS:
            if k in a or k in b:
                equal = a.get(k) == b.get(k)
                same &= equal
                print(f"| {a['step']} | {k} | {a.get(k)} | {b.get(k)} | {'yes' if equal else 'NO'} |")
    same &= len(rows[0]) == len(rows[1])
    print("same training: " + ("yes, to the last digit" if same else "NO"))
    record("same_training", {"old": args.old, "new": args.new or "working tree", "same": same,
                             "old_metrics": rows[0], "new_metrics": rows[1], "keys": list(KEYS)})


if __name__ == "__main__":
    main()
