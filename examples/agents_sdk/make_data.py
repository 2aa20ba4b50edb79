"""Write the Agents SDK example's deterministic train/validation sets.

    python make_data.py            # train.jsonl, validation.jsonl

Half the tasks convert miles to kilometres, half degrees Celsius to Fahrenheit; the agent must
pick the right tool and report its result. Every row starts with worked examples as real
conversation turns (in the hosted dataset format: assistant ``tool_calls`` + ``tool`` messages),
two, three or four of them by turns; the agent turns them into the SDK's input items. With four
the embedded 135M model calls a tool almost always, with fewer it mostly guesses: the rows with
four give the first rewarded calls, training carries the habit over to the others.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from unit_tools import celsius_to_fahrenheit, miles_to_km

SYSTEM = ("You are a unit converter. Use the miles_to_km tool for distances and the "
          "celsius_to_fahrenheit tool for temperatures, then state the result.")
DISTANCE = ["How many kilometres is {n} miles?", "Convert {n} miles to km.", "What is {n} miles in kilometres?"]
TEMPERATURE = ["What is {n} degrees Celsius in Fahrenheit?", "Convert {n} C to Fahrenheit.",
               "How warm is {n} degrees Celsius in Fahrenheit?"]
EXAMPLES = [("How many kilometres is 12 miles?", "miles_to_km", {"miles": 12}),
            ("What is 30 degrees Celsius in Fahrenheit?", "celsius_to_fahrenheit", {"celsius": 30}),
            ("Convert 45 miles to km.", "miles_to_km", {"miles": 45}),
            ("Convert 18 C to Fahrenheit.", "celsius_to_fahrenheit", {"celsius": 18})]
"""The worked examples (question, tool, arguments); their numbers are never asked."""
UNIT = {"miles_to_km": ("miles", "km"), "celsius_to_fahrenheit": ("degrees Celsius", "degrees Fahrenheit")}


def convert(tool: str, n: int) -> str:
    return miles_to_km(n) if tool == "miles_to_km" else celsius_to_fahrenheit(n)


def worked_examples(n: int = len(EXAMPLES)) -> list[dict]:
    """The first ``n`` worked examples as conversation turns."""
    turns: list[dict] = []
    for i, (question, tool, args) in enumerate(EXAMPLES[:n]):
        call_id, n = f"call_example_{i}", next(iter(args.values()))
        result = convert(tool, n)
        turns += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": call_id, "content": result},
            {"role": "assistant", "content": f"{n} {UNIT[tool][0]} is {result} {UNIT[tool][1]}."},
        ]
    return turns


def make_task(rng: random.Random, i: int, split: str) -> dict:
    tool = "miles_to_km" if i % 2 == 0 else "celsius_to_fahrenheit"
    used = {next(iter(args.values())) for _, _, args in EXAMPLES}
    n = rng.choice([k for k in range(3, 100) if k not in used])
    question = rng.choice(DISTANCE if tool == "miles_to_km" else TEMPERATURE).format(n=n)
    return {"id": f"{split}-{i:03d}",
            "messages": [{"role": "system", "content": SYSTEM}, *worked_examples(2 + i % 3),
                         {"role": "user", "content": question}],
            "answer": convert(tool, n), "tool": tool}


def main(out: Path = Path(__file__).resolve().parent) -> None:
    for split, n, seed in (("train", 64, 1), ("validation", 16, 2)):
        rng = random.Random(seed)
        rows = [make_task(rng, i, split) for i in range(n)]
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
