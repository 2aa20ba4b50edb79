"""Ray rollout workers scale rollouts/s near-linearly (>= 0.8 of linear at 4 workers) at little cost.

Ray scale-out: rollouts/s with 1, 2 and 4 rollout workers on a local two-node Ray cluster,
against the same rollouts in one process, in one command.

Each rollout is I/O-bound, as agent rollouts are: a stub engine (no model) writes a tool call,
the call goes to an HTTP endpoint tool that sleeps 200 ms (`--latency`), three sequential tool
rounds, then an answer, then grading. Every worker runs `--concurrency` rollouts at once (its
own sandbox capacity), so W workers run W times as many. The cluster (`ray start --head` plus a
second `ray start --address`, each with logical CPUs to spare) is started and stopped here.

Printed: rollouts/s per arm, scaling against one worker (goal: >= 0.8x linear up to 4 workers)
and the one-worker Ray run's time against the in-process run's (goal: <= 1.15x).

    python -m bench run ray_scaling [--rollouts 96] [--concurrency 8] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from bench.lib.harness import ROOT, record

NEEDS = {"ray"}  # starts a two-node local Ray cluster
QUICK = ["--rollouts", "8", "--workers", "1,2"]


RAY = str(Path(sys.executable).parent / "ray")
PORT = 6393
ROUNDS = 3


def tool_server(latency: float) -> Any:
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/lookup")
    async def lookup(body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(latency)  # a slow backend, as a VM or an API would be
        key = json.loads(body["arguments"]).get("key", "?")
        return {"type": "function_call_output", "call_id": body["call_id"], "id": body["id"],
                "output": f"value of {key} is 42"}

    return app


def replies(tokenizer: Any) -> Any:
    """The stub's reply to a prompt: a tool call until ROUNDS results came back, then an answer."""

    def reply(ids: Sequence[int]) -> str:
        seen = tokenizer.decode(list(ids)).count("value of k")  # the tool results so far
        if seen < ROUNDS:
            return '<tool_call>\n{"name": "lookup", "arguments": {"key": "k%d"}}\n</tool_call>' % seen
        return "The value is 42.<|im_end|>"

    return reply


def write_job(tmp: Path, url: str, n: int, concurrency: int) -> Path:
    rows = [{"id": f"t{i}", "answer": "42", "messages": [{"role": "user", "content": f"Look up key {i}."}]}
            for i in range(n)]
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = {"model": "smollm2-135m-instruct", "training_file": "train.jsonl", "seed": 1,
           "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "string_check", "name": "answer", "input": "{{ sample.output_text }}",
                          "reference": "{{ item.answer }}", "operation": "like"},
               "tools": [{"type": "endpoint", "name": "lookup", "server_url": f"{url}/lookup",
                          "description": "Look a key up.", "timeout_s": 30,
                          "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                                         "required": ["key"]}}],
               "max_episode_steps": ROUNDS + 2}},
           "rollout": {"max_turns": ROUNDS + 2, "concurrency": concurrency, "constrained_tool_calls": False},
           "sampling": {"max_new_tokens": 64}}
    (tmp / "job.json").write_text(json.dumps(job))
    return tmp / "job.json"


async def in_process(job: Any, engine: Any, tasks: list[Any], tmp: Path) -> float:
    from arft.app.run import open_run
    from arft.tracing.run_dir import RunDir

    async with open_run(job, RunDir(tmp / "local"), engine=engine) as run:
        start = time.perf_counter()
        rollouts = await run.runner.run_many(tasks, 1, run_id="bench")
        wall = time.perf_counter() - start
    check(rollouts)
    return wall


async def on_ray(job: Any, engine: Any, tasks: list[Any], tmp: Path, workers: int, concurrency: int) -> float:
    from arft.app.cluster.driver import open_cluster_run
    from arft.config import ClusterSpec, RaySpec
    from arft.tracing.run_dir import RunDir

    spec = RaySpec(address=f"127.0.0.1:{PORT}", rollout_workers=workers, engine_replicas=1, worker_cpus=0.5,
                   engine_cpus=0.5, learner_cpus=0.5, worker_concurrency=concurrency)
    job = job.model_copy(update={"cluster": ClusterSpec(ray=spec)})
    async with open_cluster_run(job, RunDir(tmp / f"ray-{workers}"), 1, tokenizer=engine.tokenizer,
                                engine=engine) as run:
        await run.runner.run_many(tasks[:workers], 1, run_id="warm-up")  # every worker's tools open
        start = time.perf_counter()
        rollouts = await run.runner.run_many(tasks, 1, run_id="bench")
        wall = time.perf_counter() - start
    check(rollouts)
    return wall


