"""Write the fix_tests example's tasks: tiny buggy Python projects and their hidden tests.

    python examples/fix_tests/make_data.py [OUT_DIR]      (default: this folder)

Each task is one module with one wrong line (a wrong operator, an off-by-one, a missing case...)
under ``projects/<task>/``, and a test file that fails because of it. The test file travels in
the row (``item.tests``), not in the project folder: the grader writes it over whatever the agent
left (an agent that edits the tests gains nothing), the ``run_tests`` tool writes it before every
run, and one file per project keeps the example at ~180 files. Deterministic: same bytes every run.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SYSTEM = ("You are a careful coding agent. Fix the bug with the tools: replace the wrong line, "
          "run the tests, then reply in one short professional sentence.")
PYTEST_INI = "[pytest]\n"  # makes the workspace its own rootdir (no parent project's config)


@dataclass(frozen=True)
class Bug:
    """One kind of one-line bug; ``names`` are the function's name variants (one task each)."""

    kind: str
    names: tuple[str, ...]
    params: str
    body: tuple[str, ...]  # the function's lines, the bug's line included as ``buggy``
    buggy: str
    fixed: str
    inputs: tuple[tuple[Any, ...], ...]
    # Not "arith": the baseline model wrote "math.py" for it in 5 of 8 rollouts.
    modules: tuple[str, ...] = ("calc", "mathutils", "numtools", "formulas")


