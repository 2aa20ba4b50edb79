"""`arft import` turns 100k logged request/response records into dataset rows in under 30 s.

Import speed: `arft import` on 100k logged request/response records (goal: <= 30 s).

    python -m bench run import_speed [--n 100000] [--redact pii] [--seed 0]

Generates ``--n`` realistic logged chat-completions calls (~1.5 KB each) into a temporary folder
with a deterministic generator: a support agent's system prompt, a user request drawn from
templates with random values (a greeting, a request, a closing), three tools, a tool call, the
tool's result and the final answer. About 5 % of the episodes are logged twice (the first turn of
the session, then the whole session: one task), 3 % of the requests re-send an earlier one with a
small change (near-duplicates), 10 % carry an e-mail address and a phone number, and about 0.1 %
of the lines are broken. Then runs the import in-process (``arft.data.importer.import_traffic``;
``--redact pii`` to include redaction) and prints lines/s, the seconds for the generated lines,
and the seconds against the 30 s goal as a ratio (below 1 meets it).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from arft.data.importer import import_traffic
from bench.lib.harness import record

QUICK = ["--n", "5000"]

try:  # orjson when it is installed (faster), else the standard library
    import orjson

    def dumps(obj: Any) -> str:
        return orjson.dumps(obj).decode()
except ImportError:
    import json

    dumps: Callable[[Any], str] = json.dumps  # type: ignore[no-redef]

GOAL_S = 30.0
SYSTEM = ("You are the support agent of Acme Outdoor. Be brief. Look orders up with the tools "
          "before you answer; never guess.")
TOOLS = [{"type": "function", "function": {
    "name": name, "description": desc,
    "parameters": {"type": "object", "properties": {param: {"type": "string"}}, "required": [param]}}}
    for name, desc, param in [("lookup_order", "Find an order.", "order_id"),
                              ("track_parcel", "Tracking events of a parcel.", "tracking_id"),
                              ("search_products", "Search the catalogue.", "query")]]
GREETINGS = ["Hi", "Hello", "Hey there", "Good morning", "Dear support", "Hi team", "Hello Acme", ""]
NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emil", "Fatima", "Goran", "Hana", "Ivan", "Jun", "Kofi",
         "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq"]
TEMPLATES = [
    ("where is my order {o}? I ordered the {c} {p} {d} days ago.", "lookup_order", "o"),
    ("my order {o} still shows as processing, can you check what is going on?", "lookup_order", "o"),
    ("did order {o} ship yet? I need the {p} before {w}.", "lookup_order", "o"),
    ("can you track parcel {t} for me? The site says {s}.", "track_parcel", "t"),
    ("parcel {t} has been {s} for {d} days, what happened?", "track_parcel", "t"),
    ("do you have a {c} {p} in size {z}? Mine is worn out.", "search_products", "p"),
    ("I am looking for a {p} for {d} people, {c} if possible.", "search_products", "p"),
]
CLOSINGS = ["Thanks!", "Thank you.", "Cheers", "Regards", "Thanks in advance.", "", "Best",
            "Appreciate it."]
PRODUCTS = ["tent", "sleeping bag", "backpack", "headlamp", "rain jacket", "stove", "kettle",
            "hiking boots", "water filter", "camp chair"]
COLOURS = ["red", "blue", "green", "black", "orange", "grey"]
STATUSES = ["in transit", "delivered", "held at customs", "label created", "out for delivery"]
DAYS = ["Friday", "the weekend", "my trip", "Monday", "the 14th"]
CONTEXTS = ["It is a gift for my sister.", "We leave for the Alps next week.", "I paid by card.",
            "The tracking page does not load.", "This is my second message about it.",
            "I used the express shipping option.", "My address changed last month.",
            "The app shows an error.", "I am a member of the outdoor club.",
            "It was a birthday present.", "We are a group of scouts.", "My friend ordered one too.",
            "I ordered two of them.", "The confirmation email never came.",
            "Your chat bot could not help.", "I live in a small village.", "It is quite urgent.",
            "I already called yesterday.", "The courier left a note.", "I can pick it up myself."]


def request_text(rng: random.Random) -> tuple[str, str, str]:
    """(user request, tool it needs, the tool's argument)."""
    text, tool, key = rng.choice(TEMPLATES)
    values = {"o": f"A-{rng.randint(10_000, 99_999)}", "d": rng.randint(2, 9),
              "p": rng.choice(PRODUCTS), "t": f"TRK{rng.randint(100_000, 999_999)}",
              "s": rng.choice(STATUSES), "c": rng.choice(COLOURS), "z": rng.choice("SMLX"),
              "w": rng.choice(DAYS)}
    greeting = rng.choice(GREETINGS)
    greeting = f"{greeting}, {rng.choice(NAMES)} here:" if greeting and rng.random() < 0.5 else greeting
    context = rng.choice(CONTEXTS) if rng.random() < 0.7 else ""
    if rng.random() < 0.1:  # personal data that --redact pii removes
        context = (f"Reach me at {rng.choice(NAMES).lower()}{rng.randint(1, 999)}@example.com or "
                   f"+44 20 {rng.randint(1000, 9999)} {rng.randint(1000, 9999)}.")
    parts = (greeting, text.format(**values), context, rng.choice(CLOSINGS))
    filled = " ".join(x for x in parts if x)
    return filled, tool, str(values[key])


def retyped(text: str, rng: random.Random) -> str:
    """The same request sent again with a small change (a near-duplicate)."""
    i = rng.randrange(len(text))
    return rng.choice([text[:i] + text[i + 1:], text + "!", text.replace(" ", "  ", 1),
                       text[:i] + text[i:i + 1].upper() + text[i + 1:]])


def session(rng: random.Random, i: int, previous: list[str]) -> list[dict[str, Any]]:
    """The logged calls of one episode: the tool-call turn (5 %) and the whole session; 3 % of
    the requests re-send an earlier one with a small change."""
    text, tool, value = request_text(rng)
    if previous and rng.random() < 0.03:
        text = retyped(rng.choice(previous), rng)
    previous.append(text)
    start = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
    cid = f"call_{i:08x}"
    param = TOOLS[[t["function"]["name"] for t in TOOLS].index(tool)]["function"]["parameters"]
    asked = {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function",
         "function": {"name": tool, "arguments": dumps({param["required"][0]: value})}}]}
    result = {"role": "tool", "tool_call_id": cid,
              "content": dumps({"status": rng.choice(STATUSES), "eta_days": rng.randint(0, 5)})}
    answer = {"role": "assistant", "content": f"I checked {value}: {rng.choice(STATUSES)}."}

    def call(messages: list[dict[str, Any]], reply: dict[str, Any]) -> dict[str, Any]:
        return {"request": {"model": "gpt-4.1-mini", "messages": messages, "tools": TOOLS,
                            "tool_choice": "auto"},
                "response": {"id": f"chatcmpl-{i}", "choices": [
                    {"index": 0, "message": reply, "finish_reason": "stop"}]},
                "metadata": {"customer": f"c{rng.randint(1, 9999)}"}}

    whole = call([*start, asked, result], answer)
    return [call(start, asked), whole] if rng.random() < 0.05 else [whole]


