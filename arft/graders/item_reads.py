"""The item fields a python grader's source reads, found without running it.

``arft doctor`` checks that every row carries the fields its grader needs. For a python grader
that means every ``item["key"]`` subscript (a missing key raises ``KeyError``; ``item.get`` has a
default and is left out) in ``def grade(sample, item)`` *and* in the functions it hands the item
to: a grader that reads ``row["answer"]`` in a helper ``def check(row)`` needs ``answer`` just as
much. The source is parsed, never run (the grader may be slow, or have side effects); the reads
are followed through:

* calls of functions defined at the top level of the source, the item passed by position or by
  keyword (``check(sample, item)``, ``check(row=item)``), to any depth (each function once);
* plain aliases in the same function (``row = item``);
* nested functions and lambdas inside a followed function, which see its names.

What it cannot see (the item stored in a container, passed to a method or to imported code,
keys built at run time) it leaves out: the doctor then checks less, never wrongly.
"""

from __future__ import annotations

import ast
from typing import NamedTuple

Function = ast.FunctionDef | ast.AsyncFunctionDef


class Read(NamedTuple):
    """A function to follow, and the parameter through which the item reaches it."""

    function: str
    param: str


def item_keys(source: str, entry: str = "grade", position: int = 1) -> list[str]:
    """Constant keys of ``item["key"]`` reads reachable from ``entry``'s parameter number
    ``position`` (``grade(sample, item)``: 1), in the order first found; nothing when the source
    does not parse or has no such function."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return []
    functions: dict[str, Function] = {n.name: n for n in tree.body
                                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    params = _params(functions[entry]) if entry in functions else []
    if len(params) <= position:
        return []
    keys: list[str] = []
    todo, seen = [Read(entry, params[position])], set()
    while todo:
        read = todo.pop(0)
        if read in seen:
            continue
        seen.add(read)
        found, calls = _reads_in(functions[read.function], read.param, functions)
        keys += found
        todo += calls
    return list(dict.fromkeys(keys))


def _params(fn: Function) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]


def _aliases(fn: Function, param: str) -> set[str]:
    """``param`` and every name plainly assigned from it (``row = item``), to a fixed point."""
    names = {param}
    assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign)
               and isinstance(n.value, ast.Name)]
    grown = True
    while grown:
        grown = False
        for node in assigns:
            if isinstance(node.value, ast.Name) and node.value.id in names:
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id not in names:
                        names.add(target.id)
                        grown = True
    return names


def _reads_in(fn: Function, param: str, functions: dict[str, Function]) -> tuple[list[str], list[Read]]:
    """The keys ``fn`` reads from ``param`` (or an alias), and the calls that pass it on."""
    names = _aliases(fn, param)
    keys: list[str] = []
    calls: list[Read] = []
    for node in ast.walk(fn):
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and node.value.id in names and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)):
            keys.append(node.slice.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in functions):
            calls += _passed_on(node, names, functions[node.func.id])
    return keys, calls


def _passed_on(call: ast.Call, names: set[str], callee: Function) -> list[Read]:
    """The callee's parameters that receive one of ``names`` in ``call``."""
    params = _params(callee)
    kw_params = params + [a.arg for a in callee.args.kwonlyargs]
    out = [Read(callee.name, params[i]) for i, arg in enumerate(call.args)
           if i < len(params) and isinstance(arg, ast.Name) and arg.id in names]
    out += [Read(callee.name, kw.arg) for kw in call.keywords
            if kw.arg is not None and kw.arg in kw_params and isinstance(kw.value, ast.Name)
            and kw.value.id in names]
    return out
