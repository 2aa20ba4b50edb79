"""A constrained call always finishes: closing open calls by their shortest completion gives >= 95 % valid calls.

Call closing benchmark: on plain rows with short turns, how many constrained calls does the turn's
token limit cut off, with and without the engine closing them?

    python -m bench run call_closing [--examples calculator finance_lookup] [--tasks 16]
                                     [--samples 2] [--max-new-tokens 64] [--max-turns N]
                                     [--untuned]

For each example's plain-rows variant (``examples/ENV/job_plain.yaml``, constrained calls on,
``sampling.max_new_tokens`` set to ``--max-new-tokens``), on one loaded model, the same tasks and
seeds are evaluated twice, side by side:

- **off**: the engine's ``closer`` disabled: a call still open when the turn's budget runs out
  is cut (a parse error), as before;
- **on**: the engine closes such a call by the grammar's shortest completion
  (``arft.engines.call_closing``).

``--untuned`` drops the two workarounds finance_lookup's plain job carries (``maxLength`` on every
string argument, one call per turn): the schemas as a team new to the tools would first write them.

Printed per example and arm: the valid tool-call rate (attempted calls that parsed, named one of
the row's tools and validate against its schema, as ``bench/plain_rows.py`` counts them), the
turns that ended inside a call (engine ``cut_calls``), the calls closed for the budget (engine
``closed_calls``, and the rollouts' ``closed_calls``), further calls opened too late and dropped
with the look-ahead (engine ``dropped_calls``), the reward, the wall time and the seconds the
engine spent searching completions.

Output: a table on stdout, ``bench/out/call_closing/result.json`` and the recorded result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from typing import Any, Sequence

from bench.lib.case_runs import EXAMPLES
from bench.lib.harness import OUT as BENCH_OUT
from bench.lib.harness import ROOT, log, record
from bench.plain_rows import call_metrics, plain_job, tool_schemas

QUICK = ["--examples", "calculator", "--tasks", "1", "--samples", "2", "--max-turns", "2"]
OUT = BENCH_OUT / "call_closing"
GOAL = 0.95


def without_max_length(schema: Any) -> Any:
    """``schema`` with every ``maxLength`` removed (at any depth)."""
    if isinstance(schema, dict):
        return {k: without_max_length(v) for k, v in schema.items() if k != "maxLength"}
    if isinstance(schema, list):
        return [without_max_length(v) for v in schema]
    return schema


def short_turn_job(env: str, max_new_tokens: int, untuned: bool, max_turns: int | None = None) -> Any:
    """The plain job with constrained calls on and ``max_new_tokens``-token turns."""
    job = plain_job(env, True)
    job = job.model_copy(update={"sampling": job.sampling.model_copy(update={"max_new_tokens": max_new_tokens})})
    if max_turns is not None:
        job = job.model_copy(update={"rollout": job.rollout.model_copy(update={"max_turns": max_turns})})
    if untuned:
        tools = [t.model_copy(update={"parameters": without_max_length(t.parameters)})
                 if getattr(t, "parameters", None) else t for t in job.rl.tools]
        job = job.model_copy(update={
            "rl": job.rl.model_copy(update={"tools": tools}),
            "rollout": job.rollout.model_copy(update={"parallel_tool_calls": True})})
    return job


async def one_arm(job: Any, env: str, label: str, tasks: list[Any], samples: int, engine: Any,
                  schemas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    from arft.app.evaluate import evaluate

    engine.closer.enabled = label == "on"
    cut0, closed0, search0 = engine.stats.cut_calls, engine.stats.closed_calls, engine.closer.search_s
    dropped0 = engine.stats.dropped_calls
    run_dir = OUT / f"{env}-{label}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh store: one eval per folder
    t0 = time.perf_counter()
    result = await evaluate(job, tasks, samples, run_dir, engine=engine)
    m = call_metrics(result.rollouts, schemas)
    m.update(wall_s=time.perf_counter() - t0, turns_cut_inside_a_call=engine.stats.cut_calls - cut0,
             engine_closed_calls=engine.stats.closed_calls - closed0,
             engine_dropped_calls=engine.stats.dropped_calls - dropped0,
             rollout_closed_calls=sum(r.closed_calls for r in result.rollouts),
             closing_search_s=engine.closer.search_s - search0)
    log(f"  {env} closing {label}: valid calls {m['valid_call_rate']:.0%} of {m['attempted_calls']}, "
        f"turns cut inside a call {m['turns_cut_inside_a_call']}, closed {m['engine_closed_calls']} "
        f"({m['wall_s']:.0f} s)")
    return m


async def measure(envs: list[str], args: argparse.Namespace, engine: Any) -> dict[str, Any]:
    from arft.data.splits import load_split

    out: dict[str, Any] = {}
    for env in envs:
        job = short_turn_job(env, args.max_new_tokens, args.untuned, args.max_turns)
        with EXAMPLES.services(ROOT / "examples" / env):
            schemas = await tool_schemas(job)
            tasks = load_split(job, "validation", args.tasks)
            log(f"{env}: {len(tasks)} tasks x {args.samples} samples, {args.max_new_tokens}-token turns")
            out[env] = {label: await one_arm(job, env, label, tasks, args.samples, engine, schemas)
                        for label in ("off", "on")}
    return out


def table(res: dict[str, Any]) -> str:
    rows = ["| example | closing | valid tool-call rate | turns cut inside a call | calls closed for "
            "the budget | late calls dropped | reward | wall s |", "|---|---|---|---|---|---|---|---|"]
    for env, by in res.items():
        for label in ("off", "on"):
            m = by[label]
            rows.append(f"| {env} | {label} | {100 * m['valid_call_rate']:.0f}% ({m['attempted_calls']} "
                        f"attempted) | {m['turns_cut_inside_a_call']} | {m['engine_closed_calls']} | "
                        f"{m['engine_dropped_calls']} | {m['reward']:.3f} | {m['wall_s']:.0f} |")
    return "\n".join(rows)


def verdict(res: dict[str, Any]) -> str:
    on = [by["on"] for by in res.values()]
    ok = all(m["valid_call_rate"] >= GOAL and m["turns_cut_inside_a_call"] == 0 for m in on)
    rates = ", ".join(f"{env} {100 * by['off']['valid_call_rate']:.0f}% -> {100 * by['on']['valid_call_rate']:.0f}%"
                      for env, by in res.items())
    return f"{'PASS' if ok else 'FAIL'}: valid calls off -> on: {rates} (goal >= {GOAL:.0%}, no turn cut inside a call)"


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", nargs="+", default=["calculator", "finance_lookup"])
    p.add_argument("--tasks", type=int, default=16, help="validation rows per arm")
    p.add_argument("--samples", type=int, default=2, help="rollouts per row")
    p.add_argument("--max-new-tokens", type=int, default=64, help="each turn's sampling.max_new_tokens")
    p.add_argument("--max-turns", type=int, help="override rollout.max_turns (the quick size)")
    p.add_argument("--untuned", action="store_true",
                   help="drop maxLength from the tool schemas and allow parallel calls")
    args = p.parse_args(argv)
    from arft.engines.factory import build_engine

    OUT.mkdir(parents=True, exist_ok=True)
    engine = build_engine(plain_job(args.examples[0]), role="eval")

    async def run() -> dict[str, Any]:
        try:
            return await measure(args.examples, args, engine)
        finally:
            await engine.aclose()

    res = asyncio.run(run())
    result = {"command": "python -m bench run call_closing " + " ".join(sys.argv[1:] if argv is None else argv),
              "examples": res, "verdict": verdict(res), "table": table(res)}
    (OUT / "result.json").write_text(json.dumps(result, indent=2))
    print()
    print(table(res))
    print(verdict(res))
    record("call_closing", result)


if __name__ == "__main__":
    main()