TEXT = ("textutils", "strtools", "words", "texttools")
SEQ = ("listutils", "seqtools", "itemtools", "collectionutils")
BUGS = [
    Bug("add", ("add", "plus", "add_numbers", "sum_pair"), "a, b", ("return a - b",),
        "return a - b", "return a + b", ((2, 3), (10, 5), (0, 7), (4, 4), (1, 9))),
    Bug("subtract", ("subtract", "minus", "difference", "take_away"), "a, b", ("return a + b",),
        "return a + b", "return a - b", ((9, 4), (10, 3), (5, 5), (8, 1), (7, 2))),
    Bug("multiply", ("multiply", "times", "product", "mul"), "a, b", ("return a + b",),
        "return a + b", "return a * b", ((3, 4), (5, 6), (7, 3), (2, 9), (6, 6))),
    Bug("divide", ("divide", "ratio", "quotient", "div"), "a, b", ("return a * b",),
        "return a * b", "return a / b", ((8, 2), (9, 3), (10, 4), (12, 6), (7, 7))),
    Bug("square", ("square", "squared", "sq", "self_product"), "x", ("return x * 2",),
        "return x * 2", "return x * x", ((3,), (4,), (5,), (7,), (9,))),
    Bug("cube", ("cube", "cubed", "third_power", "pow3"), "x", ("return x * x",),
        "return x * x", "return x * x * x", ((2,), (3,), (4,), (5,), (6,))),
    Bug("double", ("double", "twice", "times_two", "doubled"), "x", ("return x * x",),
        "return x * x", "return x * 2", ((3,), (5,), (7,), (10,), (6,))),
    Bug("half", ("half", "halve", "halved", "split_in_two"), "x", ("return x * 2",),
        "return x * 2", "return x / 2", ((4,), (10,), (8,), (6,), (3,))),
    Bug("power", ("power", "pow_of", "raise_to", "exponent"), "base, exp", ("return base * exp",),
        "return base * exp", "return base ** exp", ((2, 3), (3, 3), (5, 2), (2, 5), (4, 3))),
    Bug("remainder", ("remainder", "modulo", "mod", "leftover"), "a, b", ("return a // b",),
        "return a // b", "return a % b", ((7, 3), (10, 4), (9, 5), (11, 3), (20, 6))),
    Bug("is_even", ("is_even", "even", "check_even", "is_even_number"), "n",
        ("return n % 2 == 1",), "return n % 2 == 1", "return n % 2 == 0",
        ((2,), (3,), (10,), (7,), (0,))),
    Bug("is_odd", ("is_odd", "odd", "check_odd", "is_odd_number"), "n", ("return n % 2 == 0",),
        "return n % 2 == 0", "return n % 2 == 1", ((3,), (4,), (9,), (12,), (1,))),
    Bug("is_positive", ("is_positive", "positive", "above_zero", "check_positive"), "n",
        ("return n >= 0",), "return n >= 0", "return n > 0", ((0,), (5,), (-3,), (0,), (8,))),
    Bug("is_negative", ("is_negative", "negative", "below_zero", "check_negative"), "n",
        ("return n <= 0",), "return n <= 0", "return n < 0", ((0,), (-5,), (3,), (0,), (-1,))),
    Bug("is_adult", ("is_adult", "can_vote", "of_age", "grown_up"), "age", ("return age > 18",),
        "return age > 18", "return age >= 18", ((18,), (30,), (12,), (18,), (17,))),
    Bug("in_range", ("in_range", "between", "within", "is_between"), "x, lo, hi",
        ("return lo < x < hi",), "return lo < x < hi", "return lo <= x <= hi",
        ((1, 1, 5), (5, 1, 5), (3, 1, 5), (0, 1, 5), (10, 0, 10))),
    Bug("max_of", ("max_of", "larger", "bigger", "greater_of"), "a, b",
        ("return a if a < b else b",), "return a if a < b else b", "return a if a > b else b",
        ((3, 8), (9, 2), (4, 4), (1, 7), (6, 5))),
    Bug("min_of", ("min_of", "smaller", "lesser", "least_of"), "a, b",
        ("return a if a > b else b",), "return a if a > b else b", "return a if a < b else b",
        ((3, 8), (9, 2), (4, 4), (1, 7), (6, 5))),
    Bug("clamp", ("clamp", "limit", "bound", "restrict"), "x, lo, hi",
        ("return max(lo, min(x, lo))",), "return max(lo, min(x, lo))",
        "return max(lo, min(x, hi))", ((5, 0, 10), (15, 0, 10), (-2, 0, 10), (7, 1, 9))),
    Bug("abs_value", ("abs_value", "magnitude", "absolute", "distance_from_zero"), "x",
        ("return x if x > 0 else x",), "return x if x > 0 else x", "return x if x > 0 else -x",
        ((-4,), (5,), (-9,), (0,), (-1,))),
    Bug("percent", ("percent", "percentage", "as_percent", "share_percent"), "part, whole",
        ("return part / whole * 10",), "return part / whole * 10", "return part / whole * 100",
        ((1, 4), (1, 2), (3, 4), (1, 5), (2, 8))),
    Bug("c_to_f", ("c_to_f", "celsius_to_fahrenheit", "to_fahrenheit", "fahrenheit"), "c",
        ("return c * 9 / 5 - 32",), "return c * 9 / 5 - 32", "return c * 9 / 5 + 32",
        ((0,), (100,), (10,), (20,), (-40,))),
    Bug("area", ("area", "rect_area", "rectangle_area", "surface"), "w, h", ("return w + h",),
        "return w + h", "return w * h", ((3, 4), (5, 6), (2, 7), (8, 3), (6, 6))),
    Bug("perimeter", ("perimeter", "rect_perimeter", "border_length", "fence_length"), "w, h",
        ("return w + h",), "return w + h", "return 2 * (w + h)",
        ((3, 4), (5, 6), (2, 7), (8, 3), (1, 1))),
    Bug("safe_div", ("safe_div", "safe_divide", "checked_div", "div_or_zero"), "a, b",
        ("return 0 if b == 1 else a / b",), "return 0 if b == 1 else a / b",
        "return 0 if b == 0 else a / b", ((6, 1), (5, 0), (8, 2), (3, 1), (9, 3))),
    Bug("sum_to", ("sum_to", "sum_up_to", "triangle", "total_to"), "n",
        ("return sum(range(n))",), "return sum(range(n))", "return sum(range(n + 1))",
        ((3,), (4,), (10,), (5,), (1,))),
    Bug("factorial", ("factorial", "fact", "falling_product", "permutations_of"), "n",
        ("result = 1", "for i in range(1, n):", "    result = result * i", "return result"),
        "for i in range(1, n):", "for i in range(1, n + 1):", ((3,), (4,), (5,), (1,), (6,))),
    Bug("average", ("average", "mean", "avg", "mean_of"), "xs",
        ("return sum(xs) / (len(xs) - 1)",), "return sum(xs) / (len(xs) - 1)",
        "return sum(xs) / len(xs)", (([2, 4, 6],), ([1, 2, 3, 4],), ([5, 5],), ([3, 9, 6],)),
        SEQ),
    Bug("first", ("first", "head", "first_item", "front"), "items", ("return items[1]",),
        "return items[1]", "return items[0]", (([4, 5, 6],), ([9, 1],), ([7, 8, 9, 10],)), SEQ),
    Bug("last", ("last", "tail_item", "last_item", "final"), "items", ("return items[0]",),
        "return items[0]", "return items[-1]", (([4, 5, 6],), ([9, 1],), ([7, 8, 9, 10],)), SEQ),
    Bug("count_up", ("count_up", "one_to_n", "numbers_to", "upto"), "n",
        ("return list(range(1, n))",), "return list(range(1, n))",
        "return list(range(1, n + 1))", ((3,), (5,), (1,), (4,)), SEQ),
    Bug("is_empty", ("is_empty", "empty", "has_no_items", "blank"), "items",
        ("return len(items) == 1",), "return len(items) == 1", "return len(items) == 0",
        (([],), ([3],), ([1, 2],), ([],)), SEQ),
    Bug("total", ("total", "sum_all", "add_all", "grand_total"), "items",
        ("result = 1", "for x in items:", "    result = result + x", "return result"),
        "result = 1", "result = 0", (([1, 2, 3],), ([5, 5],), ([10],), ([4, 0, 6],)), SEQ),
    Bug("count_positive", ("count_positive", "positives", "num_positive", "count_above_zero"),
        "items", ("return sum(1 for x in items if x < 0)",),
        "return sum(1 for x in items if x < 0)", "return sum(1 for x in items if x > 0)",
        (([1, -2, 3],), ([5, 6, -1, 2],), ([-1, -2],), ([4],)), SEQ),
    Bug("largest", ("largest", "biggest", "top", "highest"), "items", ("return min(items)",),
        "return min(items)", "return max(items)", (([3, 9, 4],), ([1, 2],), ([7, 5, 6],)), SEQ),
    Bug("contains", ("contains", "has", "includes", "member"), "items, x",
        ("return x not in items",), "return x not in items", "return x in items",
        (([1, 2, 3], 2), ([4, 5], 9), ([7, 8], 7)), SEQ),
    Bug("shout", ("shout", "to_upper", "loud", "yell"), "s", ("return s.lower()",),
        "return s.lower()", "return s.upper()", (("hello",), ("Stop",), ("abc",)), TEXT),
    Bug("reverse", ("reverse", "backwards", "reversed_text", "mirror"), "s", ("return s[::1]",),
        "return s[::1]", "return s[::-1]", (("abc",), ("hello",), ("ab",)), TEXT),
    Bug("count_vowels", ("count_vowels", "vowels", "num_vowels", "vowel_count"), "s",
        ("return sum(1 for c in s if c in 'aeio')",), "return sum(1 for c in s if c in 'aeio')",
        "return sum(1 for c in s if c in 'aeiou')", (("hello",), ("sun",), ("blue",), ("up",)),
        TEXT),
    Bug("join_words", ("join_words", "sentence", "make_sentence", "glue"), "words",
        ("return ''.join(words)",), "return ''.join(words)", "return ' '.join(words)",
        ((["hi", "there"],), (["a", "b", "c"],), (["good", "day"],)), TEXT),
    Bug("count_words", ("count_words", "word_count", "num_words", "words_in"), "s",
        ("return len(s.split(','))",), "return len(s.split(','))", "return len(s.split())",
        (("a b c",), ("hello world",), ("one two three four",)), TEXT),
    Bug("greet", ("greet", "hello", "welcome", "salute"), "name", ("return 'Hello ' + name",),
        "return 'Hello ' + name", "return 'Hello, ' + name", (("Ann",), ("Bob",), ("Eve",)),
        TEXT),
    Bug("first_char", ("first_char", "initial", "first_letter", "leading_char"), "s",
        ("return s[1]",), "return s[1]", "return s[0]", (("abc",), ("hello",), ("xy",)), TEXT),
    Bug("is_palindrome", ("is_palindrome", "palindrome", "reads_same", "symmetric"), "s",
        ("return s == s[::1]",), "return s == s[::1]", "return s == s[::-1]",
        (("abc",), ("aba",), ("ab",), ("noon",)), TEXT),
]

