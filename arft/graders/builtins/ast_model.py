"""The code model behind ``ast_guard``: what a parsed module's names and constants stand for.

``Context`` reads a parsed module once and answers two questions the hack checks keep asking:

* **What does this expression name?** ``qualname`` turns ``F.conv2d`` (after ``import
  torch.nn.functional as F``), ``getattr(ref, "so" + "lve")``, ``importlib.import_module("x")``,
  ``__import__("x")``, ``sys.modules["x"]``, ``vars(m)["f"]``, ``m.__dict__["f"]``,
  ``globals()["f"]`` and ``__builtins__["eval"]`` into dotted names such as
  ``torch.nn.functional.conv2d``. Names bound by one plain assignment (``e = eval``) are
  followed, flow-insensitively (the first resolvable binding wins).
* **What constant is this?** ``fold`` evaluates literals, arithmetic, string concatenation,
  f-strings, slicing (``"evlos"[::-1]``), ``"".join``, ``chr``/``int``/``str``, a few ``str``
  methods, ``base64``/``codecs``/``bytes.fromhex`` decoding and names assigned exactly once.
  Every operation that could allocate a lot (``"a" * 10**9``, ``2 ** 10**9``, huge format
  widths, decompression codecs) is refused, so folding untrusted code is safe.

``norm`` drops a ``builtins.`` prefix from resolved names, and ``scope_statements`` and
``own_nodes`` walk one scope or one function body. The checks themselves live in ``ast_checks``
and ``ast_logic``. Nothing here executes the analysed code.
"""

from __future__ import annotations

import ast
import base64
import binascii
import codecs
import functools
import operator
import re
from typing import Any, Callable, Iterator

NOFOLD: Any = type("NoFold", (), {"__repr__": lambda self: "NOFOLD"})()
"""Returned by ``Context.fold`` when an expression is not a (safely computable) constant."""

IMPORT_FUNCS = frozenset({"__import__", "importlib.import_module", "importlib.__import__"})
_MAX_LEN = 100_000
_MAX_BITS = 20_000
_HUGE_WIDTH = re.compile(r"\d{5,}|\*")
_FIELD_ACCESS = re.compile(r"\{[^}]*[.\[]")
_SAFE_CODECS = frozenset({"rot13", "rot_13", "hex", "hex_codec", "base64", "base64_codec",
                          "utf-8", "utf8", "ascii", "latin-1", "latin1", "unicode_escape"})
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.BitXor: operator.xor, ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
_STR_METHODS = frozenset({"join", "upper", "lower", "casefold", "strip", "lstrip", "rstrip",
                          "format", "decode", "encode", "swapcase", "title", "capitalize",
                          "removeprefix", "removesuffix", "replace", "split"})


def _codec_decode(data: Any, encoding: str = "utf-8", *rest: Any) -> Any:
    if str(encoding).lower() not in _SAFE_CODECS:
        raise ValueError("codec not allowed")
    return codecs.decode(data, encoding, *rest)


_PURE_FUNCS: dict[str, Callable[..., Any]] = {
    "chr": chr, "ord": ord, "str": str, "int": int, "float": float, "abs": abs, "round": round,
    "len": len, "hex": hex, "oct": oct, "bin": bin, "sum": sum, "min": min, "max": max,
    "sorted": sorted, "list": list, "tuple": tuple, "reversed": lambda x: list(reversed(x)),
    "repr": repr, "bytes.fromhex": bytes.fromhex, "binascii.unhexlify": binascii.unhexlify,
    "base64.b64decode": base64.b64decode, "base64.b32decode": base64.b32decode,
    "base64.b16decode": base64.b16decode, "base64.urlsafe_b64decode": base64.urlsafe_b64decode,
    "base64.b85decode": base64.b85decode, "base64.a85decode": base64.a85decode,
    "codecs.decode": _codec_decode, "codecs.encode": _codec_decode,
}


def norm(qualname: str) -> str:
    """``builtins.eval`` and ``__builtins__.eval`` -> ``eval``; other names unchanged."""
    for prefix in ("builtins.", "__builtins__."):
        if qualname.startswith(prefix):
            return qualname[len(prefix):]
    return qualname


