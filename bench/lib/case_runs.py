"""Training one example environment and reading its evals back: what ``case_study`` runs and what
``behaviour``, ``plain_rows``, ``few_demos``, ``warm_start`` and ``learn_demo`` reuse.

``run(env, args)`` trains ``examples/ENV`` with its own job (plus the overrides in ``args``) and
returns baseline vs every later eval; ``table`` and ``verdict`` print it. The example's services
(``examples/ENV/services.py``) run around the training, as ``examples/run.py`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

from arft.pyfile import load_file
from bench.lib.harness import OUT, ROOT, log


EXAMPLES = load_file(ROOT / "examples" / "run.py", "examples_run")
"""``examples/run.py``: its ``example_hook`` and ``services``."""


def extra_metrics(env_dir: Path) -> Callable[[list[Any]], dict[str, float]] | None:
    """The example's own ``bench_metrics.metrics(rollouts) -> dict`` function, when it has one."""
    return EXAMPLES.example_hook(env_dir, "bench_metrics", "metrics")  # type: ignore[no-any-return]


def eval_row(summary: Any, rollouts: list[Any], extra: Callable[[list[Any]], dict[str, float]] | None) -> dict[str, Any]:
    """The numbers of one eval this benchmark reports."""
    tc = summary.tool_calls
    row = {"reward": summary.reward.mean, "pass_rate": summary.pass_rate,
           "n_rollouts": summary.n_rollouts, "n_graded": summary.reward.n_graded,
           "n_infra_failed": summary.n_infra_failed,
           "calls_mean": tc.mean, "calls_p50": tc.p50, "calls_p95": tc.p95, "calls_max": tc.max,
           "calls_hist": tc.histogram, "parallel_turn_share": tc.parallel_turn_share,
           "parse_errors_per_rollout": summary.parse_errors_per_rollout,
           "per_tool_calls": {name: t.calls for name, t in summary.tools.items()}}
    if extra is not None:
        row["extra"] = extra(rollouts)
    return row


def evals_of(run_dir: Path, extra: Callable[[list[Any]], dict[str, float]] | None) -> dict[int, dict[str, Any]]:
    """Step -> the numbers of that eval (``eval_row``), from a training run's store."""
    from arft.metrics.summary import summarize
    from arft.tracing.store import RunStore

    evals: dict[int, dict[str, Any]] = {}
    with RunStore(run_dir / "arft.sqlite") as store:
        for r in store.runs():
            step = (r.get("job") or {}).get("step")
            if r["kind"] == "eval" and step is not None:
                rollouts = store.rollouts(r["run_id"])
                evals[int(step)] = eval_row(summarize(rollouts), rollouts, extra)
    return evals


def load_job_with_overrides(env: str, args: argparse.Namespace, run_dir: Path) -> Any:
    """The example's job, with the training file / limit / steps this run asks for."""
    from arft.config import load_job

    job = load_job(ROOT / "examples" / env / args.job)
    update: dict[str, Any] = {}
    if args.train_file:
        update["training_file"] = str((ROOT / "examples" / env / args.train_file).resolve())
    if args.train_limit:
        src = job.path(update.get("training_file") or job.training_file)
        lines = [ln for ln in Path(src).read_text().splitlines() if ln.strip()]
        if args.train_limit > len(lines):
            sys.exit(f"--train-limit {args.train_limit} > the {len(lines)} rows of {src}")
        run_dir.mkdir(parents=True, exist_ok=True)
        subset = run_dir / f"train_first_{args.train_limit}.jsonl"
        subset.write_text("\n".join(lines[:args.train_limit]) + "\n")
        update["training_file"] = str(subset)
    if update:
        job = job.model_copy(update=update)
    if args.steps:
        job = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": args.steps})})
    if getattr(args, "seed", None) is not None:  # callers' Namespaces may predate --seed
        job = job.model_copy(update={"seed": args.seed})
    if getattr(args, "eval_tasks", None):
        job = job.model_copy(update={"training": job.training.model_copy(update={"eval_tasks": args.eval_tasks})})
    for setting in getattr(args, "set", None) or ():
        job = with_setting(job, setting)
    return job


def with_setting(job: Any, setting: str) -> Any:
    """``job`` with ``SECTION.FIELD=VALUE`` set (VALUE read as YAML), the section validated again."""
    import yaml
    from pydantic import BaseModel

    key, sep, raw = setting.partition("=")
    section, dot, field = key.partition(".")
    if not (sep and dot) or not isinstance(getattr(job, section, None), BaseModel):
        sys.exit(f"--set {setting!r}: expected SECTION.FIELD=VALUE, e.g. training.dynamic_sampling=2")
    spec = getattr(job, section)
    if field not in type(spec).model_fields:
        sys.exit(f"--set {setting!r}: {section} has no field {field!r} (it has {', '.join(type(spec).model_fields)})")
    new = type(spec).model_validate({**spec.model_dump(), field: yaml.safe_load(raw)})
    return job.model_copy(update={section: new})


