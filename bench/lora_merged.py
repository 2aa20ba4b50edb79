"""Sampling from a LoRA policy through a merged copy is faster than through peft's adapter layers.

Sampling from a LoRA policy: peft's adapter layers vs the same weights merged (``engine.lora``).

RL with LoRA samples from the policy being trained. Through peft every adapted linear layer runs
three matrix products (the base and the two small adapter matrices) plus dropout, scaling and a
sum; a merged copy (``SnapshotEngine.of(policy, merge_lora=True)``) runs one, and is merged again
after every update (``sync``). Both arms here sample the same chat prompts (the engine
throughput benchmark's) from the embedded model wrapped with the demo job's LoRA settings, whose
adapter has been moved off zero so the two really compute base + delta; they alternate in one
command, at each batch size, on one engine each.

    python -m bench run lora_merged --batches 1 16 32 --new-tokens 64 --repeats 2

Prints tokens per second of each arm, the ratio merged/adapter per batch size, the seconds one
``sync`` (merge) takes, and whether greedy decoding gives the same tokens in both arms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path
from typing import Any, Sequence

from bench.lib.harness import record
from bench.lib.workloads import DEMO_JOB, build_prompts, lora_policy, run_engine

QUICK = ["--batches", "2", "--new-tokens", "8", "--repeats", "1"]

async def greedy_tokens(engine: Any, prompts: list[list[int]]) -> list[tuple[int, ...]]:
    from arft.engines.base import SamplingParams

    params = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=24)
    return [g.token_ids for g in await asyncio.gather(*(engine.generate(p, params) for p in prompts))]


async def compare(policy: Any, tokenizer: Any, batches: list[int], new_tokens: int,
                  repeats: int) -> dict[str, Any]:
    from arft.engines.transformers.snapshot import SnapshotEngine
    from arft.engines.transformers.engine import TransformersEngine

    prompts = build_prompts(tokenizer, max(batches))
    arms = {"adapter": TransformersEngine(policy, tokenizer, max_batch_size=max(batches)),
            "merged": SnapshotEngine.of(policy, tokenizer, merge_lora=True, max_batch_size=max(batches))}
    syncs = [await arms["merged"].sync(policy, 1) for _ in range(3)]  # type: ignore[attr-defined]
    same = await greedy_tokens(arms["adapter"], prompts[:8]) == await greedy_tokens(arms["merged"], prompts[:8])
    for engine in arms.values():  # warm-up: first calls pack weights and pick kernels
        await run_engine(engine, prompts[:2], 4)
    result: dict[str, Any] = {"batches": {}}
    for batch in batches:
        rates: dict[str, list[float]] = {name: [] for name in arms}
        for rep in range(repeats):
            for name, engine in arms.items():
                tokens, seconds = await run_engine(engine, prompts[:batch], new_tokens)
                rates[name].append(tokens / seconds)
                print(f"  batch {batch:3d} run {rep + 1} {name:>8}: {tokens:5d} tokens in {seconds:6.1f} s = "
                      f"{tokens / seconds:6.1f} tok/s", flush=True)
        a, m = statistics.median(rates["adapter"]), statistics.median(rates["merged"])
        print(f"batch {batch:3d}: adapter {a:6.1f} tok/s | merged {m:6.1f} tok/s | ratio merged/adapter {m / a:.2f}")
        result["batches"][batch] = {"adapter_tok_s": a, "merged_tok_s": m, "ratio": m / a}
    print(f"merge (sync) after an update: {statistics.median(syncs):.2f} s (median of {len(syncs)})")
    print(f"greedy tokens identical in both arms (8 prompts x 24 tokens): {same}")
    for engine in arms.values():
        await engine.aclose()
    return {**result, "sync_s": statistics.median(syncs), "greedy_tokens_identical": same}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 32], help="concurrent prompts")
    parser.add_argument("--new-tokens", type=int, default=64, help="max new tokens per prompt")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each arm (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--job", type=Path, default=DEMO_JOB,
                        help="whose LoRA settings to use (default: the demo's)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    policy, tokenizer = lora_policy(args.job)
    print(f"model smollm2-135m-instruct float32 with LoRA r={policy.peft_config['default'].r}, "
          f"{args.threads} threads, max new tokens {args.new_tokens}")
    result = asyncio.run(compare(policy, tokenizer, sorted(args.batches), args.new_tokens, args.repeats))
    record("lora_merged", {**result, "new_tokens": args.new_tokens, "repeats": args.repeats})


if __name__ == "__main__":
    main()
