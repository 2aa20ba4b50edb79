"""An agent program's rollouts through arft's gateway run at >= 0.8x the rollouts/s of arft's own loop.

Gateway overhead: the calculator example's rows rolled out two ways on one engine, in one command.

- ``in-process``: arft's own loop (``RolloutRunner`` over the job's python tool,
  ``examples/calculator/tools.py``), as ``arft train`` runs it;
- ``gateway``: the same job with ``agent: {type: python, entrypoint: bench.gateway:calculator_agent}``,
  an agent program as a user writes it (the plain ``openai.AsyncOpenAI`` client, the same tool
  and schema, the same turn and call limits, appending each reply and tool result to the
  history), its model calls sampled through the gateway (``arft.app.gateway``), which records the
  exact tokens.

Both arms run inside ``arft.app.run.open_run`` on the embedded SmolLM2-135M (TransformersEngine,
the job's engine settings), ``tasks x samples`` rollouts a round, taking turns (in-process first
in odd rounds, gateway first in even ones, so machine noise hits both). Within a round both arms
use the same seed, so each rollout samples from the same per-turn seeds; the engine's prefix store
is emptied before each arm's round, so neither reuses the keys and values of the other's identical
prompts (each starts as after a weight update).

Printed and recorded: rollouts/s and sampled tokens/s of each arm (medians over rounds) and their
ratio (goal >= 0.8x); how the gateway made each prompt's ids (``ProgramDriver.kinds``: ``append``
reuses the sampled ids, ``split`` re-renders); and the share of rollouts whose token ids are the
same in both arms at equal seeds (they differ only where batching changes a float, or where the
two agents end differently, e.g. a reply whose tool call does not parse). Also, per arm, what
machine load does not move: the event loop's CPU per turn (this thread's time: the agent loop,
tools, HTTP and JSON; the engine samples on its own thread), prompt tokens prefilled per rollout,
prefill passes and rows per decode step (the engine's batching).

    python -m bench run gateway [--tasks 8] [--samples 2] [--repeats 2] [--max-new-tokens 96]
    python -m bench run gateway --engine scripted --tasks 16 --samples 4   # overhead alone

``--engine scripted`` replaces the model with a scripted engine (a call, then an answer, at
once): what is left is each path's own cost, the ceiling a fast engine (a GPU, vLLM) leaves.
It is printed, not recorded (the recorded figure is the goal's, on the model).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import time
from functools import cache
from typing import Any, Callable, Sequence

from bench.lib.harness import OUT, ROOT, log, record, table

QUICK = ["--tasks", "1", "--samples", "2", "--repeats", "1", "--max-new-tokens", "64"]
GOAL = 0.8
EXAMPLE = ROOT / "examples" / "calculator"
SEED = 1234
MAX_TURNS = 4
"""The job's ``rollout.max_turns`` and ``max_episode_steps`` (checked against the job at start)."""
TOOL_SCHEMA: Any = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression exactly.",
    "parameters": {"type": "object", "properties": {"expression": {
        "type": "string", "description": "The expression, e.g. \"347 * 29\" or \"(12 + 5) * 3\"."}},
        "required": ["expression"]}}}
"""The tool as the agent lists it, written out by hand as a user would (checked against the
schema arft builds from the function, so both arms prompt the model alike)."""


@cache
def calculator() -> Callable[..., str]:
    """The example's own tool function (``examples/calculator/tools.py``)."""
    from arft.tools.python_fn import load_function

    return load_function("tools.py:calculator", EXAMPLE)


def run_tool(arguments: str, calls_so_far: int) -> str:
    """The tool's output as the model sees it, worded as arft's loop words it."""
    if calls_so_far >= MAX_TURNS:
        return f"Error: tool-call budget of {MAX_TURNS} calls is spent; answer with what you have."
    try:
        return str(calculator()(**json.loads(arguments)))
    except Exception as e:  # the model sees the error and may try again
        return f"Error: {type(e).__name__}: {e}"


