"""Every outside input ends in success or arft's own error with a message: 0 unhandled of 10,000 a target.

Fuzz every input arft reads from outside with Hypothesis, at scale.

    python -m bench run fuzz [--examples 10000] [--target NAME ...] [--seed 0]

The targets (``bench/lib/fuzz/targets.py``, shared with ``tests/fuzz``): dataset rows, job specs,
grader specs, tool-call text from the model, tool responses (parsed directly, and over HTTP from a real server on
127.0.0.1), and ``arft import`` logs. Each gets ``--examples`` generated inputs, mostly
near-valid ones (a valid example with a few mutations) so that they reach deep code. The rule:
every input ends in success or in the layer's own arft error with a message; anything else
(TypeError, KeyError, RecursionError, ...) or a hang is an *unhandled* input, and the goal is 0.

Prints per target: inputs, successes, named errors, unhandled, seconds; writes
``bench/out/fuzz/result.json`` with the same numbers and the first unhandled inputs of each
target (exception, message, the input cut to 300 characters) to reproduce them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from hypothesis import HealthCheck, Phase, given, seed, settings

from bench.lib.fuzz.targets import Hang, Target, open_targets
from bench.lib.harness import OUT as BENCH_OUT
from bench.lib.harness import record

QUICK = ["--examples", "30"]
OUT = BENCH_OUT / "fuzz"
KEPT = 5
"""Unhandled inputs (and distinct named-error messages) kept per target in result.json."""


def fuzz(target: Target, examples: int, rng_seed: int) -> dict[str, Any]:
    """Run ``examples`` generated inputs through ``target``; counts and the first failures."""
    counts: Counter[str] = Counter()
    failures: list[dict[str, str]] = []
    named: dict[str, None] = {}

    @seed(rng_seed)
    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=False)
    @given(target.strategy)
    def run(value: Any) -> None:
        counts["inputs"] += 1
        try:
            outcome = target.check(value)
        except (Exception, Hang) as e:  # noqa: BLE001 - counting them is the point
            counts["unhandled"] += 1
            if len(failures) < KEPT:
                failures.append({"exception": type(e).__name__, "message": str(e)[:300],
                                 "input": repr(value)[:300],
                                 "where": traceback.format_exc(limit=-3)[-1200:]})
            return
        counts["ok" if outcome is None else "named"] += 1
        if outcome is not None and len(named) < KEPT:
            named.setdefault(outcome[:300], None)

    start = time.perf_counter()
    run()
    return {"target": target.name, "what": target.description, "inputs": counts["inputs"],
            "successes": counts["ok"], "named_errors": counts["named"],
            "unhandled": counts["unhandled"], "seconds": round(time.perf_counter() - start, 1),
            "unhandled_examples": failures, "named_error_examples": list(named)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=10_000, help="inputs per target")
    parser.add_argument("--target", action="append", help="only this target (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (reproducible runs)")
    parser.add_argument("--out", type=Path, default=OUT / "result.json")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="arft-fuzz-") as tmp, open_targets(Path(tmp)) as targets:
        unknown = sorted(set(args.target or ()) - set(targets))
        if unknown:
            parser.error(f"unknown target(s) {unknown}; the targets are: {', '.join(targets)}")
        print(f"{'target':<20} {'inputs':>7} {'ok':>7} {'named':>7} {'unhandled':>9} {'s':>7}")
        for name, target in targets.items():
            if args.target and name not in args.target:
                continue
            r = fuzz(target, args.examples, args.seed)
            results.append(r)
            print(f"{name:<20} {r['inputs']:>7} {r['successes']:>7} {r['named_errors']:>7} "
                  f"{r['unhandled']:>9} {r['seconds']:>7}", flush=True)
            for f in r["unhandled_examples"]:
                print(f"    {f['exception']}: {f['message'][:120]}  <- {f['input'][:100]}")
    total = sum(r["unhandled"] for r in results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"examples_per_target": args.examples, "seed": args.seed,
                                    "unhandled_total": total, "targets": results}, indent=2) + "\n")
    print(f"unhandled inputs: {total} (goal: 0); wrote {args.out}")
    record("fuzz", {"examples_per_target": args.examples, "seed": args.seed, "unhandled_total": total,
                    "targets": {r["target"]: {k: r[k] for k in ("inputs", "successes", "named_errors", "unhandled",
                                                                "seconds")} for r in results}})
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
