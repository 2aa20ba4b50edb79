"""RL makes tool calls parallel (parallel_lookup) and cuts the long tail of calls (long_tail), on every seed.

Behaviour benchmark: do the talk's behaviour results hold, over seeds? (issue 16)

    python -m bench run behaviour [--examples parallel_lookup long_tail] [--seeds 3] [--steps N]
                              [--eval-tasks N] [--reward-tolerance 0.0] [--set S.F=V] [--retrain]

Each example is trained with its own job (``bench/case_study.py ENV --seed S``: the job's seed,
then +1, +2, ... — batches, sampling, adapter init and the eval's samples all follow it), and its
baseline (the step-0 eval of the untrained model) is compared with its last eval, per seed:

- ``parallel_lookup`` (Cognition: calls become parallel): the share of tool-calling turns with
  several calls, and the measured critical-path tool latency per rollout (per turn its slowest
  call). Claims: the parallel share rises >= 2x, the critical path falls >= 2x (its mean, and
  apart its p95), and the reward is equal or better.
- ``long_tail`` (Qodo: the long tail removed): calls per rollout, p95 and the histogram. Claims:
  the baseline p95 is >= 4, the p95 falls >= 2x, and the reward is equal or better.

Every figure is printed per seed and as mean ± sample standard deviation [min, max] over the
seeds; a claim holds only if it holds for every seed ("equal" reward: within
``--reward-tolerance``, 0 by default). Progress (steps, evals) is logged as it goes.

A seed whose run this benchmark finished before (same steps) is read back, not trained again
(``--retrain`` trains it again), so examples run in separate commands, or a benchmark cut short,
end in one full table.

``--set SECTION.FIELD=VALUE`` (repeatable) runs a variant: every run with that job setting, in
its own folders (``case_<ENV>-behaviour-<SETTING>-seed<S>``) and result file, e.g.
``--set training.dynamic_sampling=2`` beside the plain runs.

Output: tables on stdout and ``bench/out/behaviour/result[-<SETTING>].json`` (written after every
run, so an interrupted benchmark keeps what it finished); each run's directory and
``result.json`` are ``bench/out/case_<ENV>-behaviour[-<SETTING>]-seed<S>/``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.lib import case_runs as CASE_STUDY
from bench.lib.harness import OUT as BENCH_OUT
from bench.lib.harness import ROOT, log, record

SLOW = True  # trains two examples on three seeds: hours
QUICK = ["--examples", "long_tail", "--seeds", "1", "--steps", "1", "--eval-tasks", "2"]
OUT = BENCH_OUT / "behaviour"
DEFAULT_EXAMPLES = ("parallel_lookup", "long_tail")
FIGURES = ("reward", "parallel_turn_share", "critical_path_mean_s", "critical_path_p95_s", "rounds_mean",
           "calls_mean", "calls_p95")
"""What is reported for every example, before and after (``behaviour_row``)."""


def behaviour_row(rollouts: list[Any]) -> dict[str, Any]:
    """The figures of one eval, from its stored rollouts."""
    from arft.metrics.summary import summarize

    s = summarize(rollouts)
    tc = s.tool_calls
    return {"reward": s.reward.mean, "parallel_turn_share": tc.parallel_turn_share,
            "critical_path_mean_s": tc.critical_path_mean_s, "critical_path_p95_s": tc.critical_path_p95_s,
            "rounds_mean": tc.rounds_mean,
            "calls_mean": tc.mean, "calls_p95": tc.p95, "calls_hist": tc.histogram,
            "n_rollouts": s.n_rollouts}


def before_after(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(baseline, last eval, its step) of a training run directory."""
    evals = CASE_STUDY.evals_of(run_dir, behaviour_row)
    if 0 not in evals or len(evals) < 2:
        raise SystemExit(f"{run_dir}: no baseline + trained eval pair (evals at steps {sorted(evals)})")
    last = max(evals)
    return evals[0]["extra"], evals[last]["extra"], last


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None:
        return None
    return float("inf") if den == 0 and num > 0 else (num / den if den else None)