def _small(value: Any) -> bool:
    """Whether a folded value is small enough to keep: the total length of every string,
    bytes and container inside it (shared items counted each time) stays under ``_MAX_LEN``."""
    budget, stack = _MAX_LEN, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            budget -= len(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            if item.bit_length() > _MAX_BITS:
                return False
        elif isinstance(item, dict):
            budget -= len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            budget -= len(item)
            stack.extend(item)
        if budget < 0:
            return False
    return True


def _guard_binop(op: type, left: Any, right: Any) -> None:
    """Refuse operations whose result could be huge before computing them."""
    def size(v: Any) -> int:
        return len(v) if isinstance(v, (str, bytes, list, tuple)) else 0

    if op is ast.Mult:
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > _MAX_BITS:
                raise OverflowError
        elif isinstance(left, int) or isinstance(right, int):
            count = left if isinstance(left, int) else right
            if count * max(size(left), size(right)) > _MAX_LEN:
                raise OverflowError
    elif op is ast.Pow and isinstance(left, int) and isinstance(right, int):
        if right > 0 and max(left.bit_length(), 1) * right > _MAX_BITS:
            raise OverflowError
    elif op is ast.LShift and isinstance(right, int) and right > _MAX_BITS:
        raise OverflowError
    elif op is ast.Mod and isinstance(left, (str, bytes)) and _HUGE_WIDTH.search(str(left)):
        raise OverflowError


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
        """The constant value of ``node``, or ``NOFOLD``."""
        if node is None or depth > 20:
            return NOFOLD
        try:
            value = self._fold(node, depth)
        except (ArithmeticError, ValueError, TypeError, LookupError, AttributeError,
                binascii.Error, UnicodeError, RecursionError):
            return NOFOLD
        return value if value is NOFOLD or _small(value) else NOFOLD

    def fold_str(self, node: ast.AST | None) -> str | None:
        """``fold`` when the result is a string, else ``None``."""
        value = self.fold(node)
        return value if isinstance(value, str) else None

    def _fold(self, node: ast.AST, depth: int) -> Any:
        sub = functools.partial(self.fold, depth=depth + 1)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            values = self.values.get(node.id, [])
            return sub(values[0]) if len(values) == 1 and values[0] is not None else NOFOLD
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = sub(node.left), sub(node.right)
            if left is NOFOLD or right is NOFOLD:
                return NOFOLD
            _guard_binop(type(node.op), left, right)
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp):
            operand = sub(node.operand)
            return NOFOLD if operand is NOFOLD else _UNARY[type(node.op)](operand)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return self._fold_sequence(node, depth)
        if isinstance(node, ast.Dict):
            keys = [sub(k) for k in node.keys]
            values = [sub(v) for v in node.values]
            if any(x is NOFOLD for x in keys + values) or None in node.keys:
                return NOFOLD
            return dict(zip(keys, values))
        if isinstance(node, ast.JoinedStr):
            return self._fold_fstring(node, depth)
        if isinstance(node, ast.Subscript):
            value, key = sub(node.value), self._fold_slice(node.slice, depth)
            return NOFOLD if NOFOLD in (value, key) else value[key]
        if isinstance(node, ast.Call):
            return self._fold_call(node, depth)
        return NOFOLD

    def _fold_sequence(self, node: ast.List | ast.Tuple | ast.Set, depth: int) -> Any:
        items = [self.fold(e, depth + 1) for e in node.elts]
        if any(x is NOFOLD for x in items) or any(isinstance(e, ast.Starred) for e in node.elts):
            return NOFOLD
        if isinstance(node, ast.Set):
            return frozenset(items)
        return tuple(items) if isinstance(node, ast.Tuple) else items

    def _fold_slice(self, node: ast.AST, depth: int) -> Any:
        if not isinstance(node, ast.Slice):
            return self.fold(node, depth + 1)
        parts = [None if p is None else self.fold(p, depth + 1)
                 for p in (node.lower, node.upper, node.step)]
        return NOFOLD if NOFOLD in parts else slice(*parts)

    def _fold_fstring(self, node: ast.JoinedStr, depth: int) -> Any:
        out: list[str] = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
                continue
            assert isinstance(part, ast.FormattedValue)
            value = self.fold(part.value, depth + 1)
            spec = self.fold(part.format_spec, depth + 1) if part.format_spec else ""
            if value is NOFOLD or spec is NOFOLD or _HUGE_WIDTH.search(str(spec)):
                return NOFOLD
            convert = {ord("r"): repr, ord("a"): ascii}.get(part.conversion, lambda v: v)
            out.append(format(convert(value), spec))
        return "".join(out)

    def _fold_call(self, node: ast.Call, depth: int) -> Any:
        args = [self.fold(a, depth + 1) for a in node.args]
        kwargs = {k.arg: self.fold(k.value, depth + 1) for k in node.keywords}
        if NOFOLD in args or NOFOLD in kwargs.values() or None in kwargs:
            return NOFOLD
        if isinstance(node.func, ast.Attribute) and node.func.attr in _STR_METHODS:
            receiver = self.fold(node.func.value, depth + 1)
            if isinstance(receiver, (str, bytes)):
                if node.func.attr == "format" and (_HUGE_WIDTH.search(str(receiver))
                                                   or _FIELD_ACCESS.search(str(receiver))):
                    return NOFOLD  # huge widths, or {0.__class__...} attribute walks
                if node.func.attr == "replace" and len(args) >= 2 and \
                        len(receiver) * max(1, len(args[1])) > _MAX_LEN:
                    return NOFOLD
                if node.func.attr == "decode" and args and str(args[0]).lower() not in \
                        _SAFE_CODECS:
                    return NOFOLD
                return getattr(receiver, node.func.attr)(*args, **kwargs)
        name = norm(self.qualname(node.func) or "")
        if name == "map" and len(args) == 2 and isinstance(node.args[0], ast.Name):
            func = _PURE_FUNCS.get(norm(self.qualname(node.args[0]) or ""))
            return list(map(func, args[1])) if func else NOFOLD
        if name in ("bytes", "bytearray") and args and not isinstance(args[0], int):
            return bytes(*args)
        func = _PURE_FUNCS.get(name)
        return NOFOLD if func is None else func(*args, **kwargs)

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
