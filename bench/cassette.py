"""A replayed eval gives the recorded rewards bit for bit, with the tool server stopped, and is faster (goal >= 5x).

Tool cassettes (``rollout.tool_cassette``, docs/replay.md) on examples/parallel_lookup, whose
``lookup`` endpoint sleeps 0.3 s a call, in one command:

1. ``live``: ``arft eval`` of the validation tasks with the tool server up, recording every call
   (``tool_cassette: record``);
2. the server is stopped (checked: nothing answers on its port any more);
3. ``replay``: the same eval answered from the cassette (``tool_cassette: replay``, ``latency:
   zero``), on a fresh engine of the same model and the same sampling seed (``sampling.seed``:
   without it no two evals sample alike, replayed or not).

The grader (``fact_recall`` on the answer) reads nothing from the server, so replaying the
calls is all a replay needs; the server's per-rollout state (``still_missing``) is in the
recorded outputs. Each arm's engine is built before its clock starts (model loading is not the
comparison) and neither sees the other's prefix cache.

Printed and recorded: per arm the wall time of the eval, the time rollouts spent in tools (summed
over rollouts, and the tool phase's wall share), the mean reward; whether every rollout's reward
and sampled tokens are identical; the speed-up of the whole eval and of the tool time. On a CPU the
135M model's generation dominates the eval, so the whole-eval speed-up is far from the tools'
(printed both, honestly); with a fast engine the tool waits are the eval.

    python -m bench run cassette [--tasks 16] [--samples 2] [--engines model,scripted]
        [--train-steps 0] [--train-eval-tasks 8] [--schedule continuous|lockstep]

``--engines scripted`` adds an arm with no model (each turn looks up the next office at once):
the eval is then the tool's sleeps and arft's own overhead, the ceiling a fast engine leaves.
``--train-steps N`` also trains the calculator demo (examples/calculator, python tool) N steps
recorded, then N steps replayed, with an evaluation after every step (seeded, synchronous
rollouts), and compares the two eval curves and the final adapters exactly.

``--schedule`` is ``rollout.schedule`` for every arm. ``continuous`` (default): a turn joins the
engine's batch when its tools answer, so the batches of a replay (tools answer at once) differ
from the live run's, and a near-tied token can flip (the train arms then turn KV reuse off, as
docs/training.md asks for exact resumes). ``lockstep``: the turns of all rollouts in flight start
together (``arft.rollout.lockstep``), so the engine's passes are the same live and replayed (KV
reuse stays on).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

from arft.pyfile import load_file
from bench.lib.harness import OUT, ROOT, log, record, table

QUICK = ["--tasks", "4", "--samples", "2"]
GOAL = 5.0
SEED = 42
EXAMPLE = ROOT / "examples" / "parallel_lookup"


def job_with(cassette: dict[str, Any], schedule: str = "continuous") -> Any:
    from arft.config import load_job

    # Seeded sampling (the job leaves sampling.seed unset): an unseeded eval differs from itself.
    return load_job(EXAMPLE / "job.yaml", [f"sampling.seed={SEED}", f"rollout.tool_cassette={json.dumps(cassette)}",
                                           f"rollout.schedule={schedule}"])


async def arm(job: Any, tasks: list[Any], samples: int, out: Path, engine_kind: str) -> dict[str, Any]:
    """One eval of ``tasks`` on a fresh engine; the clock covers the eval, not the model load."""
    from arft.app.evaluate import evaluate
    from arft.engines.factory import build_engine

    if out.exists():
        shutil.rmtree(out)
    engine = scripted_engine() if engine_kind == "scripted" else build_engine(job, role="eval", run_dir=out)
    try:
        t0 = time.perf_counter()
        result = await evaluate(job, tasks, samples, out, engine=engine)
        wall = time.perf_counter() - t0
    finally:
        await engine.aclose()
    rollouts = {(r.task_id, r.sample_index): r for r in result.rollouts}
    return {"wall_s": wall, "tools_s": sum(r.timings.tools_s for r in result.rollouts),
            "calls": sum(len(r.tool_calls) for r in result.rollouts),
            "reward": result.summary.reward.mean, "cassette": vars(result.cassette) if result.cassette else None,
            "rollouts": rollouts}


def scripted_engine() -> Any:
    """No model: each turn looks up the next office the question names (one call a turn, the
    slow sequential path), then answers with every code; replies come at once, so the eval's
    time is the tool's sleeps and arft's own overhead (the ceiling a fast engine leaves)."""
    import re

    from arft.engines.scripted import ScriptedEngine
    from arft.models.loading import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct")

    offices = load_file(EXAMPLE / "server.py", "parallel_lookup_server").CITIES

    def reply(ids: Sequence[int]) -> str:
        text = str(tokenizer.decode(list(ids)))
        prefilled = '<tool_call>\n{"name": "'  # tool_choice: required opens the first turn's call
        call = write_call(text)
        return call[len(prefilled):] if text.endswith(prefilled) and call.startswith(prefilled) else call

    def write_call(text: str) -> str:
        turns = text.split("<|im_start|>user\n")
        start = max(i for i, t in enumerate(turns) if not t.startswith("<tool_response>"))
        question = turns[start].split("<|im_end|>")[0]
        cities = sorted((c for c in offices if c in question), key=question.index)
        answers = [json.loads(a) for a in re.findall(r"<tool_response>\n(.+?)\n</tool_response>",
                                                     "".join(turns[start + 1:]))]
        if len(answers) < len(cities):
            call = {"name": "lookup", "arguments": {"city": cities[len(answers)]}}
            return f"<tool_call>\n{json.dumps(call)}\n</tool_call><|im_end|>"
        return "\n".join(f"{a.get('city')}: {a.get('door_code')}" for a in answers) + "<|im_end|>"

    return ScriptedEngine(tokenizer, reply)


def compare(live: dict[str, Any], replay: dict[str, Any]) -> dict[str, Any]:
    a, b = live["rollouts"], replay["rollouts"]
    same_reward = sum(a[k].score is not None and b[k].score is not None and a[k].score.score == b[k].score.score
                      for k in a if k in b)
    same_tokens = sum(a[k].token_ids == b[k].token_ids for k in a if k in b)
    same_logprobs = sum(a[k].logprobs == b[k].logprobs for k in a if k in b)
    return {"rollouts": len(a), "same_reward": same_reward, "same_tokens": same_tokens,
            "same_logprobs": same_logprobs,
            "identical": same_reward == len(a) == len(b) and same_tokens == same_logprobs == len(a),
            "speedup": live["wall_s"] / replay["wall_s"],
            "tools_speedup": live["tools_s"] / max(replay["tools_s"], 1e-9)}


def measure(engine_kind: str, tasks: list[Any], samples: int, schedule: str) -> dict[str, Any]:
    """Record live with the server up, stop it, replay: one engine kind's figures."""
    services = load_file(EXAMPLE / "services.py", "parallel_lookup_services")
    out = OUT / "cassette" / engine_kind
    tape = out / "tape"
    shutil.rmtree(tape, ignore_errors=True)
    with services.serve() as url:
        log(f"{engine_kind}: live, {len(tasks)} tasks x {samples} samples, tool server at {url}, recording")
        live = asyncio.run(arm(job_with({"mode": "record", "path": str(tape)}, schedule), tasks, samples,
                               out / "live", engine_kind))
    stopped = not services.running(url)
    log(f"{engine_kind}: tool server stopped: {stopped}; replay from {tape}")
    replay = asyncio.run(arm(job_with({"mode": "replay", "path": str(tape)}, schedule), tasks, samples,
                             out / "replay", engine_kind))
    return {"server_stopped": stopped, **compare(live, replay),
            "arms": {name: {k: v for k, v in a.items() if k != "rollouts"} for name, a in
                     (("live", live), ("replay", replay))}}