async def calculator_agent(row: dict[str, Any], client: Any) -> str:
    """The agent program of the ``gateway`` arm: ask, run the calls, append the results, until an
    answer or ``MAX_TURNS`` replies."""
    import openai

    api = openai.AsyncOpenAI(base_url=client.base_url, api_key=client.api_key, max_retries=0)
    messages = list(row["messages"])
    calls = 0
    try:
        for turn in range(MAX_TURNS):
            reply = await api.chat.completions.create(model=client.model, messages=messages, tools=[TOOL_SCHEMA])
            message: Any = reply.choices[0].message  # function calls only: the tool is a function
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls or turn == MAX_TURNS - 1:
                return message.content or ""
            for call in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id, "name": call.function.name,
                                 "content": run_tool(call.function.arguments, calls)})
                calls += 1
    finally:
        await api.close()
    return ""


def jobs(max_new_tokens: int | None, concurrency: int | None) -> tuple[Any, Any]:
    """The calculator job as ``arft train`` reads it (the ``in-process`` arm's) and the same job
    with the agent program (the ``gateway`` arm's)."""
    from arft.config import load_job
    from arft.config.agents import PythonAgentSpec

    job = load_job(EXAMPLE / "job.yaml")
    assert job.rollout.max_turns == MAX_TURNS and job.rl.max_steps == MAX_TURNS, "the agent's limits are the job's"
    assert job.rollout.tool_choice == "auto", "the agent sends no tool_choice: the job's must be auto"
    updates: dict[str, Any] = {}
    if max_new_tokens is not None:
        updates["sampling"] = job.sampling.model_copy(update={"max_new_tokens": max_new_tokens})
    if concurrency is not None:
        updates["rollout"] = job.rollout.model_copy(update={"concurrency": concurrency})
    job = job.model_copy(update=updates)
    agent = PythonAgentSpec(type="python", entrypoint="bench.gateway:calculator_agent")
    return job, job.model_copy(update={"agent": agent})


async def timed(run: Any, tasks: list[Any], samples: int, seed: int) -> dict[str, Any]:
    """One round of an arm: its wall time, its rollouts, and the CPU time of this thread (the event
    loop: the agent loop, tools, HTTP and JSON; the engine samples on a thread of its own)."""
    before = engine_counts(run.engine)
    start, cpu = time.perf_counter(), time.thread_time()
    rollouts = await run.runner.run_many(tasks, samples, run_id="bench", seed=seed)
    wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
    engine = {k: v - before[k] for k, v in engine_counts(run.engine).items()}
    return {"wall_s": wall, "loop_cpu_s": cpu, "rollouts": rollouts, "engine": engine}


def engine_counts(engine: Any) -> dict[str, int]:
    """The engine's counters that say how batched the round ran (``EngineStats``; 0 for the
    scripted engine, which has none)."""
    stats = getattr(engine, "stats", None)
    return {k: getattr(stats, k, 0) for k in ("prefills", "prefill_tokens", "decode_steps", "generated_tokens")}


def scripted_engine() -> Any:
    """``--engine scripted``: no model, every reply at once (a call, then after its result an
    answer), so a round's time is the loops' own overhead: the ceiling a fast engine leaves."""
    from arft.engines.scripted import ScriptedEngine
    from arft.models.loading import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct")

    def reply(ids: Sequence[int]) -> str:
        last = tokenizer.decode(list(ids[-40:])).split("<|im_start|>")[-2]  # the last message
        if "tool_response" in last:
            return "84 * 20 = 1680.<|im_end|>"
        return '<tool_call>\n{"name": "calculator", "arguments": {"expression": "84 * 20"}}\n</tool_call><|im_end|>'

    return ScriptedEngine(tokenizer, reply)


