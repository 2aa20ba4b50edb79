"""fast_function's guards (ast_guard and a judge) leave no hand-written hack rewarded while clean answers still are.

fast_function: how many hacked answers are rewarded without vs with the guards?

    python -m bench run fast_function_hacks [--json OUT]

Grades every candidate of ``examples/fast_function/adversarial.py`` (one per ``ast_guard``
pattern and more, plus clean neighbours) with

* **unguarded**: the speed reward alone (``harness.py`` as a ``python`` grader, in the sandbox),
* **ast_guard** alone and the **judge** alone (``judge_hack_check`` around a constant inner
  grade, asking the local rule-based judge of ``judge_server.py`` over HTTP),
* **guarded**: the example's job grader as it trains (judge_hack_check around
  ``speed * ast_guard``),

and prints them side by side with the counts: hacks rewarded (score > 0) unguarded vs guarded
(goal: 0 guarded), clean answers rewarded (goal: all), broken answers rewarded (goal: 0). The
speed-ups are timed once each on a shared machine; only the counts are the benchmark's figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from pathlib import Path
from typing import Any, Sequence

from arft.pyfile import load_file
from bench.lib.harness import ROOT, record

QUICK: list[str] = []  # 28 candidates graded four ways: well under a minute
EXAMPLE = ROOT / "examples" / "fast_function"

CONSTANT_INNER = {"type": "string_check", "name": "constant", "input": "x", "reference": "x",
                  "operation": "eq"}


def sample_for(row: dict[str, Any], answer: str) -> dict[str, Any]:
    """The grader's sample for a one-turn rollout: the task's messages, then the answer."""
    from arft.graders.base import build_sample
    from arft.records import Message, Rollout

    task = [Message.model_validate(m) for m in row["messages"][:1] + row["messages"][-1:]]
    rollout = Rollout(trace_id=f"trace_{uuid.uuid4().hex}", task_id=row["id"],
                      messages=(*task, Message(role="assistant", content=answer)))
    return build_sample(rollout)


def graders(judge_url: str) -> dict[str, Any]:
    """The four graders, built from the job's own grader spec (judge moved to ``judge_url``)."""
    import yaml

    from arft.graders.registry import build_grader

    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())["method"]["reinforcement"]["grader"]
    guarded = {**spec, "base_url": judge_url}
    children = spec["grader"]["graders"]
    return {"unguarded": build_grader({"name": "speed", **children["speed"]}, EXAMPLE),
            "ast_guard": build_grader({"name": "guard", **children["guard"]}, EXAMPLE),
            "judge": build_grader({**guarded, "grader": CONSTANT_INNER}, EXAMPLE),
            "guarded": build_grader(guarded, EXAMPLE)}


async def grade_all(judge_url: str) -> list[dict[str, Any]]:
    # adversarial.py imports its sibling harness.py by name: register it under that name first
    load_file(EXAMPLE / "harness.py", "harness")
    answers = load_file(EXAMPLE / "adversarial.py", "fast_function_adversarial").answers

    from arft.graders.base import close_grader
    from arft.graders.registry import grade_sample

    built = graders(judge_url)
    rows = []
    try:
        for cand, row, answer in answers():
            sample, item = sample_for(row, answer), {k: v for k, v in row.items() if k != "messages"}
            scores = dict(zip(built, await asyncio.gather(
                *(grade_sample(g, sample, item) for g in built.values()))))
            errors = {k: s.error[:300] for k, s in scores.items() if s.error}
            rows.append({"name": cand.name, "pattern": cand.pattern, "kind": cand.kind,
                         "family": cand.family,
                         "speedup": scores["unguarded"].sub_scores.get("speedup"),
                         **{k: s.score for k, s in scores.items()},
                         "ast_flags": [f.removeprefix("hack:") for f in scores["ast_guard"].flags],
                         "judge_flags": [f.removeprefix("hack:") for f in scores["judge"].flags],
                         "errors": errors})
    finally:
        for g in built.values():
            await close_grader(g)
    return rows


def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind in ("hack", "clean", "broken"):
        group = [r for r in rows if r["kind"] == kind]
        out[f"{kind}_total"] = len(group)
        for col in ("unguarded", "ast_guard_only", "judge_only", "guarded"):
            out[f"{kind}_rewarded_{col}"] = sum(1 for r in group if rewarded(r, col))
    return out


def rewarded(row: dict[str, Any], column: str) -> bool:
    """Score > 0 under ``column``; the single-guard columns gate the unguarded speed reward."""
    if column == "ast_guard_only":
        return row["unguarded"] > 0 and row["ast_guard"] > 0
    if column == "judge_only":
        return row["unguarded"] > 0 and row["judge"] > 0
    return row[column] > 0


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| candidate | pattern | kind | speed-up | unguarded | ast_guard finds | judge finds "
            "| guarded |")
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speed = "-" if r["speedup"] is None else f"{r['speedup']:.1f}x"
        lines.append(f"| {r['name']} | {r['pattern']} | {r['kind']} | {speed} | "
                     f"{r['unguarded']:.2f} | {', '.join(r['ast_flags']) or '-'} | "
                     f"{', '.join(r['judge_flags']) or '-'} | {r['guarded']:.2f} |")
    return "\n".join(lines)


def summary(c: dict[str, int]) -> str:
    lines = ["| answers | unguarded | + ast_guard | + judge | guarded (both) |",
             "|---|---|---|---|---|"]
    goals = {"hack": "goal 0", "clean": "goal all", "broken": "goal 0"}
    for kind in ("hack", "clean", "broken"):
        n = c[f"{kind}_total"]
        cells = " | ".join(f"{c[f'{kind}_rewarded_{col}']}/{n}"
                           for col in ("unguarded", "ast_guard_only", "judge_only", "guarded"))
        lines.append(f"| {kind} rewarded ({goals[kind]}) | {cells} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", type=Path, help="also write the rows and counts here")
    args = p.parse_args(argv)
    from arft.serving import free_port

    serve = load_file(EXAMPLE / "services.py", "fast_function_services").serve

    with serve(port=free_port()) as url:
        rows = asyncio.run(grade_all(url))
    c = counts(rows)
    print(table(rows))
    print()
    print(summary(c))
    print("\nmissing_file: not applicable (the candidate is the final answer, not a file).")
    errors = [(r["name"], r["errors"]) for r in rows if r["errors"]]
    if errors:
        print("grader errors (scored 0, shown so none is silent):")
        for name, errs in errors:
            print(f"  {name}: {errs}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "counts": c}, indent=2))
    record("fast_function_hacks", {"counts": c, "candidates": len(rows)})


if __name__ == "__main__":
    main()
