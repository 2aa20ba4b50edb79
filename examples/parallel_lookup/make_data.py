"""Write the parallel_lookup example's deterministic train/validation sets.

    python make_data.py          # regenerates train.jsonl (64 rows) and validation.jsonl (32 rows)

A task asks for the door codes of 2-4 offices (a third of the tasks each); every code takes one
``lookup(city)`` call and no call depends on another, so all of them can be made in one turn.
Training asks about the server's first 32 cities, validation about the other 16: a held-out eval
never sees a code the policy could have memorised. The row's own ``lookup`` schema lists its
offices as an ``enum`` (a guardrail: with constrained calls every call names one of them).

Every row carries two worked examples as real turns, their tool outputs the server's own, about
offices no task asks about: two lookups made in one turn (parallel) and three made one per turn
(sequential). The model copies the nearer one most: the sequential exchange comes last in two
rows of three (the slow path most baseline rollouts take), the parallel one in the third. The
reference answer (``codes``) is what the grader looks for in the reply.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from arft.pyfile import load_file

HERE = Path(__file__).resolve().parent
# By path, under a name of its own: several examples have a server.py.
_server = load_file(HERE / "server.py", "parallel_lookup_server")
CITIES = _server.CITIES
EXAMPLE_CITIES = _server.EXAMPLE_CITIES
lookup = _server.lookup
office_codes = _server.office_codes

SYSTEM = ("You look up office door codes with the lookup tool, one city per call. Then answer "
          "with each city and its door code.")
QUESTIONS = (
    "What are the door codes of the {cities} offices?",
    "I need the door codes for our offices in {cities}.",
    "Please get me the door codes of {cities}.",
)
DESCRIPTION = "Look up the door code of the office in one city."
TRAIN_CITIES, VAL_CITIES = CITIES[:32], CITIES[32:]
SIZES = {"train": 64, "validation": 32}
PARALLEL_LAST_EVERY = 3
"""Every third row shows the parallel exchange nearest to its question."""


def joined(cities: list[str]) -> str:
    """``Oslo, Lima and Cairo``."""
    return cities[0] if len(cities) == 1 else ", ".join(cities[:-1]) + " and " + cities[-1]


def lookup_schema(cities: list[str]) -> dict[str, Any]:
    """The row's ``lookup`` tool: the job's, with the row's offices as the city's enum."""
    return {"type": "function", "function": {"name": "lookup", "description": DESCRIPTION, "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "enum": cities}},
        "required": ["city"], "additionalProperties": False}}}


def worked_example(cities: tuple[str, ...], rounds: list[list[int]], tag: str) -> list[dict[str, Any]]:
    """One exchange: the request, one assistant turn per round (the calls of the cities at those
    indices, with the server's real outputs for that request), the answer."""
    codes = office_codes()
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": QUESTIONS[0].format(cities=joined(list(cities)))}]
    found: set[str] = set()
    for r, indices in enumerate(rounds):
        calls = [{"id": f"call_example_{tag}_{r}_{i}", "type": "function",
                  "function": {"name": "lookup", "arguments": json.dumps({"city": cities[i]})}} for i in indices]
        found |= {cities[i] for i in indices}  # a turn's calls run together: each sees the others
        turns.append({"role": "assistant", "content": None, "tool_calls": calls})
        turns += [{"role": "tool", "tool_call_id": c["id"], "content": lookup(codes, cities[i], cities, found)}
                  for c, i in zip(calls, indices)]
    return turns + [{"role": "assistant", "content": "\n".join(f"{c}: {codes[c]}" for c in cities)}]


def worked_examples(parallel_last: bool) -> list[dict[str, Any]]:
    """Two lookups in one turn and three lookups in three turns, in this order or the other."""
    parallel = worked_example(EXAMPLE_CITIES[:2], [[0, 1]], "a")
    sequential = worked_example(EXAMPLE_CITIES[2:5], [[0], [1], [2]], "b")
    return sequential + parallel if parallel_last else parallel + sequential


def make_tasks(split: str, pool: tuple[str, ...], n: int, rng: random.Random) -> list[dict[str, Any]]:
    """``n`` rows over distinct sets of cities from ``pool``: 2, 3 and 4 lookups in turn."""
    codes = office_codes()
    tasks: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    while len(tasks) < n:
        cities = rng.sample(pool, 2 + len(tasks) % 3)
        if frozenset(cities) not in seen:
            seen.add(frozenset(cities))
            tasks.append(cities)
    rng.shuffle(tasks)
    rows = []
    for i, cities in enumerate(tasks):
        question = QUESTIONS[rng.randrange(len(QUESTIONS))].format(cities=joined(cities))
        examples = worked_examples(parallel_last=i % PARALLEL_LAST_EVERY == 0)
        rows.append({"id": f"{split}-{i:03d}",
                     "messages": [{"role": "system", "content": SYSTEM}, *examples,
                                  {"role": "user", "content": question}],
                     "tools": [lookup_schema(cities)],
                     "cities": cities, "codes": [codes[c] for c in cities], "lookups": len(cities)})
    return rows


def main(out: Path = HERE) -> None:
    rng = random.Random(20261203)
    out.mkdir(parents=True, exist_ok=True)
    for split, pool in (("train", TRAIN_CITIES), ("validation", VAL_CITIES)):
        rows = make_tasks(split, pool, SIZES[split], rng)
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", type=Path, default=HERE, help="output folder (default: this one)")
    main(parser.parse_args().out)
