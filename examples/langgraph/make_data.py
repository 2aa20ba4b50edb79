"""Write the LangGraph example's deterministic train/validation sets.

    python make_data.py            # train.jsonl, validation.jsonl

Half the tasks ask a product's price (only the ``price`` tool knows it), half ask for arithmetic
(the ``calculator`` tool); the agent must pick the right tool. Every row starts with worked
examples as real conversation turns (in the hosted dataset format: assistant ``tool_calls`` +
``tool`` messages), two, three or four of them by turns. Measured on the embedded model (8 tasks
x 4 samples, T=0.7): with two it calls a tool in 1 of 32 samples (it guesses), with three in 0 of
the 11 measured, with four in 30 of 32. The rows with four give the first rewarded calls;
training carries the habit over to the rows with fewer, which is where the gain is.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from shop_tools import PRICES

SYSTEM = ("You are a shop assistant. Use the price tool to look up what a product costs and the "
          "calculator tool for arithmetic, then state the result.")
PRICE_TEMPLATES = ["How much does a {item} cost?", "What is the price of a {item}?",
                   "What does one {item} cost?"]
MATH_TEMPLATES = ["What is {a} {op} {b}?", "Compute {a} {op} {b}.", "Please calculate {a} {op} {b}."]
EXAMPLES = [("How much does a Brimble cost?", "price", {"item": "Brimble"}, "24.90", "A Brimble costs 24.90."),
            ("What is 12 * 7?", "calculator", {"expression": "12 * 7"}, "84", "12 * 7 = 84."),
            ("What is the price of a Lumbago?", "price", {"item": "Lumbago"}, "71.15", "A Lumbago costs 71.15."),
            ("Compute 250 + 431.", "calculator", {"expression": "250 + 431"}, "681", "250 + 431 = 681.")]
"""The worked examples (question, tool, arguments, tool result, final reply), two per tool; their
products are in the price list but never asked about."""


EXAMPLE_ITEMS = {args["item"] for _, name, args, _, _ in EXAMPLES if name == "price"}


def worked_examples(n: int = len(EXAMPLES)) -> list[dict]:
    """The first ``n`` worked examples as conversation turns."""
    turns: list[dict] = []
    for i, (question, name, args, result, reply) in enumerate(EXAMPLES[:n]):
        call_id = f"call_example_{i}"
        turns += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": call_id, "content": result},
            {"role": "assistant", "content": reply},
        ]
    return turns


def make_task(rng: random.Random, i: int, split: str) -> dict:
    if i % 2 == 0:
        item = rng.choice([name for name in PRICES if name not in EXAMPLE_ITEMS])
        question, answer, kind = rng.choice(PRICE_TEMPLATES).format(item=item), PRICES[item], "price"
    else:
        op = rng.choice(["*", "+", "-"])
        a, b = (rng.randint(12, 99), rng.randint(12, 99)) if op == "*" else (rng.randint(100, 999), rng.randint(100, 999))
        question, kind = rng.choice(MATH_TEMPLATES).format(a=a, op=op, b=b), "calculator"
        answer = str({"*": a * b, "+": a + b, "-": a - b}[op])
    return {"id": f"{split}-{i:03d}",
            "messages": [{"role": "system", "content": SYSTEM}, *worked_examples(2 + i % 3),
                         {"role": "user", "content": question}],
            "answer": answer, "tool": kind}


def main(out: Path = Path(__file__).resolve().parent) -> None:
    for split, n, seed in (("train", 64, 1), ("validation", 16, 2)):
        rng = random.Random(seed)
        rows = [make_task(rng, i, split) for i in range(n)]
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
