"""The fast_function task families: a slow reference, its one-line fast form, and their inputs.

Each family is a very short loop-based function ``slow`` whose fast form is a one-liner a small
model can copy from a worked example (a closed-form formula, or a builtin: ``set``, ``sorted``,
slicing, ``dict.fromkeys``). Only families whose fast form is at least ~20x faster are kept: on a
shared 2-core machine timing noise is +-30 %, and builtins that win only 1.5x over a plain loop
(``sum``, ``max``, ``xs.count``) would make the reward mostly noise (measured, see the README).

A reference has two styles (``for`` and ``while``) and takes its argument names from the task
row, so the prompts vary while the one-liner stays the same. ``make_data.py`` and the adversarial
benchmark (``bench/fast_function_hacks.py``) both build their tasks from ``FAMILIES``.
"""

from __future__ import annotations

import random
import textwrap
from dataclasses import dataclass
from typing import Any, Callable

Args = list[Any]


@dataclass(frozen=True)
class Family:
    """One kind of task; ``styles`` are the reference sources with ``{x}`` (and ``{y}``) names."""

    name: str
    styles: tuple[str, ...]
    fast: str
    """The one-line fast form, ``def fast(...): return ...``, with the same ``{x}``/``{y}``."""
    small: Callable[[random.Random], Args]
    """Arguments of one small correctness test (shown by run_benchmark)."""
    bench: Callable[[random.Random], dict[str, Any]]
    """The timing input as a spec the harness expands (see ``harness.build_args``)."""
    ints: bool = True
    """True when the arguments are numbers (names n/m/k), False when the first is a list."""


def _src(text: str) -> str:
    """A reference source written indented in this file, as plain code."""
    return textwrap.dedent(text).strip("\n")


def _n_small(rng: random.Random) -> Args:
    return [rng.randint(1, 60)]


def _n_bench(lo: int, hi: int) -> Callable[[random.Random], dict[str, Any]]:
    return lambda rng: {"args": [rng.randint(lo, hi)]}


def _list_small(rng: random.Random) -> Args:
    return [[rng.randint(0, 9) for _ in range(rng.randint(0, 8))]]


def _list_bench(lo: int, hi: int, distinct: bool = False) -> Callable[[random.Random], dict[str, Any]]:
    return lambda rng: {"list": {"size": rng.randint(lo, hi), "seed": rng.randint(1, 10 ** 6),
                                 "distinct": distinct}}


