"""Write the long_tail example's deterministic train/validation sets.

    python make_data.py          # regenerates train.jsonl (64 rows) and validation.jsonl (32 rows)

A task asks one fact (codename, lead or team) of one project of the wiki in ``tools.py``; a
``search`` naming the project shows it, so one call is enough. Training asks about the first 32
projects, validation about the other 16. The reference answer (``facts``) is what the grader
looks for in the reply.

Every row carries two worked examples as real turns, with the tools' real outputs, about two
pages no task asks about, asking the row's own kind of fact (a 135M model copies the nearest
answer's wording). They show a thorough habit, as a prompt written for a careful agent would:
search, read the page, search again to double-check, answer (3 calls); search, read, search the
field, read again, answer (4 calls). The first search already showed the answer both times, so
every call after it is waste; the untrained model copies the habit and, being small, sometimes
keeps going — the long tail.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from arft.pyfile import load_file

HERE = Path(__file__).resolve().parent
tools = load_file(HERE / "tools.py", "long_tail_tools")

SYSTEM = ("You answer questions about our internal projects. Search the project wiki with the "
          "tools, then reply with the answer.")
QUESTIONS = {
    "codename": "What is the codename of project {p}?",
    "lead": "Who leads project {p}?",
    "team": "Which team owns project {p}?",
}
ANSWERS = {
    "codename": "The codename of project {p} is {v}.",
    "lead": "Project {p} is led by {v}.",
    "team": "Project {p} is owned by team {v}.",
}
EXAMPLE_CALLS = (  # the worked examples' thorough habit; "{p}": the example's project, "{k}": the asked field
    (("search", {"query": "{p} {k}"}), ("read", {"project": "{p}"}), ("search", {"query": "{p}"})),
    (("search", {"query": "{p}"}), ("read", {"project": "{p}"}), ("search", {"query": "{p} {k}"}),
     ("read", {"project": "{p}"})),
)
SIZES = {"train": 64, "validation": 32}


def worked_examples(kind: str) -> list[dict[str, Any]]:
    """Two exchanges asking ``kind`` (the row's own kind: a 135M model copies the nearest answer's
    wording) about the example projects, one call a turn with the tool's real output, then the
    answer: 3 calls, then 4."""
    turns: list[dict[str, Any]] = []
    for n, (project, calls) in enumerate(zip(tools.EXAMPLE_PROJECTS, EXAMPLE_CALLS)):
        turns.append({"role": "user", "content": QUESTIONS[kind].format(p=project)})
        for i, (tool, template) in enumerate(calls):
            args = {key: value.format(p=project, k=kind) for key, value in template.items()}
            call_id = f"call_example_{n}_{i}"
            turns += [{"role": "assistant", "content": None, "tool_calls": [{
                          "id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}]},
                      {"role": "tool", "tool_call_id": call_id, "content": getattr(tools, tool)(**args)}]
        turns.append({"role": "assistant", "content": ANSWERS[kind].format(p=project, v=tools.wiki()[project][kind])})
    return turns


def make_tasks(split: str, projects: tuple[str, ...], rng: random.Random) -> list[dict[str, Any]]:
    keys = [(p, k) for p in projects for k in QUESTIONS]
    rng.shuffle(keys)
    return [{"id": f"{split}-{i:03d}",
             "messages": [{"role": "system", "content": SYSTEM}, *worked_examples(kind),
                          {"role": "user", "content": QUESTIONS[kind].format(p=project)}],
             "project": project, "kind": kind, "facts": [tools.wiki()[project][kind]]}
            for i, (project, kind) in enumerate(keys[:SIZES[split]])]


def main(out: Path = HERE) -> None:
    rng = random.Random(20261203)
    out.mkdir(parents=True, exist_ok=True)
    for split, projects in (("train", tools.PROJECTS[:32]), ("validation", tools.PROJECTS[32:])):
        rows = make_tasks(split, projects, rng)
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", type=Path, default=HERE, help="output folder (default: this one)")
    main(parser.parse_args().out)