def _reward_kept(b: dict[str, Any], a: dict[str, Any], tol: float) -> bool:
    return b["reward"] is not None and a["reward"] is not None and a["reward"] >= b["reward"] - tol


def parallel_claims(b: dict[str, Any], a: dict[str, Any], tol: float) -> dict[str, bool]:
    """Cognition's result on one seed: parallel share x2, critical path /2, reward kept."""
    share = _ratio(a["parallel_turn_share"] or 0.0, b["parallel_turn_share"] or 0.0)
    path = _ratio(b["critical_path_mean_s"], a["critical_path_mean_s"])
    tail = _ratio(b["critical_path_p95_s"], a["critical_path_p95_s"])
    return {"parallel turn share rises >= 2x": share is not None and share >= 2.0,
            "critical path (mean) falls >= 2x": path is not None and path >= 2.0,
            "critical path (p95) falls >= 2x": tail is not None and tail >= 2.0,
            "reward equal or better": _reward_kept(b, a, tol)}


def tail_claims(b: dict[str, Any], a: dict[str, Any], tol: float) -> dict[str, bool]:
    """Qodo's result on one seed: a baseline tail (p95 >= 4) that halves, reward kept."""
    p95 = _ratio(b["calls_p95"], a["calls_p95"])
    return {"baseline calls p95 >= 4": (b["calls_p95"] or 0.0) >= 4.0,
            "calls p95 falls >= 2x": p95 is not None and p95 >= 2.0,
            "reward equal or better": _reward_kept(b, a, tol)}


CLAIMS: dict[str, Callable[[dict[str, Any], dict[str, Any], float], dict[str, bool]]] = {
    "parallel_lookup": parallel_claims, "long_tail": tail_claims}


def spread(values: list[float | None]) -> dict[str, float | None]:
    """Mean, sample standard deviation (0 for one value), min and max of the known values."""
    xs = [v for v in values if v is not None]
    if not xs:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "min": min(xs), "max": max(xs), "n": len(xs)}


def finished_run(env: str, tag: str, steps: int | None) -> dict[str, Any] | None:
    """A run of ``env`` under ``tag`` that ``bench/case_study.py`` finished (its result.json), if
    it trained as many steps as asked (``steps``: None is the job's own)."""
    path = CASE_STUDY.OUT / f"case_{env}-{tag}" / "result.json"
    if not path.is_file():
        return None
    from arft.config import load_job

    res = json.loads(path.read_text())
    wanted = steps or load_job(ROOT / "examples" / env / "job.yaml").training.max_steps
    return res if res.get("steps") == wanted else None


def variant(settings: list[str] | None) -> str:
    """The folder-name suffix of runs with ``--set`` overrides ('' without)."""
    return "".join("-" + re.sub(r"[^A-Za-z0-9_.]+", "-", x) for x in settings or ())