# Worked examples (not among the tasks): real turns showing the tool calls a fix takes. Both go
# straight to replace: with a read_file first in one of them, the baseline model (8 tasks x 4)
# read, then wrote fake tool responses of its own, and never fixed anything.
EXAMPLES = [
    {"module": "shapes", "fn": "box_volume", "buggy": "return w * h + d",
     "fixed": "return w * h * d"},
    {"module": "money", "fn": "add_tax", "buggy": "return price * 0.2",
     "fixed": "return price * 1.2"},
]


def module_source(fn: str, params: str, body: tuple[str, ...]) -> str:
    lines = "".join(f"    {line}\n" for line in body)
    return f"def {fn}({params}):\n{lines}"


def run_fn(source: str, fn: str, args: tuple[Any, ...]) -> Any:
    """Call ``fn`` defined by ``source`` (our own generated code) on a copy of ``args``."""
    scope: dict[str, Any] = {}
    exec(source, scope)  # noqa: S102 - the generator's own templates, not model output
    try:
        return scope[fn](*json.loads(json.dumps(args)))
    except Exception as e:  # noqa: BLE001 - a buggy line may raise (e.g. an IndexError)
        return f"{type(e).__name__}"


def test_source(module: str, fn: str, cases: list[tuple[tuple[Any, ...], Any]]) -> str:
    tests = [f"from {module} import {fn}\n"]
    for i, (args, want) in enumerate(cases, 1):
        call = f"{fn}({', '.join(repr(a) for a in args)})"
        tests.append(f"\n\ndef test_{fn}_{i}():\n    assert {call} == {want!r}\n")
    return "".join(tests)


