"""The generation workloads several benchmarks share, so that their figures compare like with like.

- Single-turn chat prompts (``build_prompts``): a system prompt describing tools and numbered
  support questions, ~150-200 tokens each; ``run_hf`` / ``run_engine`` time one batched
  ``model.generate`` and concurrent engine calls on them (``engine_throughput``, ``lora_merged``).
- Multi-turn rollouts (``Workload``): 8 tasks x 4 samples of three assistant turns with JSON tool
  results between them, what a training step sends; ``run_hf_turns`` re-prefills every turn,
  ``run_rollouts`` sends each rollout's conversation to an engine (``engine_multiturn``,
  ``decode_step``, ``engine_vllm``).
- ``lora_policy``: the embedded model wrapped as the demo job trains it, its adapter moved off
  zero (``lora_merged``, ``engine_multiturn --lora``).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench.lib.harness import ROOT

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


DEMO_JOB = ROOT / "examples" / "calculator" / "job.yaml"


def lora_policy(job_file: Path, dtype: str = "float32") -> tuple[Any, Any]:
    """The embedded model wrapped as the job trains it, with a non-zero adapter (as after a few
    updates), and its tokenizer."""
    import torch

    from arft.config import load_job
    from arft.models.loading import load_model
    from arft.trainer.learner import wrap_policy

    job = load_job(job_file)
    model, tokenizer = load_model(job.model_ref, dtype=dtype, device="cpu")
    policy = wrap_policy(model, job.training, job.seed).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 1e-3)
    return policy, tokenizer


EXAMPLE = ('Example: user "Where is order Z-9?" -> assistant <tool_call>{"name": "get_order", '
           '"arguments": {"order_id": "Z-9"}}</tool_call> -> tool {"status": "shipped", '
           '"carrier": "DHL"} -> assistant "Order Z-9 has shipped with DHL."')


TURNS = 3


def tool_result(task: int, turn: int) -> str:
    """A JSON tool answer of ~60-90 tokens (different per task and turn)."""
    items = [{"sku": f"SKU-{task}{turn}{k}", "name": f"item {k} of order {task}", "qty": k + 1,
              "price": round(9.99 + 3.5 * k + task, 2)} for k in range(2 + turn)]
    return json.dumps({"order_id": f"A-{1000 + task}", "status": "in transit", "items": items})


class Workload:
    """The conversations' starting prompts and the token ids appended between turns."""

    def __init__(self, tokenizer: Any, tasks: int, samples: int) -> None:
        self.tokenizer = tokenizer
        self.eos = tokenizer.eos_token_id
        system = SYSTEM + "\n" + EXAMPLE
        self.starts = []
        for task in range(tasks):
            user = f"Ticket #{1000 + task}: {QUESTIONS[task % len(QUESTIONS)]}"
            text = tokenizer.apply_chat_template([{"role": "system", "content": system},
                                                  {"role": "user", "content": user}],
                                                 add_generation_prompt=True, tokenize=False)
            self.starts += [tokenizer.encode(text, add_special_tokens=False)] * samples
        self.samples = samples

    def after(self, conv: int, turn: int, completion: list[int]) -> list[int]:
        """What follows a completion: its end of turn (if it did not end there), the tool
        result, and the next assistant turn's opening."""
        text = (f"\n<|im_start|>user\n<tool_response>\n{tool_result(conv // self.samples, turn)}\n"
                "</tool_response><|im_end|>\n<|im_start|>assistant\n")
        end = [] if completion and completion[-1] == self.eos else [self.eos]
        return end + self.tokenizer.encode(text, add_special_tokens=False)


def run_hf_turns(model: Any, work: Workload, new_tokens: int) -> tuple[int, float]:
    """``(generated tokens, seconds)``: one batched generate per turn, whole conversations."""
    import torch

    convs = [list(s) for s in work.starts]
    generated = 0
    start = time.perf_counter()
    for turn in range(TURNS):
        batch = work.tokenizer.pad({"input_ids": convs}, padding=True, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                 max_new_tokens=new_tokens, pad_token_id=work.tokenizer.pad_token_id)
        for i, row in enumerate(out[:, batch["input_ids"].shape[1]:].tolist()):
            completion = row[:row.index(work.eos) + 1] if work.eos in row else row
            generated += len(completion)
            if turn < TURNS - 1:
                convs[i] += completion + work.after(i, turn, completion)
    return generated, time.perf_counter() - start


async def run_rollouts(engine: Any, work: Workload, new_tokens: int, rep: int = 0) -> tuple[int, float]:
    """``(generated tokens, seconds)``: 32 concurrent rollouts, each turn its whole conversation.
    Every turn samples with its own seed (the same in every engine arm of repeat ``rep``), so the
    engine arms generate the same tokens and their times compare like with like."""
    from arft.engines.base import SamplingParams

    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new_tokens)

    async def rollout(i: int) -> int:
        conv, generated = list(work.starts[i]), 0
        for turn in range(TURNS):
            seed = 1_000_000 * rep + 1000 * i + turn
            gen = await engine.generate(conv, params.model_copy(update={"seed": seed}))
            generated += len(gen.token_ids)
            conv += list(gen.token_ids) + work.after(i, turn, list(gen.token_ids))
        return generated

    start = time.perf_counter()
    counts = await asyncio.gather(*(rollout(i) for i in range(len(work.starts))))
    return sum(counts), time.perf_counter() - start

