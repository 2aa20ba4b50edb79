"""Python graders run over 10x faster through the warm fork-server pool than in a fresh sandboxed process per grade.

Python grader throughput: the warm fork-server pool vs a fresh sandboxed process per grade.

Run: ``python -m bench run python_grader_pool [--n 400] [--fresh-n N/10] [--size CPUS] [--rounds 4]``.
A trivial grader (``1.0 if sample["output_text"] == item["answer"] else 0.0``) grades ``--n``
samples through the warm pool and ``--fresh-n`` through fresh processes, both with concurrency
= the pool size, in alternating rounds so drift in machine load hits both alike. Every score is
checked (half the samples match). Goal: pool >= 10x fresh and >= 200 grades/s on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Sequence


from arft.graders.python_grader import PythonGrader, build
from bench.lib.harness import record

QUICK = ["--n", "80", "--rounds", "2"]

SOURCE = """
def grade(sample, item):
    return 1.0 if sample["output_text"] == item["answer"] else 0.0
"""


def case(i: int) -> tuple[dict[str, str], dict[str, str], float]:
    """Sample, item and the expected score of grade ``i`` (even ones match)."""
    answer = f"answer-{i}"
    return {"output_text": answer if i % 2 == 0 else "wrong"}, {"answer": answer}, float(i % 2 == 0)


async def run_grades(grader: PythonGrader, start: int, n: int, concurrency: int) -> float:
    """Grade cases ``start .. start+n`` with ``concurrency`` workers; seconds taken."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(start, start + n):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            sample, item, expected = case(i)
            score = await grader.grade(sample, item)
            if score.error is not None or score.score != expected:
                raise AssertionError(f"grade {i}: expected {expected}, got {score}")

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


async def compare(n: int, fresh_n: int, size: int, rounds: int) -> dict[str, float]:
    spec = {"type": "python", "name": "bench", "source": SOURCE}
    pool = build(spec, Path("."), mode="pool", pool_size=size)
    fresh = build(spec, Path("."), mode="fresh")
    try:
        t0 = time.perf_counter()
        await run_grades(pool, 0, size, size)  # starts every zygote
        print(f"pool start ({size} zygotes, first grade each): {time.perf_counter() - t0:.2f} s")
        print(f"isolation: {', '.join(pool.isolation)}")
        pool_s = fresh_s = 0.0
        for r in range(rounds):
            pool_s += await run_grades(pool, r * n, n // rounds, size)
            fresh_s += await run_grades(fresh, r * fresh_n, fresh_n // rounds, size)
    finally:
        await pool.aclose()
    done_pool, done_fresh = n // rounds * rounds, fresh_n // rounds * rounds
    pool_rate, fresh_rate = done_pool / pool_s, done_fresh / fresh_s
    print(f"cpus: {len(os.sched_getaffinity(0))}, pool size = concurrency: {size}, "
          f"rounds: {rounds}")
    print(f"warm pool: {done_pool} grades in {pool_s:.2f} s = {pool_rate:.0f} grades/s "
          f"({1000 * pool_s / done_pool * size:.1f} ms per grade per worker)")
    print(f"fresh process per grade: {done_fresh} grades in {fresh_s:.2f} s = "
          f"{fresh_rate:.1f} grades/s ({1000 * fresh_s / done_fresh * size:.0f} ms per grade "
          "per worker)")
    ratio = pool_rate / fresh_rate
    print(f"ratio: {ratio:.1f}x (goal >= 10x: {'met' if ratio >= 10 else 'NOT met'}; "
          f">= 200 grades/s: {'met' if pool_rate >= 200 else 'NOT met'})")
    return {"pool_grades_per_s": pool_rate, "fresh_grades_per_s": fresh_rate, "ratio": ratio, "pool_size": size}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=400, help="grades through the warm pool")
    parser.add_argument("--fresh-n", type=int, default=None, help="fresh grades (default n/10)")
    parser.add_argument("--size", type=int, default=len(os.sched_getaffinity(0)),
                        help="pool size and concurrency (default: CPUs)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    args = parser.parse_args(argv)
    fresh_n = args.fresh_n if args.fresh_n is not None else max(args.rounds, args.n // 10)
    result = asyncio.run(compare(args.n, fresh_n, args.size, args.rounds))
    record("python_grader_pool", {**result, "n": args.n, "fresh_n": fresh_n, "rounds": args.rounds})


if __name__ == "__main__":
    main()