def same_ids(a: Any, b: Any) -> bool:
    return a.token_ids == b.token_ids and a.segments == b.segments


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Both arms in turns over one engine; the raw figures of every round."""
    from arft.app.run import open_run
    from arft.data.splits import load_split
    from arft.engines.factory import build_engine
    from arft.tracing.run_dir import RunDir

    own_job, agent_job = jobs(args.max_new_tokens, args.concurrency)
    tasks = load_split(own_job, "train", args.tasks)
    engine: Any = scripted_engine() if args.engine == "scripted" else build_engine(own_job, role="eval")
    shutil.rmtree(OUT / "gateway", ignore_errors=True)
    arms = ("in-process", "gateway")
    rounds: list[dict[str, Any]] = []
    try:
        async with open_run(own_job, RunDir(OUT / "gateway" / "in-process"), engine=engine) as own, \
                open_run(agent_job, RunDir(OUT / "gateway" / "gateway"), engine=engine) as agent:
            runs = {"in-process": own, "gateway": agent}
            schema = next(iter(own.toolbox.tools.values())).schema
            assert schema == TOOL_SCHEMA, f"the agent's tool schema differs from arft's: {schema}"
            for run in runs.values():  # warm-up: kernels, the prefix store, the HTTP path
                await timed(run, tasks[:1], 1, seed=SEED - 1)
            driver: Any = agent.runner.driver  # the ProgramDriver
            driver.kinds.clear()
            for r in range(args.repeats):
                order = arms if r % 2 == 0 else arms[::-1]
                got: dict[str, Any] = {}
                for name in order:
                    if hasattr(engine, "prefix_cache"):  # no arm reuses the other's prompts (same ids)
                        engine.prefix_cache.clear()
                    got[name] = one = await timed(runs[name], tasks, args.samples, seed=SEED + r)
                    log(f"round {r + 1}/{args.repeats} {name}: {len(one['rollouts']) / one['wall_s']:.3g} rollouts/s")
                rounds.append(got)
            kinds = dict(driver.kinds)
    finally:
        await engine.aclose()
    return {"rounds": rounds, "kinds": kinds, "tasks": len(tasks)}


def summarise(raw: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Medians per arm, the ratio, the kinds of the gateway's prompts, and the ids' agreement."""
    per_arm: dict[str, dict[str, list[float]]] = {}
    statuses: dict[str, dict[str, int]] = {}
    agree = pairs = 0
    for got in raw["rounds"]:
        for name, one in got.items():
            rs = one["rollouts"]
            figures = per_arm.setdefault(name, {"rollouts_per_s": [], "sampled_tok_per_s": [], "turns": [],
                                                "loop_cpu_ms_per_turn": [], "prefill_tokens_per_rollout": [],
                                                "prefills": [], "rows_per_decode_step": []})
            figures["rollouts_per_s"].append(len(rs) / one["wall_s"])
            figures["sampled_tok_per_s"].append(sum(r.n_sampled_tokens for r in rs) / one["wall_s"])
            figures["turns"].append(statistics.mean(r.n_turns for r in rs))
            figures["loop_cpu_ms_per_turn"].append(1000 * one["loop_cpu_s"] / max(sum(r.n_turns for r in rs), 1))
            counts = one["engine"]
            figures["prefill_tokens_per_rollout"].append(counts["prefill_tokens"] / len(rs))
            figures["prefills"].append(counts["prefills"])
            figures["rows_per_decode_step"].append(counts["generated_tokens"] / max(counts["decode_steps"], 1))
            for r in rs:
                statuses.setdefault(name, {})[r.status] = statuses.get(name, {}).get(r.status, 0) + 1
        for a, b in zip(got["in-process"]["rollouts"], got["gateway"]["rollouts"]):
            pairs += 1
            agree += same_ids(a, b)
    med = {name: {k: statistics.median(v) for k, v in figs.items()} for name, figs in per_arm.items()}
    prompts = sum(raw["kinds"].values()) or 1
    return {
        "rollouts_per_s": {n: m["rollouts_per_s"] for n, m in med.items()},
        "sampled_tok_per_s": {n: m["sampled_tok_per_s"] for n, m in med.items()},
        "turns_per_rollout": {n: m["turns"] for n, m in med.items()},
        "loop_cpu_ms_per_turn": {n: m["loop_cpu_ms_per_turn"] for n, m in med.items()},
        "prefill_tokens_per_rollout": {n: m["prefill_tokens_per_rollout"] for n, m in med.items()},
        "prefills_per_round": {n: m["prefills"] for n, m in med.items()},
        "rows_per_decode_step": {n: m["rows_per_decode_step"] for n, m in med.items()},
        "ratio_rollouts_per_s": med["gateway"]["rollouts_per_s"] / med["in-process"]["rollouts_per_s"],
        "ratio_sampled_tok_per_s": med["gateway"]["sampled_tok_per_s"] / med["in-process"]["sampled_tok_per_s"],
        "goal_ratio": GOAL,
        "gateway_prompts": {k: v for k, v in raw["kinds"].items() if v},
        "gateway_prompt_share": {k: v / prompts for k, v in raw["kinds"].items() if v},
        "same_ids_share": agree / pairs if pairs else 0.0,
        "same_ids": f"{agree}/{pairs}",
        "statuses": statuses,
        "rounds_rollouts_per_s": {n: figs["rollouts_per_s"] for n, figs in per_arm.items()},
        "size": {"engine": args.engine, "tasks": raw["tasks"], "samples": args.samples, "repeats": args.repeats,
                 "max_new_tokens": args.max_new_tokens, "concurrency": args.concurrency},
    }