def check(rollouts: list[Any]) -> None:
    bad = [r for r in rollouts if r.status != "ok" or len(r.tool_calls) != ROUNDS or r.reward != 1.0]
    if bad:
        b = bad[0]
        raise SystemExit(f"{len(bad)} rollouts did not make {ROUNDS} calls and answer: {b.status} {b.error} "
                         f"calls {[(c.status, c.output[:80]) for c in b.tool_calls]} reward {b.reward} {b.output_text!r}")


def ray_cli(*args: str, env: dict[str, str]) -> None:
    done = subprocess.run([RAY, *args], env=env, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise SystemExit(f"`ray {' '.join(args)}` failed: {done.stderr[-1500:]}")


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollouts", type=int, default=96)
    p.add_argument("--concurrency", type=int, default=8, help="rollouts one worker (or the process) runs at once")
    p.add_argument("--latency", type=float, default=0.2, help="seconds the endpoint tool sleeps per call")
    p.add_argument("--workers", default="1,2,4")
    args = p.parse_args(argv)
    from arft.config import load_job
    from arft.data.splits import load_split
    from arft.engines.scripted import ScriptedEngine
    from arft.models.loading import load_tokenizer
    from arft.serving import serve

    tokenizer = load_tokenizer("smollm2-135m-instruct")
    engine = ScriptedEngine(tokenizer, replies(tokenizer))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    common = ["--num-cpus=4", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    with tempfile.TemporaryDirectory() as tmp_name, serve(tool_server(args.latency), name="tool server") as url:
        tmp = Path(tmp_name)
        job = load_job(write_job(tmp, url, args.rollouts, args.concurrency))
        tasks = load_split(job, "train")
        base = asyncio.run(in_process(job, engine, tasks, tmp))
        print(f"in process: {base:.1f} s, {args.rollouts / base:.1f} rollouts/s", flush=True)
        ray_cli("start", "--head", f"--port={PORT}", "--include-dashboard=false", *common, env=env)
        try:
            ray_cli("start", f"--address=127.0.0.1:{PORT}", *common, env=env)
            walls = {}
            for w in [int(x) for x in args.workers.split(",")]:
                walls[w] = asyncio.run(on_ray(job, engine, tasks * w, tmp, w, args.concurrency))
                print(f"ray, {w} worker(s): {walls[w]:.1f} s for {args.rollouts * w} rollouts, "
                      f"{args.rollouts * w / walls[w]:.1f} rollouts/s", flush=True)
        finally:
            import ray

            ray.shutdown()
            subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=180)
    one = args.rollouts / walls[min(walls)]
    print("\n| arm | rollouts | wall | rollouts/s | vs 1 worker | of linear |\n|---|---|---|---|---|---|")
    print(f"| in process (concurrency {args.concurrency}) | {args.rollouts} | {base:.1f} s | "
          f"{args.rollouts / base:.1f} | | |")
    for w, wall in walls.items():
        rate = args.rollouts * w / wall
        print(f"| Ray, {w} worker(s) x {args.concurrency} | {args.rollouts * w} | {wall:.1f} s | {rate:.1f} | "
              f"{rate / one:.2f}x | {rate / one / w:.2f} |")
    worst = min(args.rollouts * w / wall / one / w for w, wall in walls.items())
    print(f"\nscaling: {worst:.2f} of linear at worst (goal >= 0.8); one Ray worker / in process: "
          f"{walls[min(walls)] / base:.2f}x the time (goal <= 1.15x)")
    print("command: python -m bench " + " ".join(sys.argv[1:]))
    record("ray_scaling", {"in_process_s": base, "ray_wall_s": walls, "worst_of_linear": worst,
                           "one_worker_vs_in_process": walls[min(walls)] / base, "rollouts": args.rollouts,
                           "concurrency": args.concurrency, "latency_s": args.latency})


if __name__ == "__main__":
    main()
