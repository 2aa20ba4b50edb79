"""Write the fast_function example's deterministic task sets (run: python make_data.py).

Each row asks for a faster ``fast`` equivalent of a short loop-based ``slow`` (see
``families.py``) and carries two worked examples as real conversation turns (the calculator
pattern): a user asking to speed up a ``slow`` and the assistant's answer, the one-liner in a
python block (``WITH_TOOL_CALL`` adds a ``run_benchmark`` call and its verdict before it).
One example is of the task's own family (other argument names), so the one-liner to adapt is
in the prompt: the 135M model cannot derive ``n * (n + 1) * (2 * n + 1) // 6`` by itself.
The item keys the graders and the tool read: ``reference`` (the source of ``slow``), ``tests``
(small argument lists), ``bench`` (the timing input spec), ``expected`` (the reference's outputs
on the tests and the timing input, in that order), ``test_inputs`` (the values a solution must
not special-case), ``target`` (the speed-up worth full reward) and ``family``.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from families import FAMILIES, Family, names_for  # noqa: E402
from harness import build_args  # noqa: E402

SYSTEM = ("You make slow Python functions fast. Write `fast` with the same arguments, returning "
          "exactly what `slow` returns. You may check it with run_benchmark. Answer with the code "
          "in a python block.")
TEMPLATES = ("Make this function faster:\n```python\n{src}\n```",
             "Speed up this code:\n```python\n{src}\n```",
             "Write a faster version of slow:\n```python\n{src}\n```",
             "This is too slow. Rewrite it as fast:\n```python\n{src}\n```")
N_TRAIN, N_VALIDATION, N_TESTS, TARGET = 120, 60, 5, 10.0
# Worked examples that call run_benchmark before answering were measured on the embedded model
# (8 tasks x 4 samples): 0/32 rollouts called the tool, 19/32 answered with an imitation of a
# tool response ("<tool_response> correct on 6 tests; speed-up 300x"), reward 0.000. With the
# examples answering directly the model copies the answer format (see the README).
WITH_TOOL_CALL = False


def run_reference(src: str, args: list[Any]) -> Any:
    namespace: dict[str, Any] = {}
    exec(src, namespace)  # our own reference code, not a model's
    return namespace["slow"](*json.loads(json.dumps(args)))


def worked_example(fam: Family, rng: random.Random, tag: str,
                   avoid: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """One solved task as real turns: question, run_benchmark call, its result, the answer.

    ``avoid`` is the task's own ``(style, names)`` when ``fam`` is the task's family: the
    example then differs from the task in its argument names.
    """
    variant = rng.choice([v for v in range(4) if avoid is None or v != avoid[1]])
    names = names_for(fam, variant)
    src = rng.choice(fam.styles).format(**names)
    fast = fam.fast.format(**names)
    question = {"role": "user", "content": rng.choice(TEMPLATES).format(src=src)}
    answer = {"role": "assistant", "content": f"```python\n{fast}\n```"}
    if not WITH_TOOL_CALL:
        return [question, answer]
    call_id = f"call_example_{tag}"
    verdict = (f"correct on {N_TESTS + 1} tests; speed-up {rng.uniform(25, 400):.1f}x "
               f"(slow {rng.uniform(0.4, 2.5):.3f} ms, fast {rng.uniform(0.001, 0.02):.3f} ms)")
    return [question, {"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "run_benchmark", "arguments": json.dumps({"code": fast})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": verdict}, answer]


def make_task(combo: tuple[Family, int, int, int], rng: random.Random, task_id: str) -> dict[str, Any]:
    fam, style, variant, template = combo
    src = fam.styles[style].format(**names_for(fam, variant))
    tests = [fam.small(rng) for _ in range(N_TESTS)]
    bench = fam.bench(rng)
    cases = [*tests, build_args(bench)]
    expected = [run_reference(src, a) for a in cases]
    one_liner = fam.fast.format(**names_for(fam, variant)).replace("def fast", "def slow")
    if [run_reference(one_liner, a) for a in cases] != expected:  # the shown fast form must hold
        raise AssertionError(f"{fam.name}: the one-liner disagrees with the reference")
    bench_values = bench["args"] if "args" in bench else [bench["list"]["size"]]
    # One example of the task's own family (other names) and one of another, in random order:
    # the model has to pick the pattern that matches. Measured on the embedded model (8 tasks x 4
    # samples): with two examples of other families 3/32 answers were correct (all copies of slow).
    other = rng.choice([f for f in FAMILIES if f is not fam])
    own = worked_example(fam, rng, "own", avoid=(style, variant))
    shots = [own, worked_example(other, rng, "other")]
    rng.shuffle(shots)
    messages = [{"role": "system", "content": SYSTEM}, *shots[0], *shots[1],
                {"role": "user", "content": TEMPLATES[template].format(src=src)}]
    return {"id": task_id, "messages": messages, "family": fam.name, "reference": src,
            "tests": tests, "bench": bench, "expected": expected,
            "test_inputs": [*tests, *bench_values], "target": TARGET}


def round_robin(combos: list[tuple[Family, int, int, int]]) -> list[tuple[Family, int, int, int]]:
    """Interleave the families, so the first N tasks of a split cover every family."""
    by_family = [[c for c in combos if c[0] is fam] for fam in FAMILIES]
    return [c for group in itertools.zip_longest(*by_family) for c in group if c is not None]


def main(out: Path = HERE) -> None:
    rng = random.Random(7)
    combos = [(fam, s, v, t) for fam in FAMILIES for s in range(len(fam.styles))
              for v in range(4) for t in range(len(TEMPLATES))]
    rng.shuffle(combos)
    # Disjoint prompts: each (family, style, names, wording) lands in one split only.
    per_family = {fam.name: [c for c in combos if c[0] is fam] for fam in FAMILIES}
    k_train = -(-N_TRAIN // len(FAMILIES))
    k_val = -(-N_VALIDATION // len(FAMILIES))
    train = round_robin([c for cs in per_family.values() for c in cs[:k_train]])[:N_TRAIN]
    val = round_robin([c for cs in per_family.values()
                       for c in cs[k_train:k_train + k_val]])[:N_VALIDATION]
    out.mkdir(parents=True, exist_ok=True)
    splits = {"train": train, "validation": val}
    rows = {name: [make_task(c, rng, f"{name}-{i:03d}") for i, c in enumerate(cs)]
            for name, cs in splits.items()}
    rows["train_10"] = rows["train"][:10]
    for name, rs in rows.items():
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rs))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