def run_seed(env: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One training run of ``env`` with ``seed``: its before/after figures and claims. A run this
    benchmark finished before is read back unless ``--retrain``."""
    tag = f"behaviour{variant(args.set)}-seed{seed}"
    res = None if args.retrain else finished_run(env, tag, args.steps)
    if res is not None:
        log(f"{env} seed {seed}: reusing the finished run in {res['run_dir']} (--retrain to train again)")
    else:
        ns = argparse.Namespace(job="job.yaml", train_file=None, train_limit=None, steps=args.steps,
                                tag=tag, resume=False, seed=seed, eval_tasks=args.eval_tasks, set=args.set)
        res = CASE_STUDY.run(env, ns)
    before, after, step = before_after(Path(res["run_dir"]))
    claims = CLAIMS[env](before, after, args.reward_tolerance)
    log(f"{env} seed {seed}: " + "; ".join(f"{k} {'yes' if v else 'NO'}" for k, v in claims.items()))
    return {"seed": seed, "steps": res["steps"], "last_eval_step": step, "wall_s": res["wall_s"],
            "before": before, "after": after, "claims": claims, "run_dir": res["run_dir"]}


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure, before and after over the seeds; per claim, whether every seed holds it."""
    figures = {f: {when: spread([r[when][f] for r in runs]) for when in ("before", "after")} for f in FIGURES}
    claims = {c: all(r["claims"][c] for r in runs) for c in runs[0]["claims"]} if runs else {}
    return {"figures": figures, "claims": claims}


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def fmt_spread(s: dict[str, float | None]) -> str:
    if s["mean"] is None:
        return "n/a"
    return f"{s['mean']:.3f} ± {s['std']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"


def table(env: str, result: dict[str, Any]) -> str:
    """Markdown: per seed before -> after, then mean ± spread; the claims; the histograms."""
    runs, agg = result["runs"], result["aggregate"]
    rows = [f"### {env}", "", "| figure | " + " | ".join(f"seed {r['seed']}" for r in runs)
            + " | mean ± std [min, max]: before | after |", "|---" * (len(runs) + 3) + "|"]
    for f in FIGURES:
        per_seed = " | ".join(f"{fmt(r['before'][f])} → {fmt(r['after'][f])}" for r in runs)
        rows.append(f"| {f} | {per_seed} | {fmt_spread(agg['figures'][f]['before'])} | "
                    f"{fmt_spread(agg['figures'][f]['after'])} |")
    rows += ["", "| claim (must hold on every seed) | " + " | ".join(f"seed {r['seed']}" for r in runs)
             + " | holds |", "|---" * (len(runs) + 2) + "|"]
    for c, ok in agg["claims"].items():
        rows.append(f"| {c} | " + " | ".join("yes" if r["claims"][c] else "no" for r in runs)
                    + f" | **{'yes' if ok else 'no'}** |")
    rows += ["", "tool calls per rollout (histogram, before → after):"]
    for r in runs:
        hist = lambda h: " ".join(f"{k}:{v}" for k, v in h.items()) or "-"  # noqa: E731
        rows.append(f"- seed {r['seed']}: {hist(r['before']['calls_hist'])} → {hist(r['after']['calls_hist'])}")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", nargs="+", default=list(DEFAULT_EXAMPLES), choices=sorted(CLAIMS))
    p.add_argument("--seeds", type=int, default=3, help="runs per example: the job's seed, +1, +2, ...")
    p.add_argument("--steps", type=int, help="override training.max_steps (default: the job's)")
    p.add_argument("--eval-tasks", type=int, help="override training.eval_tasks (default: the job's)")
    p.add_argument("--reward-tolerance", type=float, default=0.0,
                   help="'equal or better' reward: after >= before - this (default 0)")
    p.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE",
                   help="a variant: override a job setting in every run, e.g. training.dynamic_sampling=2")
    p.add_argument("--retrain", action="store_true",
                   help="train every seed again (default: read back runs this benchmark finished)")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error("--seeds must be at least 1")
    from arft.config import load_job

    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"result{variant(args.set)}.json"
    result: dict[str, Any] = {"command": "python -m bench " + " ".join(sys.argv[1:]), "examples": {}}
    for env in args.examples:
        base_seed = load_job(ROOT / "examples" / env / "job.yaml").seed
        runs: list[dict[str, Any]] = []
        for i in range(args.seeds):
            log(f"{env}: seed {base_seed + i} ({i + 1}/{args.seeds})")
            runs.append(run_seed(env, base_seed + i, args))
            result["examples"][env] = {"runs": runs, "aggregate": aggregate(runs)}
            out.write_text(json.dumps(result, indent=2))  # kept after each run
        print()
        print(table(env, result["examples"][env]))
    print()
    for env, res in result["examples"].items():
        print(table(env, res))
        print()
    print(f"command: {result['command']}")
    print(f"result: {out}")
    record("behaviour" + variant(args.set), result)


if __name__ == "__main__":
    main()