def generate(path: Path, n: int, seed: int) -> int:
    """Write ``n`` lines (about 0.1 % of them broken); returns the bytes written."""
    rng = random.Random(seed)
    written = i = 0
    previous: list[str] = []
    with path.open("w", encoding="utf-8") as f:
        while written < n:
            if rng.random() < 0.001:
                lines = [rng.choice(['{"request": {"messages": [', '{"messages": [{"role": "robot", '
                                     '"content": "hi"}]}', "[1, 2, 3]"])]
            else:
                lines = [dumps(rec) for rec in session(rng, i, previous)]
            for line in lines[: n - written]:
                f.write(line + "\n")
                written += 1
            i += 1
    return path.stat().st_size


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="logged lines to generate")
    parser.add_argument("--redact", action="append", default=[], help="e.g. pii (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs.jsonl"
        t0 = time.perf_counter()
        size = generate(logs, args.n, args.seed)
        print(f"generated {args.n:,} lines, {size / 1e6:.1f} MB ({size / args.n:.0f} B/line) "
              f"in {time.perf_counter() - t0:.1f}s")
        t0 = time.perf_counter()
        report = import_traffic(logs, Path(tmp) / "out", redact=args.redact)
        seconds = time.perf_counter() - t0
    print(f"imported: {report.records:,} records, {report.bad_lines} bad lines, "
          f"{report.duplicates_merged:,} duplicate starts merged, "
          f"{report.near_duplicates_removed:,} near-duplicates removed, {report.rows:,} rows "
          f"(train {report.train:,}, validation {report.validation:,}), "
          f"{report.redactions:,} redactions")
    print(f"lines/s: {args.n / seconds:,.0f}")
    print(f"seconds for {args.n:,} lines: {seconds:.2f}")
    print(f"seconds / {GOAL_S:g} s goal: {seconds / GOAL_S:.3f} "
          f"({'meets' if seconds <= GOAL_S else 'misses'} the goal)")
    record("import_speed" + "".join(f"_{r}" for r in args.redact),
           {"lines": args.n, "seconds": seconds, "lines_per_s": args.n / seconds, "of_goal": seconds / GOAL_S,
            "redact": args.redact, "rows": report.rows, "near_duplicates_removed": report.near_duplicates_removed})


if __name__ == "__main__":
    main()
