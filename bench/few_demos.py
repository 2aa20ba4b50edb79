"""A warm start on 10 demonstrations lifts plain rows the untrained model cannot solve (goal +15 points).

The talk's "10 examples": a warm start from 10 demonstrations on plain rows, before any RL.

    python -m bench run few_demos [--demos 10] [--teacher-tasks 16] [--eval-tasks 16] [--epochs 5]
                              [--batch-size 5] [--learning-rate 5e-4]

On ``examples/finance_lookup/job_plain.yaml`` (rows that are only a system prompt and a question,
as real traffic is; constrained tool calls on) the embedded 135M model calls the tools but earns
nothing: reward 0, no variance, so RL has no signal (``plain_rows``). Here:

1. **A teacher behind an OpenAI-compatible endpoint** answers the first ``--teacher-tasks``
   training rows through ``engine: openai`` (an ``arft eval`` run of the plain job, graded by its
   grader, the real tool server answering the calls). No stronger model is reachable on this
   machine, so the teacher is a scripted expert served on 127.0.0.1: it searches for the figure
   the question names (two searches for a computed figure) and answers from the reference. Any
   model behind an OpenAI-compatible server fits the same slot.
2. ``arft sft`` on the first ``--demos`` of its successful rollouts (rendered in the student's
   own format: the teacher's run has no token ids), with the untrained baseline and the final
   eval on the first ``--eval-tasks`` validation rows (the job's eval samples each).
3. With ``--rl-steps N``: ``arft train`` from the warm start (``training.init_from``) for N
   steps, with the job's own learning rate, on the same eval rows.

Printed: the teacher's reward, the demonstrations used, the baseline vs warm-start eval reward
(goal: +15 points) and the valid tool-call rate. Results: ``bench/out/few_demos/result.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from bench.lib.case_runs import EXAMPLES
from bench.lib.harness import OUT, ROOT, log, record

SLOW = True  # a teacher eval, sft and two evals: tens of minutes
QUICK = ["--demos", "2", "--teacher-tasks", "4", "--eval-tasks", "2", "--epochs", "1", "--batch-size", "2"]

PORT = 8791
FIGURE = {"revenue": "revenue", "net_income": "net income", "operating_margin": "operating margin",
          "headcount": "headcount", "revenue_growth": "revenue", "revenue_change": "revenue",
          "net_margin": "net income"}


def finance_plan(item: dict[str, Any]) -> list[str]:
    """The searches an expert makes for a finance_lookup row: the figure the question names (a
    computed one needs revenue, whose line also shows the prior year's, or net income and revenue)."""
    queries = [f"{item['company']} {item['year']} {FIGURE[item['kind']]}"]
    if item["kind"] == "net_margin":
        queries.append(f"{item['company']} {item['year']} revenue")
    return queries


def _words(kind: str) -> str:
    """A code_qa row's kind as words: ``port+timeout`` -> ``port and timeout``."""
    return " and ".join(k.replace("_", " ") for k in kind.split("+"))


EXPERTS: dict[str, tuple[Any, Any]] = {
    # example: (its searches for a row, its answer for a row)
    "finance_lookup": (finance_plan, lambda item: f"Answer: {item['answer_text']}"),
    "code_qa": (lambda item: [f"{item['service']} {_words(item['kind'])}"],
                lambda item: f"The {_words(item['kind'])} of the {item['service']} service: "
                             + ", ".join(str(f) for f in item["facts"]) + "."),
}


def teacher_app(rows: dict[str, dict[str, Any]], env: str) -> Any:
    """An OpenAI-compatible /v1/chat/completions that acts as the expert for the rows it knows
    (keyed by the user's question)."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(body: dict[str, Any]) -> dict[str, Any]:
        msgs = body["messages"]
        question = next(m["content"] for m in msgs if m["role"] == "user")
        item = rows[question]
        done = sum(1 for m in msgs if m["role"] == "tool")
        plan_of, answer_of = EXPERTS[env]
        plan = plan_of(item)
        if done < len(plan):
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{done}", "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": plan[done]})}}]}
        else:
            message = {"role": "assistant", "content": answer_of(item)}
        return {"id": "x", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    return app


def serve(app: Any) -> Any:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=PORT, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server


def valid_call_rate(rollouts: list[Any]) -> float:
    calls = [c for r in rollouts for c in r.tool_calls]
    return sum(c.status == "ok" for c in calls) / len(calls) if calls else float("nan")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from arft.app.evaluate import evaluate
    from arft.app.sft import SftOptions, sft
    from arft.config import OpenAIEngineSpec, load_job
    from arft.data.splits import load_split
    from arft.tracing.run_dir import RunDir

    from warm_start import hooks

    out = OUT / f"few_demos_{args.env}"
    shutil.rmtree(out, ignore_errors=True)
    student = load_job(ROOT / "examples" / args.env / "job_plain.yaml")
    student = student.model_copy(update={"training": student.training.model_copy(update={
        "eval_tasks": args.eval_tasks})})
    teacher = student.model_copy(update={"engine": OpenAIEngineSpec(
        type="openai", base_url=f"http://127.0.0.1:{PORT}/v1", served_model="expert")})
    tasks = load_split(student, "train", args.teacher_tasks)
    t0 = time.perf_counter()
    log(f"teacher: {len(tasks)} training rows through engine: openai")
    taught = await evaluate(teacher, tasks, 1, out / "teacher", split="train")
    log(f"  teacher reward {taught.summary.reward.mean:.2f}")
    options = SftOptions(epochs=args.epochs, batch_size=args.batch_size, min_reward=args.min_reward,
                         best_of=1, limit=args.demos, learning_rate=args.learning_rate)
    result = await sft(student, out / "teacher", out / "student", options=options, hooks=hooks())
    with RunDir(out / "student").open_store() as store:
        evals = {step: store.rollouts(f"sft:eval-{step:06d}") for step in (0, result.steps)}
    rl = await _rl(student, out, args) if args.rl_steps else {}
    res = {"command": "python -m bench " + " ".join(sys.argv[1:]), "env": args.env,
           "wall_s": time.perf_counter() - t0,
           "teacher_reward": taught.summary.reward.mean, "demos": result.demos, "sft_steps": result.steps,
           "dropped": result.dropped,
           "evals": {str(step): {"reward": result.evals[step].reward.mean, "pass_rate": result.evals[step].pass_rate,
                                 "valid_call_rate": valid_call_rate(rs), "rollouts": len(rs),
                                 "calls_mean": result.evals[step].tool_calls.mean}
                     for step, rs in evals.items()}, "rl": rl}
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(res, indent=2))
    return res


async def _rl(student: Any, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """RL from the warm start (``training.init_from``) for ``--rl-steps`` steps: eval reward by step."""
    from arft.app.train import train

    from warm_start import hooks

    job = student.model_copy(update={"training": student.training.model_copy(update={
        "init_from": str(out / "student"), "max_steps": args.rl_steps})})
    t0 = time.perf_counter()
    result = await train(job, out / "rl", hooks=hooks())
    return {"wall_s": time.perf_counter() - t0,
            "reward_by_eval": {str(s): e.reward.mean for s, e in sorted(result.evals.items())}}


def report(res: dict[str, Any]) -> None:
    base, after = res["evals"]["0"], res["evals"][str(res["sft_steps"])]
    print(f"\n| eval (plain rows, {res.get('env', 'finance_lookup')}) | untrained | after sft on "
          f"{res['demos']} demos |\n|---|---|---|")
    for key, pct in (("reward", False), ("pass_rate", True), ("valid_call_rate", True), ("calls_mean", False)):
        a, b = base[key], after[key]
        print(f"| {key} | {100 * a:.1f}% | {100 * b:.1f}% |" if pct else f"| {key} | {a:.3f} | {b:.3f} |")
    gain = 100 * (after["reward"] - base["reward"])
    print(f"\nteacher reward {res['teacher_reward']:.2f}; {res['demos']} demonstrations, {res['sft_steps']} sft "
          f"steps; eval reward {base['reward']:.2f} -> {after['reward']:.2f} ({gain:+.0f} points; goal +15); "
          f"{res['wall_s'] / 60:.1f} min")
    if res.get("rl"):
        curve = " -> ".join(f"{v:.2f} (step {k})" for k, v in res["rl"]["reward_by_eval"].items())
        last = list(res["rl"]["reward_by_eval"].values())[-1]
        print(f"then RL from the warm start: {curve}; {100 * (last - base['reward']):+.0f} points over the "
              f"untrained plain-rows baseline (goal +30), {res['rl']['wall_s'] / 60:.1f} min")
    print(f"command: {res['command']}")


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="finance_lookup", choices=sorted(EXPERTS))
    p.add_argument("--demos", type=int, default=10)
    p.add_argument("--teacher-tasks", type=int, default=16)
    p.add_argument("--eval-tasks", type=int, default=16)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=5)
    p.add_argument("--learning-rate", type=float, default=5e-4)
    p.add_argument("--min-reward", type=float, default=0.99, help="a success: the grader's full marks")
    p.add_argument("--rl-steps", type=int, default=0, help="then RL from the warm start for N steps")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    if args.report_only:
        res = json.loads((OUT / f"few_demos_{args.env}" / "result.json").read_text())
    else:
        env_dir = ROOT / "examples" / args.env
        rows = {}
        for line in (env_dir / "train_plain.jsonl").read_text().splitlines():
            row = json.loads(line)
            rows[next(m["content"] for m in row["messages"] if m["role"] == "user")] = row
        server = serve(teacher_app(rows, args.env))
        try:
            with EXAMPLES.services(env_dir):
                res = asyncio.run(run(args))
        finally:
            server.should_exit = True
        record(f"few_demos_{args.env}", res)
    report(res)


if __name__ == "__main__":
    main()
