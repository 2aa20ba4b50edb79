"""Generation throughput: Hugging Face ``model.generate`` vs arft's ``TransformersEngine``.

Both sample the same 32 chat prompts (a system prompt describing tools + different user
questions, ~150-200 tokens each) from the real embedded model, at temperature 1 with no top-p /
top-k truncation, up to ``--new-tokens`` new tokens. Only real generated tokens are counted: for
HF, each row's tokens up to and including its first eos (the padding HF keeps producing for
finished rows is not counted); for the engine, the returned ``token_ids``. Time includes prefill.

    python bench/engine_throughput.py --batch 32 --new-tokens 128 --repeats 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

SYSTEM = (
    "You are a helpful assistant with access to tools. To call a tool, answer with "
    '<tool_call>{"name": <tool>, "arguments": {...}}</tool_call> and nothing else.\n'
    "Tools:\n"
    "- search_docs(query: str): search the product documentation.\n"
    "- get_order(order_id: str): the status, items and shipping address of an order.\n"
    "- refund(order_id: str, amount: float, reason: str): issues a refund; only for delivered orders.\n"
    "- weather(city: str, day: str): the forecast for a city, day is today, tomorrow or a date.\n"
    "Keep answers short."
)
QUESTIONS = [
    "Where is my order A-1042? It was supposed to arrive on Monday.",
    "How do I reset my password if I no longer have access to my email?",
    "Will it rain in Lisbon tomorrow? I am planning a bike trip.",
    "Please refund order B-77 — the mug arrived broken.",
    "What does error code E42 mean on the X200 printer?",
    "Can I change the shipping address of order C-310 after it shipped?",
    "Is it going to be warmer in Oslo or in Helsinki this weekend?",
    "Summarise the warranty terms for refurbished laptops.",
]


def build_prompts(tokenizer: Any, n: int) -> list[list[int]]:
    """``n`` chat prompts (system + one user question, numbered so no two are identical)."""
    prompts = []
    for i in range(n):
        user = f"Ticket #{1000 + i}: {QUESTIONS[i % len(QUESTIONS)]}"
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    return prompts


def run_hf(model: Any, tokenizer: Any, prompts: list[list[int]], new_tokens: int) -> tuple[int, float]:
    """``(generated tokens, seconds)`` for one batched ``model.generate`` call."""
    import torch

    batch = tokenizer.pad({"input_ids": prompts}, padding=True, return_tensors="pt")  # left padding
    eos = tokenizer.eos_token_id
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                             max_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id)
    seconds = time.perf_counter() - start
    generated = 0
    for row in out[:, batch["input_ids"].shape[1]:].tolist():
        generated += row.index(eos) + 1 if eos in row else len(row)
    return generated, seconds


async def run_engine(engine: Any, prompts: list[list[int]], new_tokens: int) -> tuple[int, float]:
    """``(generated tokens, seconds)`` for concurrent ``generate`` calls on one engine."""
    from arft.engines.base import SamplingParams

    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new_tokens)
    start = time.perf_counter()
    gens = await asyncio.gather(*(engine.generate(p, params) for p in prompts))
    return sum(len(g.token_ids) for g in gens), time.perf_counter() - start


async def compare(model: Any, tokenizer: Any, prompts: list[list[int]], new_tokens: int,
                  repeats: int) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32, help="concurrent prompts (default 32)")
    parser.add_argument("--new-tokens", type=int, default=128, help="max new tokens per prompt")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = parser.parse_args()

    import torch

    from arft.models.loading import load_model

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model("smollm2-135m-instruct", dtype=args.dtype, device="cpu")
    prompts = build_prompts(tokenizer, args.batch)
    lengths = [len(p) for p in prompts]
    print(f"model smollm2-135m-instruct {args.dtype}, {args.threads} threads, batch {args.batch}, "
          f"prompt tokens {min(lengths)}-{max(lengths)} (mean {statistics.mean(lengths):.0f}), "
          f"max new tokens {args.new_tokens}")
    asyncio.run(compare(model, tokenizer, prompts, args.new_tokens, args.repeats))


if __name__ == "__main__":
    main()