def request(module: str, buggy: str, fixed: str) -> str:
    # No failing call in the request: the model took function names in it for tool names.
    return (f"The tests of {module}.py fail. The bug is the line `{buggy}` in {module}.py; "
            f"it should be `{fixed}`. Fix it.")


def tool_call(call_id: str, name: str, args: dict[str, str]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": call_id, "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)}}]}


def worked_examples() -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for i, ex in enumerate(EXAMPLES):
        path = f"{ex['module']}.py"
        turns.append({"role": "user", "content": request(ex["module"], ex["buggy"], ex["fixed"])})
        turns += [tool_call(f"call_ex{i}_replace", "replace",
                            {"path": path, "old": ex["buggy"], "new": ex["fixed"]}),
                  {"role": "tool", "tool_call_id": f"call_ex{i}_replace",
                   "content": f"Replaced 1 occurrence in {path}."},
                  tool_call(f"call_ex{i}_tests", "run_tests", {}),
                  {"role": "tool", "tool_call_id": f"call_ex{i}_tests",
                   "content": "3 passed in 0.02s"},
                  {"role": "assistant", "content": f"Fixed {ex['fn']} in {path}; all tests pass."}]
    return turns


def make_task(bug: Bug, variant: int, rng: random.Random) -> tuple[dict[str, Any], str]:
    """The row and the buggy module's source for one (bug, name variant)."""
    fn, module = bug.names[variant], bug.modules[variant]
    good = module_source(fn, bug.params, tuple(bug.fixed if line == bug.buggy else line for line in bug.body))
    bad = module_source(fn, bug.params, bug.body)
    inputs = [a for i, a in enumerate(bug.inputs) if a not in bug.inputs[:i]]
    while True:  # three cases, at least one of which the bug breaks
        chosen = rng.sample(inputs, min(3, len(inputs)))
        failing = [a for a in chosen if run_fn(bad, fn, a) != run_fn(good, fn, a)]
        if failing:
            break
    cases = [(a, run_fn(good, fn, a)) for a in chosen]
    task_id = f"{bug.kind}-{variant}"
    row = {"id": task_id, "project": task_id, "path": f"{module}.py", "function": fn,
           "bug_kind": bug.kind, "buggy_line": bug.buggy, "fixed_line": bug.fixed,
           "tests": {f"test_{module}.py": test_source(module, fn, cases), "pytest.ini": PYTEST_INI},
           "messages": [{"role": "system", "content": SYSTEM}, *worked_examples(),
                        {"role": "user", "content": request(module, bug.buggy, bug.fixed)}]}
    return row, bad


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def main(out: Path) -> None:
    rng = random.Random(7)
    rows = []
    projects = out / "projects"
    if projects.exists():
        shutil.rmtree(projects)
    for bug in BUGS:
        for variant in range(len(bug.names)):
            row, source = make_task(bug, variant, rng)
            folder = projects / row["project"]
            folder.mkdir(parents=True)
            (folder / row["path"]).write_text(source)
            rows.append(row)
    rng.shuffle(rows)
    train, validation = rows[:-56], rows[-56:]
    write_jsonl(out / "train.jsonl", train)
    write_jsonl(out / "train_10.jsonl", train[:10])
    write_jsonl(out / "validation.jsonl", validation)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