def run(env: str, args: argparse.Namespace) -> dict[str, Any]:
    from arft.report.summary import summary_line
    from arft.app.train import Hooks, train

    env_dir = ROOT / "examples" / env
    if not (env_dir / args.job).exists():
        sys.exit(f"no examples/{env}/{args.job}: ENV is a folder under examples/ (with that job file)")
    name = f"case_{env}" + (f"-{args.tag}" if args.tag else "")
    out_dir = OUT / name
    run_dir = out_dir / "run"
    if run_dir.exists() and any(run_dir.iterdir()) and not args.resume:
        import shutil

        shutil.rmtree(run_dir)
        (out_dir / "result.json").unlink(missing_ok=True)  # it described the run just removed
    job = load_job_with_overrides(env, args, run_dir)
    t0 = time.perf_counter()
    step_rewards: dict[int, float] = {}

    def step_done(step: int, m: dict[str, float]) -> None:
        step_rewards[step] = m.get("train/task_reward_mean", float("nan"))
        log(f"  step {step}: {m.get('time/step_s', 0):.0f} s, train reward {step_rewards[step]:.3f}, "
            f"groups dropped {m.get('train/groups_dropped', 0):.0f}/{m.get('train/groups', 0):.0f}")

    def eval_done(step: int, summary: Any) -> None:
        log(f"  eval @ step {step}: {summary_line(summary)}")

    log(f"{env}: training {job.training.max_steps or 'n_epochs'} steps into {run_dir}")
    with EXAMPLES.services(env_dir):  # an example's HTTP tool server / judge, when it has one
        result = asyncio.run(train(job, run_dir, resume=args.resume, hooks=Hooks(
            status=lambda s: log(f"  {s}"), step_done=step_done, eval_done=eval_done)))
    wall = time.perf_counter() - t0
    extra = extra_metrics(env_dir)
    evals = evals_of(run_dir, extra)
    n_train = sum(1 for ln in Path(job.path(job.training_file)).read_text().splitlines() if ln.strip())
    res = {"env": env, "tag": args.tag, "train_rows": n_train, "steps": result.steps, "wall_s": wall,
           "train_reward_by_step": step_rewards, "evals": evals, "run_dir": str(run_dir),
           "command": "python -m bench " + " ".join(sys.argv[1:])}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "result.json").write_text(json.dumps(res, indent=2))
    return res


def fmt(x: Any, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    if pct:
        return f"{100 * x:.1f}%"
    return f"{x:.2f}" if isinstance(x, float) else str(x)


def table(res: dict[str, Any]) -> str:
    """A Markdown table: baseline (step 0) vs every later eval."""
    evals = {int(k): v for k, v in res["evals"].items()}
    steps = sorted(evals)
    head = "| metric | " + " | ".join("baseline (step 0)" if s == 0 else f"step {s}" for s in steps) + " |"
    rows = [head, "|---" * (len(steps) + 1) + "|"]

    def line(label: str, get: Callable[[dict[str, Any]], str]) -> None:
        rows.append(f"| {label} | " + " | ".join(get(evals[s]) for s in steps) + " |")

    line("eval reward (mean)", lambda e: fmt(e["reward"]))
    line("pass rate", lambda e: fmt(e["pass_rate"], pct=True))
    line("tool calls / rollout: mean", lambda e: fmt(e["calls_mean"]))
    line("tool calls / rollout: p95", lambda e: fmt(e["calls_p95"]))
    line("tool calls / rollout: max", lambda e: fmt(e["calls_max"]))
    line("calls histogram", lambda e: " ".join(f"{k}:{v}" for k, v in e["calls_hist"].items()) or "-")
    line("parallel tool turns", lambda e: fmt(e["parallel_turn_share"], pct=True))
    line("parse errors / rollout", lambda e: fmt(e["parse_errors_per_rollout"]))
    for key in sorted({k for e in evals.values() for k in e.get("extra", {})}):
        line(key, lambda e, key=key: fmt(e.get("extra", {}).get(key)))
    return "\n".join(rows)


def verdict(res: dict[str, Any]) -> str:
    evals = {int(k): v for k, v in res["evals"].items()}
    if 0 not in evals or len(evals) < 2:
        return "no baseline + trained eval pair to compare"
    base, last = evals[0], evals[max(evals)]
    gain = None if base["reward"] is None or last["reward"] is None else 100 * (last["reward"] - base["reward"])
    p95 = (f"{base['calls_p95']} -> {last['calls_p95']}" if base["calls_p95"] is not None else "n/a")
    return (f"{res['env']}: eval reward {fmt(base['reward'])} -> {fmt(last['reward'])} "
            f"({'n/a' if gain is None else f'{gain:+.1f}'} points; goal +30), p95 tool calls {p95}, "
            f"{res['steps']} steps on {res['train_rows']} training rows, {res['wall_s'] / 60:.1f} min")
