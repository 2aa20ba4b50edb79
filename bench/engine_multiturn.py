"""KV reuse makes arft's engine generate multi-turn rollouts several times faster than HF generate (goal 3x).

Multi-turn generation: HF ``generate`` re-prefilling every turn vs arft's engine without and
with KV reuse, in one command on one loaded model.

The workload is what a training step sends: 32 rollouts (8 tasks x 4 samples, a shared system
prompt with the tools and a worked example) of three assistant turns each, a tool result of
~60-90 tokens appended after each of the first two turns. Every system samples its own
completions (temperature 1, no truncation, up to ``--new-tokens`` a turn, ending at eos):

- ``hf``: per turn, one batched ``model.generate`` over all 32 conversations, each re-prefilled
  whole (left-padded); HF's best case, turn-synchronous.
- ``engine``: ``TransformersEngine(prefix_cache_mb=0)``, today's engine: 32 concurrent rollouts,
  each sending its whole conversation every turn (continuous batching, no KV reuse).
- ``engine+kv``: the same with the prefix store on: a turn prefills only its new tokens, the 4
  samples of a task run their prompt once, the shared system prompt runs once, and decode steps
  read the shared system prompt's keys and values once for all rows (cascade attention).
- ``kv-no-cascade``: ``engine+kv`` with cascade attention off (every row reads its own copy),
  to measure what cascade attention adds.
- ``kv-unpacked``: ``engine+kv`` with its linear layers on ``F.linear`` instead of oneDNN's
  prepacked weights (``arft.cpu.packed_linear``), to measure what packing adds.
- ``kv-hf-forward``: ``engine+kv`` with decode steps and prefills run by Hugging Face's forward
  instead of the fused pass (``arft.engines.transformers.fused_pass``), to measure what fusing adds.
- ``kv-no-kernels``: ``engine+kv`` without arft's CPU kernels (``arft.cpu.kernels``,
  AVX-512 CPUs: decode steps' attention over the rows' own columns, RMSNorm after its residual
  add, the rotary embedding in place), i.e. on PyTorch's flash kernel and operations, to measure
  what the kernels add.
- ``kv-no-mix``: ``engine+kv`` with every decode step in a pass of its own, where ``engine+kv``
  runs the running rows' step in the pass that prefills the rows joining them
  (``ModelPass.step_and_prefill``), to measure what sharing the pass adds.
- ``kv-adapter`` (with ``--lora``): ``engine+kv`` sampling through the adapter (peft's layers,
  ``engine.lora: adapter``) instead of a merged copy, what ``engine.lora: auto`` picks for
  bfloat16 weights; ``kv-adapter-hf`` the same with Hugging Face's forward (peft's layers) instead
  of the fused pass with the adapters' products packed (``arft.cpu.lora_products``).
- ``kv-two-pools``: ``engine+kv`` without releasing OpenMP thread pools (``arft.cpu.threads``):
  the main thread's pool (from loading the model and the ``hf`` arm) stays alive beside the
  engine worker's, to measure what keeping one pool alive adds.

Counted: generated tokens (up to and including eos) per wall-clock second over the whole
workload, prefill included. The systems run one after another in every repeat, alternating.

    python -m bench run engine_multiturn --repeats 2

``--lora``: every system samples from a LoRA policy, as during RL training (the demo job's
adapter settings, the adapter moved off zero): ``hf`` runs ``generate`` on the peft model (what
TRL's GRPOTrainer does without vLLM), the engine arms sample from their own merged copy
(``engine.lora: auto``, what ``arft train`` does on a float32 CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
from typing import Any, AsyncIterator, Sequence

from bench.lib.harness import record
from bench.lib.workloads import (DEMO_JOB, TURNS, Workload, lora_policy, run_engine, run_hf,
                                 run_hf_turns, run_rollouts)

QUICK = ["--tasks", "2", "--samples", "2", "--new-tokens", "8", "--repeats", "1",
         "--systems", "hf", "engine", "engine+kv"]
SYSTEMS = ("hf", "engine", "engine+kv", "kv-no-cascade", "kv-unpacked", "kv-hf-forward", "kv-no-kernels",
           "kv-no-mix", "kv-two-pools", "kv-adapter", "kv-adapter-hf")


@contextlib.asynccontextmanager
async def pools_kept(keep: bool, engine: Any) -> AsyncIterator[None]:
    """While on (``keep``), ``arft.cpu.threads`` releases no OpenMP pool: every thread that ran torch
    keeps its own, as before that module (the main thread's, as loading the model leaves it, too).
    After, ``engine``'s thread releases the pool it kept, so that the other arms run as they would."""
    import torch

    from arft.cpu import threads as cpu_threads

    release = cpu_threads.release_pool
    if keep:
        cpu_threads.release_pool = lambda: False  # type: ignore[assignment]
        torch.ones(1 << 20).add_(1)  # a parallel operator: this thread's pool
    try:
        yield
    finally:
        cpu_threads.release_pool = release  # type: ignore[assignment]
        if keep:
            await engine._thread.run(lambda: None)  # releases the main thread's pool, then its own


async def compare(model: Any, work: Workload, new_tokens: int, repeats: int,
                  systems: list[str], lora: bool = False) -> dict[str, float]:
    """Median tok/s of each of ``systems`` over ``repeats`` alternating runs (``lora``: ``model``
    is a peft policy, which the engine arms sample from merged)."""
    from arft.engines.transformers.snapshot import SnapshotEngine
    from arft.engines.transformers.engine import TransformersEngine

    options = {"engine": {"prefix_cache_mb": 0}, "engine+kv": {},
               "kv-no-cascade": {"cascade_attention": False}, "kv-unpacked": {"packed_linears": False},
               "kv-hf-forward": {"fused_pass": False}, "kv-no-kernels": {"cpu_kernels": False},
               "kv-no-mix": {}, "kv-two-pools": {}, "kv-adapter": {},
               "kv-adapter-hf": {"fused_pass": False}}
    # one model for every arm (same weights); the engines built first switch its attention and linear
    # layers, which other callers (HF generate, an arm with a switch off) run as sdpa and F.linear
    build = (lambda merge=True, **kw: SnapshotEngine.of(model, work.tokenizer, merge_lora=merge, **kw)) if lora else (
        lambda merge=True, **kw: TransformersEngine(model, work.tokenizer, **kw))
    if any(name.startswith("kv-adapter") for name in systems) and not lora:
        raise SystemExit("kv-adapter and kv-adapter-hf sample through a LoRA adapter: run them with --lora")
    engines = {name: build(max_batch_size=32, merge=not name.startswith("kv-adapter"), **kw)
               for name, kw in options.items() if name in systems}
    if "kv-no-mix" in engines:
        engines["kv-no-mix"]._pass.mix = False
    if "hf" in systems:
        run_hf(model, work.tokenizer, work.starts[:2], 4)  # warm-up: kernels, allocations
    for engine in engines.values():
        await run_engine(engine, work.starts[:2], 4)
    rates: dict[str, list[float]] = {name: [] for name in SYSTEMS if name in systems}
    for rep in range(repeats):
        for name in rates:
            if name == "hf":
                tokens, seconds = run_hf_turns(model, work, new_tokens)
            else:
                engines[name].prefix_cache.clear()  # every repeat starts cold
                async with pools_kept(name == "kv-two-pools", engines[name]):
                    tokens, seconds = await run_rollouts(engines[name], work, new_tokens, rep)
            rates[name].append(tokens / seconds)
            print(f"  run {rep + 1} {name:>13}: {tokens:5d} tokens in {seconds:6.1f} s = "
                  f"{tokens / seconds:6.1f} tok/s", flush=True)
    for name, engine in engines.items():
        s = engine.stats
        print(f"  {name:>13}: prompt tokens {s.prompt_tokens}, run by prefill {s.prefill_tokens} "
              f"({s.prefill_tokens / max(s.prompt_tokens, 1):.0%}); decode steps {s.decode_steps}, "
              f"{s.cascade_steps} with the shared prefix read once; store {engine.prefix_cache.stats}")
        await engine.aclose()
    return {name: statistics.median(r) for name, r in rates.items()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=8, help="distinct tasks (default 8)")
    parser.add_argument("--samples", type=int, default=4, help="samples per task (default 4)")
    parser.add_argument("--new-tokens", type=int, default=64, help="max new tokens a turn (default 64)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each system (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        help="which systems to run (default all; the ratios need hf, engine and engine+kv)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"],
                        help="default auto: what arft's engine picks here (bf16 only where this CPU runs it "
                             "natively, else float32)")
    parser.add_argument("--lora", action="store_true",
                        help="sample from the demo job's LoRA policy, as RL training does (see above)")
    args = parser.parse_args(argv)

    import torch

    from arft.models.loading import load_model

    torch.set_num_threads(args.threads)
    if args.lora:
        model, tokenizer = lora_policy(DEMO_JOB, args.dtype)
    else:
        model, tokenizer = load_model("smollm2-135m-instruct", dtype=args.dtype, device="cpu")
    work = Workload(tokenizer, args.tasks, args.samples)
    print(f"model smollm2-135m-instruct {str(model.dtype).removeprefix('torch.')}{' + LoRA' if args.lora else ''}, "
          f"{args.threads} threads, {len(work.starts)} "
          f"rollouts x {TURNS} turns, first prompt {len(work.starts[0])} tokens, tool results "
          f"{len(work.after(0, 0, []))}-{len(work.after(0, TURNS - 2, []))} tokens, up to "
          f"{args.new_tokens} new tokens a turn", flush=True)
    med = asyncio.run(compare(model, work, args.new_tokens, args.repeats, args.systems, args.lora))
    print("median tok/s: " + " | ".join(f"{name} {rate:.1f}" for name, rate in med.items()))
    ratios = [("engine+kv", "hf", " (goal >= 3)"), ("engine+kv", "engine", " (goal >= 1.5)"),
              ("engine", "hf", ""), ("engine+kv", "kv-no-cascade", ": cascade attention"),
              ("engine+kv", "kv-unpacked", ": packed linears"), ("engine+kv", "kv-hf-forward", ": fused decode"),
              ("engine+kv", "kv-no-kernels", ": arft's kernels"),
              ("engine+kv", "kv-no-mix", ": step in the prefill's pass"),
              ("engine+kv", "kv-two-pools", ": one OpenMP pool")]
    print("ratios: " + " | ".join(f"{a} / {b}: {med[a] / med[b]:.2f}x{note}"
                                  for a, b, note in ratios if a in med and b in med))
    record("engine_multiturn", {"tok_s": med, "ratios": {f"{a} / {b}": med[a] / med[b] for a, b, _ in ratios
                                                          if a in med and b in med},
                                "lora": args.lora, "dtype": str(model.dtype).removeprefix("torch."),
                                "rollouts": len(work.starts), "new_tokens": args.new_tokens,
                                "repeats": args.repeats})


if __name__ == "__main__":
    main()