FAMILIES: tuple[Family, ...] = (
    Family("sum_to_n", (
        _src("""
            def slow({x}):
                total = 0
                for i in range(1, {x} + 1):
                    total += i
                return total"""),
        _src("""
            def slow({x}):
                total = 0
                i = 1
                while i <= {x}:
                    total += i
                    i += 1
                return total""")),
        "def fast({x}): return {x} * ({x} + 1) // 2",
        _n_small, _n_bench(2000, 4000)),
    Family("sum_of_squares", (
        _src("""
            def slow({x}):
                total = 0
                for i in range(1, {x} + 1):
                    total += i * i
                return total"""),
        _src("""
            def slow({x}):
                total = 0
                i = 1
                while i <= {x}:
                    total += i * i
                    i += 1
                return total""")),
        "def fast({x}): return {x} * ({x} + 1) * (2 * {x} + 1) // 6",
        _n_small, _n_bench(2000, 4000)),
    Family("sum_of_odds", (
        _src("""
            def slow({x}):
                total = 0
                for i in range({x}):
                    total += 2 * i + 1
                return total"""),
        _src("""
            def slow({x}):
                total = 0
                i = 0
                while i < {x}:
                    total += 2 * i + 1
                    i += 1
                return total""")),
        "def fast({x}): return {x} * {x}",
        _n_small, _n_bench(2000, 4000)),
    Family("mean_to_n", (
        _src("""
            def slow({x}):
                total = 0
                for i in range(1, {x} + 1):
                    total += i
                return total / {x}"""),
        _src("""
            def slow({x}):
                total = 0
                i = 1
                while i <= {x}:
                    total += i
                    i += 1
                return total / {x}""")),
        "def fast({x}): return ({x} + 1) / 2",
        _n_small, _n_bench(2000, 4000)),
    Family("count_multiples", (
        _src("""
            def slow({x}, {y}):
                found = 0
                for i in range(1, {x} + 1):
                    if i % {y} == 0:
                        found += 1
                return found"""),
        _src("""
            def slow({x}, {y}):
                found = 0
                i = 1
                while i <= {x}:
                    if i % {y} == 0:
                        found += 1
                    i += 1
                return found""")),
        "def fast({x}, {y}): return {x} // {y}",
        lambda rng: [rng.randint(1, 60), rng.randint(1, 9)],
        lambda rng: {"args": [rng.randint(2000, 4000), rng.randint(2, 9)]}),
    Family("power_of_two", (
        _src("""
            def slow({x}):
                result = 1
                for _ in range({x}):
                    result = result * 2
                return result"""),
        _src("""
            def slow({x}):
                result = 1
                while {x} > 0:
                    result = result * 2
                    {x} -= 1
                return result""")),
        "def fast({x}): return 2 ** {x}",
        _n_small, _n_bench(1000, 1500)),
    Family("count_unique", (
        _src("""
            def slow({x}):
                seen = []
                for v in {x}:
                    if v not in seen:
                        seen.append(v)
                return len(seen)"""),
        _src("""
            def slow({x}):
                seen = []
                i = 0
                while i < len({x}):
                    if {x}[i] not in seen:
                        seen.append({x}[i])
                    i += 1
                return len(seen)""")),
        "def fast({x}): return len(set({x}))",
        _list_small, _list_bench(250, 350), False),
    Family("has_duplicates", (
        _src("""
            def slow({x}):
                for i in range(len({x})):
                    for j in range(i + 1, len({x})):
                        if {x}[i] == {x}[j]:
                            return True
                return False"""),
        _src("""
            def slow({x}):
                i = 0
                while i < len({x}):
                    if {x}[i] in {x}[i + 1:]:
                        return True
                    i += 1
                return False""")),
        "def fast({x}): return len(set({x})) != len({x})",
        _list_small, _list_bench(250, 350, distinct=True), False),
    Family("sorted_copy", (
        _src("""
            def slow({x}):
                out = list({x})
                for i in range(len(out)):
                    for j in range(len(out) - 1 - i):
                        if out[j] > out[j + 1]:
                            out[j], out[j + 1] = out[j + 1], out[j]
                return out"""),
        _src("""
            def slow({x}):
                out = []
                for v in {x}:
                    i = 0
                    while i < len(out) and out[i] <= v:
                        i += 1
                    out.insert(i, v)
                return out""")),
        "def fast({x}): return sorted({x})",
        _list_small, _list_bench(250, 350), False),
    Family("reversed_copy", (
        _src("""
            def slow({x}):
                out = []
                for v in {x}:
                    out.insert(0, v)
                return out"""),
        _src("""
            def slow({x}):
                out = []
                i = 0
                while i < len({x}):
                    out.insert(0, {x}[i])
                    i += 1
                return out""")),
        "def fast({x}): return {x}[::-1]",
        _list_small, _list_bench(1500, 2500), False),
    Family("dedupe", (
        _src("""
            def slow({x}):
                out = []
                for v in {x}:
                    if v not in out:
                        out.append(v)
                return out"""),
        _src("""
            def slow({x}):
                out = []
                i = 0
                while i < len({x}):
                    if {x}[i] not in out:
                        out.append({x}[i])
                    i += 1
                return out""")),
        "def fast({x}): return list(dict.fromkeys({x}))",
        _list_small, _list_bench(250, 350), False),
    Family("sorted_unique", (
        _src("""
            def slow({x}):
                out = []
                for v in {x}:
                    if v not in out:
                        out.append(v)
                out.sort()
                return out"""),
        _src("""
            def slow({x}):
                out = []
                i = 0
                while i < len({x}):
                    if {x}[i] not in out:
                        out.append({x}[i])
                    i += 1
                out.sort()
                return out""")),
        "def fast({x}): return sorted(set({x}))",
        _list_small, _list_bench(250, 350), False),
)

INT_NAMES = (("n", "k"), ("num", "step"), ("count", "d"), ("limit", "m"))
LIST_NAMES = (("xs",), ("nums",), ("values",), ("items",))


def family(name: str) -> Family:
    """The family called ``name``; KeyError naming the known ones otherwise."""
    for fam in FAMILIES:
        if fam.name == name:
            return fam
    raise KeyError(f"no family {name!r}; known: {', '.join(f.name for f in FAMILIES)}")


def names_for(fam: Family, variant: int) -> dict[str, str]:
    """The ``{x}``/``{y}`` argument names of one variant."""
    pool = INT_NAMES if fam.ints else LIST_NAMES
    chosen = pool[variant % len(pool)]
    return {"x": chosen[0], "y": chosen[1] if len(chosen) > 1 else "k"}
