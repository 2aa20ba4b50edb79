"""The code model behind ``ast_guard``: what a parsed module's names and constants stand for.

``Context`` reads a parsed module once and answers two questions the hack checks keep asking:

* **What does this expression name?** ``qualname`` turns ``F.conv2d`` (after ``import
  torch.nn.functional as F``), ``getattr(ref, "so" + "lve")``, ``importlib.import_module("x")``,
  ``__import__("x")``, ``sys.modules["x"]``, ``vars(m)["f"]``, ``m.__dict__["f"]``,
  ``globals()["f"]`` and ``__builtins__["eval"]`` into dotted names such as
  ``torch.nn.functional.conv2d``. Names bound by one plain assignment (``e = eval``) are
  followed, flow-insensitively (the first resolvable binding wins).
* **What constant is this?** ``fold`` evaluates an expression safely (literals, arithmetic,
  string tricks, decoding, names assigned exactly once); the folding itself lives in
  ``ast_fold``, fed with this model's assignments and resolved names.

``norm`` drops a ``builtins.`` prefix from resolved names, and ``scope_statements`` and
``own_nodes`` walk one scope or one function body. The checks themselves live in ``ast_checks``
and ``ast_logic``. Nothing here executes the analysed code.
"""

from __future__ import annotations

import ast
from typing import Any, Iterator

from arft.graders.builtins.ast_fold import NOFOLD, ConstantFolder

IMPORT_FUNCS = frozenset({"__import__", "importlib.import_module", "importlib.__import__"})


def norm(qualname: str) -> str:
    """``builtins.eval`` and ``__builtins__.eval`` -> ``eval``; other names unchanged."""
    for prefix in ("builtins.", "__builtins__."):
        if qualname.startswith(prefix):
            return qualname[len(prefix):]
    return qualname


def scope_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of one scope, through if/try/with/loop/match blocks but not into defs."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in ("body", "orelse", "finalbody"):
            yield from scope_statements(getattr(stmt, name, None) or [])
        for handler in getattr(stmt, "handlers", None) or []:
            yield from scope_statements(handler.body)
        for case in getattr(stmt, "cases", None) or []:
            yield from scope_statements(case.body)


def own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """Every node inside ``fn`` except those of nested functions, lambdas and classes."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                 ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


_MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "pop",
                       "popitem", "remove", "discard", "clear", "sort", "reverse",
                       "__setitem__", "__delitem__"})


def _mutated_name(node: ast.AST) -> str | None:
    """The name a node changes in place (``x.append(...)``, ``x[k] = ...``, ``del x[k]``)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in _MUTATORS and isinstance(node.func.value, ast.Name):
        return node.func.value.id
    if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load) \
            and isinstance(node.value, ast.Name):
        return node.value.id
    return None


