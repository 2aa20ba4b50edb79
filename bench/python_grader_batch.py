"""A trivial python grader costs a few ms a grade at batch 32, warmed at run open; a fresh process each: tens of ms.

Python grader cost per grade at batch 32, side by side in one run: a fresh sandboxed process per
grade (``mode="fresh"``: what each grade cost before the warm pool), the warm pool started by the
first batch itself (what a one-batch ``arft eval`` paid before the run warmed it: every grade of
that batch waited for the sandboxes to start, ~0.6 s a grade as reported in issue 37), and the
pool warmed when the run opens (``open_run`` -> ``warm_up_grader``, as now).

Run: ``python -m bench run python_grader_batch [--batches 4] [--batch 32] [--size CPUS]``.
Each batch is ``--batch`` concurrent grades of ``1.0 if sample["output_text"] == item["answer"]``
(half match; every score is checked). Per mode it prints the cost (the batch's wall time over its
grades: what grading adds to a step) and the mean latency of one grade (what a rollout's
``grade_s`` shows: its wait for a free worker included). Goal: warmed cost <= 50 ms a grade.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Sequence

from arft.graders.base import warm_up_grader
from arft.graders.python_grader import PythonGrader, build
from bench.lib.harness import record

QUICK = ["--batches", "2"]
GOAL_MS = 50.0

SOURCE = """
def grade(sample, item):
    return 1.0 if sample["output_text"] == item["answer"] else 0.0
"""


async def one(grader: PythonGrader, i: int) -> float:
    """Grade case ``i`` (even ones match), check the score, return its latency in seconds."""
    answer = f"answer-{i}"
    sample = {"output_text": answer if i % 2 == 0 else "wrong"}
    t0 = time.perf_counter()
    score = await grader.grade(sample, {"answer": answer})
    if score.error is not None or score.score != float(i % 2 == 0):
        raise AssertionError(f"grade {i}: {score}")
    return time.perf_counter() - t0


async def batch(grader: PythonGrader, size: int) -> tuple[float, list[float]]:
    """One batch of ``size`` concurrent grades: (wall seconds, latencies)."""
    t0 = time.perf_counter()
    latencies = await asyncio.gather(*(one(grader, i) for i in range(size)))
    return time.perf_counter() - t0, list(latencies)


async def measure(mode: str, batches: int, size: int, pool_size: int) -> dict[str, float]:
    """Cost and latency (ms a grade) of ``batches`` batches under ``mode``."""
    spec = {"type": "python", "name": "bench", "source": SOURCE}
    grader = build(spec, Path("."), mode="fresh" if mode == "fresh" else "pool", pool_size=pool_size)
    try:
        if mode == "warmed":
            await warm_up_grader(grader)  # as open_run does, before the first rollout
        runs = [await batch(grader, size) for _ in range(1 if mode == "cold" else batches)]
    finally:
        await grader.aclose()
    return {"cost_ms": 1000 * statistics.median(wall / size for wall, _ in runs),
            "latency_ms": 1000 * statistics.mean(lat for _, lats in runs for lat in lats)}


async def compare(batches: int, size: int, pool_size: int) -> dict[str, dict[str, float]]:
    modes = {"fresh": "fresh process per grade (before)",
             "cold": "warm pool, started by the first batch (a one-batch eval, before)",
             "warmed": "warm pool, started at run open (now)"}
    out = {mode: await measure(mode, batches, size, pool_size) for mode in modes}
    print(f"cpus: {len(os.sched_getaffinity(0))}, pool size: {pool_size}, batch: {size}, "
          f"batches: {batches}")
    print(f"{'mode':<68} {'cost ms/grade':>14} {'latency ms':>11}")
    for mode, label in modes.items():
        print(f"{label:<68} {out[mode]['cost_ms']:>14.1f} {out[mode]['latency_ms']:>11.1f}")
    met = out["warmed"]["cost_ms"] <= GOAL_MS
    print(f"goal: warmed cost <= {GOAL_MS:g} ms a grade: {'met' if met else 'NOT met'}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=4, help="batches per mode (cold: 1)")
    parser.add_argument("--batch", type=int, default=32, help="concurrent grades per batch")
    parser.add_argument("--size", type=int, default=len(os.sched_getaffinity(0)),
                        help="pool size (default: CPUs, the grader's own default)")
    args = parser.parse_args(argv)
    result = asyncio.run(compare(args.batches, args.batch, args.size))
    record("python_grader_batch", {**result, "batch": args.batch, "batches": args.batches,
                                   "pool_size": args.size, "goal_ms": GOAL_MS})


if __name__ == "__main__":
    main()
