"""The one entry point of arft's benchmarks; run it from the repository root.

    python -m bench list                 every benchmark and the claim it measures
    python -m bench run NAME [ARGS...]   one benchmark with its own arguments (NAME --help lists them)
    python -m bench run --quick          every benchmark at its small QUICK size, each in its own
                                         process; those that need a GPU, vLLM, Ray or minutes of
                                         CPU are skipped with the reason
    python -m bench docs                 regenerate docs/benchmarks.md from bench/results/
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from typing import Sequence

from bench.lib.docs import write_docs
from bench.lib.harness import ROOT
from bench.lib.registry import Benchmark, benchmarks


def list_benchmarks() -> None:
    for b in benchmarks():
        marks = sorted(b.needs) + (["slow"] if b.slow else [])
        print(f"{b.name:24} {b.claim}" + (f"  [{', '.join(marks)}]" if marks else ""))


def run_one(name: str, argv: Sequence[str]) -> int:
    known = {b.name for b in benchmarks()}
    if name not in known:
        print(f"no benchmark {name!r}; `python -m bench list` shows them", file=sys.stderr)
        return 2
    result = importlib.import_module(f"bench.{name}").main(list(argv))
    return result if isinstance(result, int) else 0


def run_quick(only: Sequence[str]) -> int:
    """Each runnable benchmark's QUICK arguments in a process of its own (a fresh torch, a fresh
    peak RSS); a failure is reported and the rest still run."""
    failed: list[str] = []
    chosen: list[Benchmark] = [b for b in benchmarks() if not only or b.name in only]
    for b in chosen:
        reason = b.skip_reason()
        if reason:
            print(f"skip {b.name}: {reason}", flush=True)
            continue
        print(f"run  {b.name} {' '.join(b.quick or [])}", flush=True)
        start = time.perf_counter()
        code = subprocess.run([sys.executable, "-m", "bench", "run", b.name, *(b.quick or [])], cwd=ROOT).returncode
        print(f"done {b.name}: exit {code} after {time.perf_counter() - start:.0f} s", flush=True)
        if code:
            failed.append(b.name)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], list(argv[1:])
    if command == "list":
        list_benchmarks()
        return 0
    if command == "docs":
        print(f"wrote {write_docs().relative_to(ROOT)}")
        return 0
    if command == "run" and rest and rest[0] == "--quick":
        return run_quick(rest[1:])
    if command == "run" and rest:
        return run_one(rest[0], rest[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