class Context:
    """One parsed module: its imports, aliases, single assignments, defs and docstrings."""

    def __init__(self, tree: ast.Module, source: str = "") -> None:
        self.tree = tree
        self.source = source
        self.nodes: list[ast.AST] = list(ast.walk(tree))
        self.aliases: dict[str, str] = {}
        """Local name -> the dotted name it stands for (imports and plain aliases)."""
        self.import_roots: set[str] = set()
        """First component of every imported module (``torch`` for ``import torch.nn``)."""
        self.import_locals: set[str] = set()
        """Local names bound by an import statement."""
        self.star_modules: list[str] = []
        self.values: dict[str, list[ast.expr | None]] = {}
        """Name -> every value assigned to it (``None`` for a binding with no single value)."""
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.docstrings: set[int] = set()
        self._folder = ConstantFolder(self.values, lambda node: norm(self.qualname(node) or ""))
        self._collect_imports()
        self._collect_bindings()
        self._propagate_aliases()
        self._collect_dynamic_imports()

    # -- collection -------------------------------------------------------------------------

    def _collect_imports(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.import_roots.add(a.name.split(".")[0])
                    local = a.asname or a.name.split(".")[0]
                    self.import_locals.add(local)
                    self.aliases.setdefault(local, a.name if a.asname else local)
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if module:
                    self.import_roots.add(module.split(".")[0])
                for a in node.names:
                    if a.name == "*":
                        self.star_modules.append(module)
                    else:
                        full = f"{module}.{a.name}" if module else a.name
                        self.import_locals.add(a.asname or a.name)
                        self.aliases.setdefault(a.asname or a.name, full)

    def _collect_bindings(self) -> None:
        handled: set[int] = set()
        for node in self.nodes:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                self.docstrings.add(id(node.value))  # docstrings and bare string statements
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            pairs = self._assigned_pairs(node)
            for target, value in pairs:
                handled.add(id(target))
                self.values.setdefault(target.id, []).append(value)
        for node in self.nodes:
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) \
                    and id(node) not in handled:
                self.values.setdefault(node.id, []).append(None)
            elif (mutated := _mutated_name(node)) is not None:
                # out = []; out.append(x): one assignment, but not a constant
                self.values.setdefault(mutated, []).append(None)
            elif isinstance(node, ast.arg):
                self.values.setdefault(node.arg, []).append(None)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.values.setdefault(node.name, []).append(None)

    @staticmethod
    def _assigned_pairs(node: ast.AST) -> list[tuple[ast.Name, ast.expr]]:
        """``(name, value)`` for plain assignments, element-wise for ``a, b = x, y``."""
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            return []
        pairs: list[tuple[ast.Name, ast.expr]] = []
        for target in targets:
            if isinstance(target, ast.Name):
                pairs.append((target, value))
            elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(
                    value, (ast.Tuple, ast.List)) and len(target.elts) == len(value.elts):
                pairs.extend((t, v) for t, v in zip(target.elts, value.elts)
                             if isinstance(t, ast.Name))
        return pairs

    def _propagate_aliases(self) -> None:
        for _ in range(4):  # a few rounds resolve chains such as a = b; b = eval
            changed = False
            for name, values in self.values.items():
                if name in self.aliases:
                    continue
                for value in values:
                    if not isinstance(value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
                        continue
                    q = self.qualname(value)
                    if q and q != name and not q.startswith(name + ".") and "?" not in q:
                        self.aliases[name] = q
                        changed = True
                        break
            if not changed:
                return

    def _collect_dynamic_imports(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Call) and node.args and \
                    norm(self.qualname(node.func) or "") in IMPORT_FUNCS:
                name = self.fold_str(node.args[0])
                if name:
                    self.import_roots.add(name.split(".")[0])

    # -- name resolution --------------------------------------------------------------------

    def qualname(self, node: ast.AST, depth: int = 0) -> str | None:
        """The dotted name ``node`` refers to; ``?`` stands for an unknown base."""
        if depth > 12:
            return None
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value, depth + 1)
            return f"{base or '?'}.{node.attr}"
        if isinstance(node, ast.Call):
            return self._call_qualname(node, depth)
        if isinstance(node, ast.Subscript):
            return self._subscript_qualname(node, depth)
        return None

    def _call_qualname(self, node: ast.Call, depth: int) -> str | None:
        func = norm(self.qualname(node.func, depth + 1) or "")
        if func in IMPORT_FUNCS and node.args:
            return self.fold_str(node.args[0])
        if func == "getattr" and len(node.args) >= 2:
            attr = self.fold_str(node.args[1])
            base = self.qualname(node.args[0], depth + 1)
            return f"{base or '?'}.{attr}" if attr is not None else None
        if func in ("globals", "locals", "vars") and not node.args:
            return "<namespace>"
        if func == "vars" and len(node.args) == 1:
            base = self.qualname(node.args[0], depth + 1)
            return f"{base}.__dict__" if base else None
        return None

    def _subscript_qualname(self, node: ast.Subscript, depth: int) -> str | None:
        key = self.fold_str(node.slice)
        base = self.qualname(node.value, depth + 1)
        if key is None or base is None:
            return None
        if base == "<namespace>":
            return self.aliases.get(key, key)
        if base.endswith(".__dict__"):
            return f"{base[:-len('.__dict__')]}.{key}"
        if norm(base) == "sys.modules":
            return key
        if base in ("__builtins__", "builtins"):
            return f"builtins.{key}"
        return None

    def snippet(self, node: ast.AST, limit: int = 60) -> str:
        """The source text of ``node``, cut to ``limit`` characters (never recurses)."""
        text = ast.get_source_segment(self.source, node) or type(node).__name__
        text = " ".join(text.split())
        return text if len(text) <= limit else text[:limit - 3] + "..."

    def module_bound(self, node: ast.AST) -> bool:
        """Whether ``node`` is reached from an imported module (``t.x`` after ``import time
        as t``, ``importlib.import_module("m").x``, ``sys.modules["m"]``, ``vars(m)[...]``)."""
        for _ in range(20):
            if isinstance(node, ast.Attribute):
                node = node.value
            elif isinstance(node, ast.Subscript):
                if norm(self.qualname(node.value) or "") == "sys.modules":
                    return True
                node = node.value
            elif isinstance(node, ast.Call):
                func = norm(self.qualname(node.func) or "")
                if func in IMPORT_FUNCS:
                    return True
                if func not in ("getattr", "vars") or not node.args:
                    return False
                node = node.args[0]
            elif isinstance(node, ast.Name):
                alias = self.aliases.get(node.id, "").split(".")[0]
                return node.id in self.import_locals or node.id == "__builtins__" or (
                    alias in self.import_roots and None not in self.values.get(node.id, [None]))
            else:
                return False
        return False

    def references(self) -> Iterator[tuple[ast.AST, str]]:
        """Every loaded name, attribute, resolvable import call or subscript, with its name."""
        for node in self.nodes:
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                q = self.qualname(node)
            elif isinstance(node, (ast.Call, ast.Subscript)):
                q = self.qualname(node)
            else:
                continue
            if q:
                yield node, q

    # -- constant folding -------------------------------------------------------------------

    def fold(self, node: ast.AST | None, depth: int = 0) -> Any:
        """The constant value of ``node``, or ``NOFOLD`` (see ``ast_fold``)."""
        return self._folder.fold(node, depth)

    def fold_str(self, node: ast.AST | None) -> str | None:
        """``fold`` when the result is a string, else ``None``."""
        return self._folder.fold_str(node)

    def literals(self) -> Iterator[tuple[ast.AST, Any]]:
        """Every literal-like expression that folds to a constant, docstrings excluded."""
        kinds = (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.BinOp, ast.UnaryOp,
                 ast.JoinedStr, ast.Call, ast.Subscript)
        for node in self.nodes:
            if isinstance(node, kinds) and id(node) not in self.docstrings:
                value = self.fold(node)
                if value is not NOFOLD:
                    yield node, value

    def reachable_strings(self, node: ast.AST, depth: int = 0,
                          seen: set[str] | None = None) -> Iterator[str]:
        """Every constant string computable inside ``node``, following assigned names."""
        seen = set() if seen is None else seen
        for sub in ast.walk(node):
            value = self.fold(sub)
            values = value if isinstance(value, (list, tuple, frozenset)) else [value]
            for v in values:
                if isinstance(v, bytes):
                    v = v.decode("latin-1")
                if isinstance(v, str):
                    yield v
            if isinstance(sub, ast.Name) and depth < 3 and sub.id not in seen:
                seen.add(sub.id)
                for assigned in self.values.get(sub.id, []):
                    if assigned is not None:
                        yield from self.reachable_strings(assigned, depth + 1, seen)