def train_job(cassette: dict[str, Any], steps: int, eval_tasks: int, schedule: str) -> Any:
    """The calculator demo, ``steps`` steps with an evaluation after each and synchronous
    rollouts; continuous batching also turns KV reuse off (what docs/training.md names for
    bit-identical resumes), lockstep keeps it."""
    from arft.config import load_job

    kv = ["engine.prefix_cache_mb=0"] if schedule == "continuous" else []
    return load_job(ROOT / "examples" / "calculator" / "job.yaml", [
        f"training.max_steps={steps}", f"training.eval_tasks={eval_tasks}", "training.max_off_policy_steps=0",
        "method.reinforcement.hyperparameters.eval_interval=1", *kv, f"rollout.schedule={schedule}",
        f"rollout.tool_cassette={json.dumps(cassette)}"])


def same_adapter(a: Path, b: Path) -> bool:
    """Whether two runs' latest checkpoints hold the same trainable weights, bit for bit."""
    from safetensors.torch import load_file as load_tensors

    from arft.tracing.run_dir import RunDir

    def latest(run: Path) -> dict[str, Any]:
        checkpoint = RunDir.of(run).latest_checkpoint()
        assert checkpoint is not None, f"{run} has no checkpoint"
        return load_tensors(str(checkpoint / "trainable.safetensors"))

    x, y = latest(a), latest(b)
    return x.keys() == y.keys() and all(x[k].equal(y[k]) for k in x)


