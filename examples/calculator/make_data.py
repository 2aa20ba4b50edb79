"""Write the calculator example's deterministic train/validation sets.

    python make_data.py            # train.jsonl, validation.jsonl (worked examples in every row)
    python make_data.py --plain    # train_plain.jsonl, validation_plain.jsonl (the same tasks, plain)

A plain row is what real traffic looks like: the system prompt and the user's request, with no
worked-example turns before it (``job_plain.yaml`` trains on them).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SYSTEM = "You are a careful assistant. Use the calculator tool for arithmetic, then state the result."
TEMPLATES = ["What is {a} {op} {b}?", "Compute {a} {op} {b}.", "Please calculate {a} {op} {b}.",
             "How much is {a} {op} {b}?"]


# Two worked examples as real conversation turns, in the hosted dataset format (assistant
# tool_calls + tool messages). Measured on the embedded model (8 tasks x 4 samples, T=0.7):
# without them 0/32 samples call a tool; with them 14/32 do, 13 with the right tool.
EXAMPLES = [("What is 12 * 7?", "12 * 7", "84"), ("Compute 250 + 431.", "250 + 431", "681")]


def worked_examples() -> list[dict]:
    turns: list[dict] = []
    for question, expression, result in EXAMPLES:
        call_id = f"call_example_{result}"
        turns += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": result},
            {"role": "assistant", "content": f"{expression} = {result}."},
        ]
    return turns


def make_task(rng: random.Random, i: int, split: str, plain: bool = False) -> dict:
    """One task; ``plain`` leaves out the worked examples (same id, question and item)."""
    op = rng.choice(["*", "+", "-"])
    a, b = (rng.randint(12, 99), rng.randint(12, 99)) if op == "*" else (rng.randint(100, 999), rng.randint(100, 999))
    answer = {"*": a * b, "+": a + b, "-": a - b}[op]
    question = rng.choice(TEMPLATES).format(a=a, op=op, b=b)
    return {"id": f"{split}-{i:03d}",
            "messages": [{"role": "system", "content": SYSTEM}, *([] if plain else worked_examples()),
                         {"role": "user", "content": question}],
            "answer": str(answer), "expression": f"{a} {op} {b}"}


def main(out: Path = Path(__file__).resolve().parent, plain: bool = False) -> None:
    for split, n, seed in (("train", 64, 1), ("validation", 16, 2)):
        rng = random.Random(seed)
        rows = [make_task(rng, i, split, plain) for i in range(n)]
        name = f"{split}_plain" if plain else split
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plain", action="store_true", help="write the plain rows (no worked examples)")
    main(plain=parser.parse_args().plain)