COLUMNS = {"rollouts_per_s": "rollouts/s", "sampled_tok_per_s": "sampled tok/s", "turns_per_rollout": "turns/rollout",
           "loop_cpu_ms_per_turn": "event-loop CPU ms/turn", "prefill_tokens_per_rollout": "prefilled tok/rollout",
           "prefills_per_round": "prefills/round", "rows_per_decode_step": "rows/decode step"}
"""The printed table's columns: medians over rounds of each arm."""


def report(res: dict[str, Any]) -> str:
    rows: list[list[Any]] = [[name, *(res[k][name] for k in COLUMNS)] for name in ("in-process", "gateway")]
    rows.append(["gateway / in-process", res["ratio_rollouts_per_s"], res["ratio_sampled_tok_per_s"]])
    size = res["size"]
    engine = "a scripted engine (no model)" if size["engine"] == "scripted" else "embedded SmolLM2-135M"
    lines = [f"calculator rows: {size['tasks']} tasks x {size['samples']} samples, {size['repeats']} rounds "
             f"per arm (medians), {engine}",
             table(["arm", *COLUMNS.values()], [row + [""] * (len(COLUMNS) + 1 - len(row)) for row in rows]),
             f"goal: gateway >= {GOAL}x in-process rollouts/s -> "
             f"{'met' if res['ratio_rollouts_per_s'] >= GOAL else 'NOT met'} ({res['ratio_rollouts_per_s']:.2f}x)"
             + (" (no model: the loops' own ceilings, not the goal's measure)" if size["engine"] == "scripted" else ""),
             "gateway prompts: " + ", ".join(f"{k} {v} ({res['gateway_prompt_share'][k]:.0%})"
                                             for k, v in res["gateway_prompts"].items()),
             f"same token ids at equal seeds: {res['same_ids']} rollouts ({res['same_ids_share']:.0%})",
             f"statuses: {json.dumps(res['statuses'])}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=8, help="calculator train rows")
    ap.add_argument("--samples", type=int, default=2, help="rollouts per row")
    ap.add_argument("--repeats", type=int, default=2, help="rounds per arm (even: each arm goes first as often)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="per turn (default: the job's)")
    ap.add_argument("--concurrency", type=int, default=None, help="rollouts at once (default: the job's)")
    ap.add_argument("--engine", choices=("model", "scripted"), default="model",
                    help="scripted: no model, the loops' overhead alone (printed, not recorded)")
    args = ap.parse_args(argv)
    res = summarise(asyncio.run(measure(args)), args)
    print(report(res))
    if args.engine == "model":  # the recorded figure is the goal's: on the model
        record("gateway", res)


if __name__ == "__main__":
    main()
