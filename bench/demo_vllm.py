"""The calculator demo (`make demo`'s job) trained with the transformers engine and with the vLLM
engine, one after the other in one command, on this machine.

Each arm is `arft train examples/calculator/job.yaml` (same seed, steps and evals) with only
`engine.type` changed; the vLLM arm's wall time includes starting its server. Printed per arm:
wall time, the eval reward at every eval, the final reward, and the ratio of wall times (goal,
issue 13: the vLLM arm reaches the transformers arm's final reward in <= 0.5x its wall time).

    python bench/demo_vllm.py [--steps 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

JOB = ROOT / "examples" / "calculator" / "job.yaml"
OUT = ROOT / "bench" / "out" / "demo_vllm"


def arm(engine: str, steps: int | None, run_dir: Path) -> dict[str, Any]:
    from arft.app.train import train
    from arft.config import load_job

    job = load_job(JOB)
    job = job.model_copy(update={"engine": job.engine.model_copy(update={"type": engine})})
    if steps is not None:
        job = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": steps})})
    start = time.perf_counter()
    result = asyncio.run(train(job, run_dir))
    wall = time.perf_counter() - start
    evals = {step: s.reward.mean for step, s in sorted(result.evals.items())}
    print(f"  {engine}: {wall:.0f} s, eval reward {evals}", flush=True)
    return {"engine": engine, "wall_s": wall, "evals": evals}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, help="override training.max_steps (default: the job's)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        arms = [arm(engine, args.steps, Path(tmp) / engine) for engine in ("transformers", "vllm")]
    base, fast = arms
    target = list(base["evals"].values())[-1]
    reached = next((step for step, r in fast["evals"].items() if r >= target), None)
    ratio = fast["wall_s"] / base["wall_s"]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "result.json").write_text(json.dumps({"arms": arms, "ratio": ratio}, indent=2, default=str))
    print("\n| engine | wall time | eval reward by step |\n|---|---|---|")
    for a in arms:
        print(f"| {a['engine']} | {a['wall_s']:.0f} s | " + ", ".join(f"{s}: {r:.2f}" for s, r in a["evals"].items()) + " |")
    print(f"\nvLLM / transformers wall time: {ratio:.2f}x; the transformers arm's final reward {target:.2f} "
          f"{'reached by the vLLM arm at step ' + str(reached) if reached is not None else 'NOT reached by the vLLM arm'}"
          f" (goal: reached in <= 0.5x the wall time)")
    print("command: python bench/demo_vllm.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