def train_measure(steps: int, eval_tasks: int, schedule: str) -> dict[str, Any]:
    """``arft train`` of the demo recorded, then replayed: the eval curves side by side."""
    from arft.app.train import train

    out = OUT / "cassette" / "train"
    shutil.rmtree(out, ignore_errors=True)
    curves: dict[str, dict[int, float]] = {}
    walls: dict[str, float] = {}
    tape = out / "live" / "cassette.jsonl"
    for name, cassette in (("live", {"mode": "record"}), ("replay", {"mode": "replay", "path": str(tape)})):
        log(f"train {name}: {steps} steps of examples/calculator")
        t0 = time.perf_counter()
        result = asyncio.run(train(train_job(cassette, steps, eval_tasks, schedule), out / name))
        walls[name] = time.perf_counter() - t0
        curves[name] = {step: s.reward.mean for step, s in sorted(result.evals.items())}
        last = result.history[-1] if result.history else {}
        log(f"  eval curve {curves[name]}, cassette {({k: v for k, v in last.items() if k.startswith('cassette/')})}")
    return {"steps": steps, "eval_tasks": eval_tasks, "curves": curves, "wall_s": walls,
            "identical": curves["live"] == curves["replay"],
            "same_adapter": same_adapter(out / "live", out / "replay")}


def main(argv: Sequence[str] | None = None) -> None:
    from arft.data.splits import load_split

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=16, help="the first N validation tasks")
    p.add_argument("--samples", type=int, default=2, help="rollouts per task")
    p.add_argument("--engines", default="model,scripted", help="model (the embedded SmolLM2-135M) and/or "
                   "scripted (no model: the tool time alone)")
    p.add_argument("--train-steps", type=int, default=0, help="also train the calculator demo this many "
                   "steps recorded, then replayed, and compare the eval curves (0: skip)")
    p.add_argument("--train-eval-tasks", type=int, default=8)
    p.add_argument("--schedule", choices=["continuous", "lockstep"], default="continuous",
                   help="rollout.schedule of every arm (lockstep: bit-identical replays)")
    args = p.parse_args(argv)
    tasks = load_split(job_with({"mode": "off"}), "validation", args.tasks)
    res: dict[str, Any] = {"tasks": len(tasks), "samples": args.samples, "schedule": args.schedule,
                           "engines": {kind: measure(kind, tasks, args.samples, args.schedule)
                                       for kind in args.engines.split(",")}}
    if args.train_steps:
        res["train"] = train_measure(args.train_steps, args.train_eval_tasks, args.schedule)
    res["verdict"] = verdict(res)
    record("cassette" if args.schedule == "continuous" else f"cassette_{args.schedule}", res)
    rows = [[kind, name, f"{a['wall_s']:.2f}", f"{a['tools_s']:.2f}", a["calls"], f"{a['reward']:.4f}",
             a["cassette"]["misses"] if a["cassette"] else ""]
            for kind, e in res["engines"].items() for name, a in e["arms"].items()]
    print()
    print(table(["engine", "arm", "eval wall s", "tool time s (sum)", "calls", "reward", "misses"], rows))
    print()
    print(res["verdict"])


def verdict(res: dict[str, Any]) -> str:
    parts = []
    for kind, e in res["engines"].items():
        goal = "met" if e["speedup"] >= GOAL else "not met"
        parts.append(f"{kind} eval: rewards identical in {e['same_reward']}/{e['rollouts']} rollouts (tokens in "
                     f"{e['same_tokens']}, logprobs in {e.get('same_logprobs', '?')}), "
                     f"server stopped: {e['server_stopped']}, eval {e['speedup']:.2f}x faster "
                     f"(goal {GOAL:g}x: {goal}), tool time {e['tools_speedup']:.0f}x less")
    if "train" in res:
        t = res["train"]
        parts.append(f"train ({t['steps']} steps): eval curves {'identical' if t['identical'] else 'differ'}, "
                     f"final adapters {'bit-identical' if t.get('same_adapter') else 'differ'} "
                     f"(live {t['curves']['live']}, replay {t['curves']['replay']})")
    return f"schedule {res.get('schedule', 'continuous')}: " + "; ".join(parts)


if __name__ == "__main__":
    main()
