"""arft's TransformersEngine serving concurrent rollouts generates more tokens per second than HF ``generate``.

Generation throughput: Hugging Face ``model.generate`` vs arft's ``TransformersEngine``.

Both sample the same 32 chat prompts (a system prompt describing tools + different user
questions, ~150-200 tokens each) from the real embedded model, at temperature 1 with no top-p /
top-k truncation, up to ``--new-tokens`` new tokens. Only real generated tokens are counted: for
HF, each row's tokens up to and including its first eos (the padding HF keeps producing for
finished rows is not counted); for the engine, the returned ``token_ids``. Time includes prefill.

    python -m bench run engine_throughput --batch 32 --new-tokens 128 --repeats 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any, Sequence

from bench.lib.harness import record
from bench.lib.workloads import build_prompts, run_engine, run_hf

QUICK = ["--batch", "4", "--new-tokens", "16", "--repeats", "1"]


async def compare(model: Any, tokenizer: Any, prompts: list[list[int]], new_tokens: int,
                  repeats: int) -> dict[str, float]:
    """Alternate HF and engine runs (HF blocks the event loop, which is idle meanwhile)."""
    from arft.engines.transformers.engine import TransformersEngine

    engine = TransformersEngine(model, tokenizer, max_batch_size=len(prompts))
    run_hf(model, tokenizer, prompts[:2], 4)  # warm-up: first calls allocate and pick kernels
    await run_engine(engine, prompts[:2], 4)
    rates: dict[str, list[float]] = {"hf": [], "engine": []}
    for rep in range(repeats):
        for name in ("hf", "engine"):
            if name == "hf":
                tokens, seconds = run_hf(model, tokenizer, prompts, new_tokens)
            else:
                tokens, seconds = await run_engine(engine, prompts, new_tokens)
            rates[name].append(tokens / seconds)
            print(f"  run {rep + 1} {name:>6}: {tokens:5d} tokens in {seconds:6.1f} s = "
                  f"{tokens / seconds:6.1f} tok/s", flush=True)
    await engine.aclose()
    hf, eng = statistics.median(rates["hf"]), statistics.median(rates["engine"])
    print(f"median HF generate: {hf:.1f} tok/s | TransformersEngine: {eng:.1f} tok/s | "
          f"ratio engine/HF: {eng / hf:.2f}")
    print(f"engine stats: {engine.stats}")
    return {"hf_tok_s": hf, "engine_tok_s": eng, "ratio": eng / hf}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32, help="concurrent prompts (default 32)")
    parser.add_argument("--new-tokens", type=int, default=128, help="max new tokens per prompt")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = parser.parse_args(argv)

    import torch

    from arft.models.loading import load_model

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model("smollm2-135m-instruct", dtype=args.dtype, device="cpu")
    prompts = build_prompts(tokenizer, args.batch)
    lengths = [len(p) for p in prompts]
    print(f"model smollm2-135m-instruct {args.dtype}, {args.threads} threads, batch {args.batch}, "
          f"prompt tokens {min(lengths)}-{max(lengths)} (mean {statistics.mean(lengths):.0f}), "
          f"max new tokens {args.new_tokens}")
    result = asyncio.run(compare(model, tokenizer, prompts, args.new_tokens, args.repeats))
    record("engine_throughput", {**result, "batch": args.batch, "new_tokens": args.new_tokens,
                                 "dtype": args.dtype, "repeats": args.repeats})


if __name__ == "__main__":
    main()
