"""RL on an example environment raises its held-out eval reward over the untrained baseline (goal +30 points).

Case-study benchmark: train one example environment and report baseline vs trained, side by side.

    python -m bench run case_study ENV [--job FILE] [--train-file FILE] [--train-limit N] [--steps N]
                               [--seed N] [--eval-tasks N] [--tag TAG]

ENV is a folder under ``examples/`` with a ``job.yaml``; ``--job`` picks another job file of the
example (``--job job_plain.yaml --tag plain``: give it a tag too, or its output replaces the
job.yaml run's). The run is the example's own job (the embedded SmolLM2-135M on the CPU unless
the job says otherwise), with optional overrides: another
training file (``train_10.jsonl`` for the sample-efficiency run), only the first N training rows
(the data-scaling runs), another number of steps, another seed (``bench/behaviour.py`` repeats a
run over seeds) or fewer validation tasks per eval. Every eval the job makes (step 0 = the
untrained baseline, then every ``eval_interval`` steps and the last) is reported with:

- reward mean and pass rate,
- tool calls per rollout: mean, p50, p95, max and the histogram (the long tail),
- share of tool-calling turns with parallel calls, parse errors per rollout,
- per-tool call counts,
- and whatever ``examples/ENV/bench_metrics.py`` adds: a ``metrics(rollouts) -> dict[str, float]``
  function computed on each eval's stored rollouts (``fast_function`` counts rewarded hacks).

An example whose tools are services has ``examples/ENV/services.py`` with a context manager
``serve()`` that starts them (on 127.0.0.1) for the duration of the run, as ``examples/run.py``
does for a plain ``arft`` command (the hooks are that file's).

Output: a table on stdout, a Markdown table for the example's README, and
``bench/out/case_<ENV>[-TAG]/result.json`` (the run directory sits beside it). Timings are noisy on
a shared 2-core machine; the rewards are seeded and repeatable.
"""

from __future__ import annotations

import argparse
import json
from typing import Sequence

from bench.lib.case_runs import OUT, run, table, verdict
from bench.lib.harness import record

SLOW = True  # trains the embedded model for minutes even at a few steps
QUICK = ["calculator", "--steps", "1", "--eval-tasks", "2", "--tag", "quick"]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env", help="folder under examples/")
    p.add_argument("--job", default="job.yaml", help="the example's job file (default job.yaml)")
    p.add_argument("--train-file", help="training file, relative to the example (default: the job's)")
    p.add_argument("--train-limit", type=int, help="train on the first N rows only")
    p.add_argument("--steps", type=int, help="override training.max_steps")
    p.add_argument("--seed", type=int, help="override the job's seed (batches and sampling)")
    p.add_argument("--eval-tasks", type=int, help="override training.eval_tasks (validation tasks per eval)")
    p.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE",
                   help="override a job setting, e.g. training.dynamic_sampling=2 (repeatable)")
    p.add_argument("--tag", default="", help="suffix of the output folder (e.g. n10)")
    p.add_argument("--resume", action="store_true", help="continue the run directory's last checkpoint")
    p.add_argument("--report-only", action="store_true", help="print the stored result.json again")
    args = p.parse_args(argv)
    if args.report_only:
        name = f"case_{args.env}" + (f"-{args.tag}" if args.tag else "")
        res = json.loads((OUT / name / "result.json").read_text())
    else:
        res = run(args.env, args)
    print()
    print(table(res))
    print()
    print(verdict(res))
    print(f"command: {res['command']}")
    if not args.report_only:
        record(f"case_study_{args.env}" + (f"-{args.tag}" if args.tag else ""),
               {"verdict": verdict(res), **res})


if __name__ == "__main__":
    main()
