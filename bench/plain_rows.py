"""Constrained tool calls give plain rows valid calls and reward variance, at <= 10 % of decode time.

Plain rows benchmark: can RL start on rows without worked examples once tool calls are constrained?

    python -m bench run plain_rows [--examples calculator finance_lookup code_qa] [--tasks 8]
                               [--samples 4] [--no-train] [--steps N]

For each example's plain-rows variant (``examples/ENV/job_plain.yaml``: only the system prompt and
the user request in every row, as real traffic has), in one command on one loaded model:

1. **Baseline, constraints off vs on, side by side**: the first ``--tasks`` validation rows,
   ``--samples`` rollouts each, with ``rollout.constrained_tool_calls`` false and then true.
   Printed per example: the valid tool-call rate (attempted calls that parsed, named one of the
   row's tools and whose arguments validate against its schema), the share of rollouts with at
   least one valid call, the baseline reward, the share of tasks with reward variance (what GRPO
   needs), the constrained-call share and the parse-error rate.
2. **Mask overhead at batch 32**: 32 plain prompts decoded together without and with the grammar;
   the share of decode wall time spent in masks (fill + apply + advance) and the tok/s ratio.
3. **Training** (unless ``--no-train``): each constrained plain variant trained with its job
   (``bench/case_study.py ENV --job job_plain.yaml --tag plain``), baseline vs final eval reward.

Output: tables on stdout and ``bench/out/plain_rows/result.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from typing import Any, Sequence

from bench.lib import case_runs as CASE_STUDY
from bench.lib.case_runs import EXAMPLES
from bench.lib.harness import OUT as BENCH_OUT
from bench.lib.harness import ROOT, log, record

SLOW = True  # baselines of three examples with a model each, then training
QUICK = ["--examples", "calculator", "--tasks", "2", "--samples", "2", "--no-train"]
OUT = BENCH_OUT / "plain_rows"
DEFAULT_EXAMPLES = ("calculator", "finance_lookup", "code_qa")


def plain_job(env: str, constrained: bool | None = None) -> Any:
    from arft.config import load_job

    path = ROOT / "examples" / env / "job_plain.yaml"
    if not path.exists():
        sys.exit(f"no {path.relative_to(ROOT)}: the plain-rows variant of {env} is missing")
    job = load_job(path)
    if constrained is not None:
        job = job.model_copy(update={"rollout": job.rollout.model_copy(
            update={"constrained_tool_calls": constrained})})
    return job


def valid_call(call: Any, schemas: dict[str, dict[str, Any]]) -> bool:
    """Parsed, names one of the row's tools, and its arguments validate against that schema."""
    import jsonschema

    unknown = call.status == "tool_error" and (call.error or "").startswith("unknown tool")
    if call.status in ("parse_error", "refused") or unknown or call.name not in schemas:
        return False
    try:
        jsonschema.validate(json.loads(call.arguments or "{}"), schemas[call.name])
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def call_metrics(rollouts: list[Any], schemas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Validity of the calls and exploration of the rewards, over one baseline eval."""
    from arft.app.doctor.reward_checks import task_rewards
    from arft.metrics.summary import summarize

    attempted = valid = with_valid = 0
    for r in rollouts:
        ok = sum(valid_call(c, schemas) for c in r.model_calls)
        attempted += len(r.model_calls) + r.parse_errors
        valid += ok
        with_valid += ok > 0
    per_task = {t: rs for t, rs in task_rewards(rollouts).items() if len(rs) >= 2}
    varied = sum(1 for rs in per_task.values() if max(rs) - min(rs) > 1e-9)
    s = summarize(rollouts)
    return {"rollouts": len(rollouts), "attempted_calls": attempted,
            "valid_call_rate": valid / attempted if attempted else 0.0,
            "rollouts_with_valid_call": with_valid / len(rollouts) if rollouts else 0.0,
            "reward": s.reward.mean, "variance_share": varied / len(per_task) if per_task else 0.0,
            "constrained_call_share": s.constrained_call_share, "parse_error_rate": s.parse_error_rate}


async def tool_schemas(job: Any) -> dict[str, dict[str, Any]]:
    from arft.tools.registry import open_toolbox

    box = await open_toolbox(job.rl.tools, job.base_dir)
    try:
        return {name: t.schema["function"].get("parameters") or {"type": "object"}
                for name, t in box.tools.items()}
    finally:
        await box.aclose()


async def baselines(envs: list[str], n_tasks: int, samples: int, engine: Any) -> dict[str, Any]:
    from arft.app.evaluate import evaluate
    from arft.data.splits import load_split

    out: dict[str, Any] = {}
    for env in envs:
        out[env] = {}
        with EXAMPLES.services(ROOT / "examples" / env):
            schemas = await tool_schemas(plain_job(env))  # the same tools for both evals
            for constrained in (False, True):
                job = plain_job(env, constrained)
                tasks = load_split(job, "validation", n_tasks)
                label = "on" if constrained else "off"
                log(f"{env}: baseline, constraints {label}: {len(tasks)} tasks x {samples} samples")
                t0 = time.perf_counter()
                run_dir = OUT / f"{env}-{label}"
                shutil.rmtree(run_dir, ignore_errors=True)  # a fresh store: one eval per folder
                result = await evaluate(job, tasks, samples, run_dir, engine=engine)
                m = call_metrics(result.rollouts, schemas)
                m["wall_s"] = time.perf_counter() - t0
                out[env][label] = m
                log(f"  valid calls {m['valid_call_rate']:.0%}, reward {m['reward']:.3f}, "
                    f"tasks with variance {m['variance_share']:.0%} ({m['wall_s']:.0f} s)")
    return out


async def mask_overhead(engine: Any, batch: int = 32, new_tokens: int = 64) -> dict[str, float]:
    """Decode ``batch`` plain prompts together without, then with, the tool-call grammar."""
    from arft.engines.base import SamplingParams
    from arft.chat.formats import ChatFormat
    from arft.data.splits import load_split

    job = plain_job("calculator")
    tasks = (load_split(job, "train", None) * batch)[:batch]
    fmt = ChatFormat(engine.tokenizer, worked_example=job.rollout.worked_example)
    schemas = list((await tool_schemas(job)).items())
    tools = [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in schemas]
    prompts = [fmt.render_prompt(t.messages, tools, "required") for t in tasks]
    grammar = fmt.tool_grammar(tools, constrain_all=True)
    res: dict[str, float] = {}
    for label, g in (("off", None), ("on", grammar)):
        # No stop strings: every row decodes new_tokens tokens, so both runs do the same work.
        spec = job.sampling.model_copy(update={"temperature": 1.0, "max_new_tokens": new_tokens})
        params = [SamplingParams.from_spec(spec, seed=i,
                                           grammar=None if g is None else g.with_prefill(p.prefill))
                  for i, p in enumerate(prompts)]
        mask0, t0 = engine.masker.mask_s, time.perf_counter()
        gens = await asyncio.gather(*(engine.generate(p.ids, sp) for p, sp in zip(prompts, params)))
        wall = time.perf_counter() - t0
        tokens = sum(len(x.token_ids) for x in gens)
        res[f"{label}_tok_s"] = tokens / wall
        res[f"{label}_wall_s"] = wall
        res[f"{label}_mask_s"] = engine.masker.mask_s - mask0
    res["mask_share_of_decode"] = res["on_mask_s"] / res["on_wall_s"]
    res["throughput_ratio_on_off"] = res["on_tok_s"] / res["off_tok_s"]
    return res


def train_one(env: str, steps: int | None) -> dict[str, Any]:
    """``bench/case_study.py ENV --job job_plain.yaml --tag plain``: baseline and trained evals."""
    args = argparse.Namespace(train_file=None, train_limit=None, steps=steps, tag="plain",
                              resume=False, job="job_plain.yaml")
    res = CASE_STUDY.run(env, args)
    print(CASE_STUDY.table(res))
    print(CASE_STUDY.verdict(res))
    evals = {int(k): v for k, v in res["evals"].items()}
    return {"verdict": CASE_STUDY.verdict(res), "table": CASE_STUDY.table(res),
            "reward_by_eval": {k: v["reward"] for k, v in sorted(evals.items())},
            "train_reward_by_step": res["train_reward_by_step"], "wall_s": res["wall_s"],
            "result": str(OUT.parent / f"case_{env}-plain" / "result.json")}


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def baseline_table(base: dict[str, Any]) -> str:
    rows = ["| example | constraints | valid tool-call rate | rollouts with a valid call | baseline "
            "reward | tasks with reward variance | constrained calls | parse-error rate |",
            "|---|---|---|---|---|---|---|---|"]
    for env, by in base.items():
        for label in ("off", "on"):
            m = by[label]
            rows.append(f"| {env} | {label} | {pct(m['valid_call_rate'])} ({m['attempted_calls']} "
                        f"attempted) | {pct(m['rollouts_with_valid_call'])} | {m['reward']:.3f} | "
                        f"{pct(m['variance_share'])} | {pct(m['constrained_call_share'])} | "
                        f"{pct(m['parse_error_rate'])} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", nargs="+", default=list(DEFAULT_EXAMPLES))
    p.add_argument("--tasks", type=int, default=8, help="validation rows per baseline eval")
    p.add_argument("--samples", type=int, default=4, help="rollouts per row (GRPO's group size)")
    p.add_argument("--no-train", action="store_true", help="baselines and mask overhead only")
    p.add_argument("--steps", type=int, help="override training.max_steps of the plain jobs")
    args = p.parse_args(argv)
    from arft.engines.factory import build_engine

    OUT.mkdir(parents=True, exist_ok=True)
    engine = build_engine(plain_job(args.examples[0]), role="eval")

    async def measure() -> tuple[dict[str, Any], dict[str, float]]:
        try:
            base = await baselines(args.examples, args.tasks, args.samples, engine)
            log("mask overhead: 32 prompts x 64 tokens, without and with the grammar")
            return base, await mask_overhead(engine)
        finally:
            await engine.aclose()

    base, overhead = asyncio.run(measure())
    result: dict[str, Any] = {"command": "python -m bench " + " ".join(sys.argv[1:]),
                              "baselines": base, "mask_overhead": overhead}
    (OUT / "result.json").write_text(json.dumps(result, indent=2))
    print()
    print(baseline_table(base))
    print()
    print(f"mask overhead at batch 32: {overhead['mask_share_of_decode']:.1%} of decode wall time "
          f"(goal <= 10%); throughput with/without grammar {overhead['throughput_ratio_on_off']:.2f}x "
          f"({overhead['on_tok_s']:.0f} vs {overhead['off_tok_s']:.0f} tok/s)")
    if not args.no_train:
        result["training"] = {}
        for env in args.examples:
            result["training"][env] = train_one(env, args.steps)
            (OUT / "result.json").write_text(json.dumps(result, indent=2))  # kept after each run
        print()
        print(baseline_table(base))
        for t in result["training"].values():
            print(t["verdict"])
    print(f"command: {result['command']}")
    record("plain_rows", result)


if __name__ == "__main__":
    main()
