"""Safe constant folding for ``ast_guard``: the value an expression of untrusted code would have.

``ConstantFolder.fold`` evaluates literals, arithmetic, string concatenation, f-strings,
slicing (``"evlos"[::-1]``), ``"".join``, ``chr``/``int``/``str``, a few ``str`` methods,
``base64``/``codecs``/``bytes.fromhex`` decoding and names assigned exactly once. Every
operation that could allocate a lot (``"a" * 10**9``, ``2 ** 10**9``, huge format widths,
decompression codecs) is refused, so folding untrusted code is safe; what cannot be folded is
``NOFOLD``. Which names hold which values, and what a called function is, come from the code
model (``ast_model.Context``). Nothing here executes the analysed code.
"""

from __future__ import annotations

import ast
import base64
import binascii
import codecs
import functools
import operator
import re
from typing import Any, Callable, Mapping

NOFOLD: Any = type("NoFold", (), {"__repr__": lambda self: "NOFOLD"})()
"""Returned by ``Context.fold`` when an expression is not a (safely computable) constant."""

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


def _codec_decode(data: object, encoding: str = "utf-8", *rest: Any) -> Any:
    if str(encoding).lower() not in _SAFE_CODECS:
        raise ValueError("codec not allowed")
    # any folded value may arrive: codecs raise TypeError for one it cannot decode, and the folder
    # treats that as not foldable
    return codecs.decode(data, encoding, *rest)  # type: ignore[call-overload]


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


def _small(value: object) -> bool:
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


def _guard_binop(op: type, left: object, right: object) -> None:
    """Refuse operations whose result could be huge before computing them."""
    def size(v: object) -> int:
        return len(v) if isinstance(v, (str, bytes, list, tuple)) else 0

    if op is ast.Mult:
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > _MAX_BITS:
                raise OverflowError
        elif isinstance(left, int) or isinstance(right, int):
            count = left if isinstance(left, int) else right if isinstance(right, int) else 0
            if count * max(size(left), size(right)) > _MAX_LEN:
                raise OverflowError
    elif op is ast.Pow and isinstance(left, int) and isinstance(right, int):
        if right > 0 and max(left.bit_length(), 1) * right > _MAX_BITS:
            raise OverflowError
    elif op is ast.LShift and isinstance(right, int) and right > _MAX_BITS:
        raise OverflowError
    elif op is ast.Mod and isinstance(left, (str, bytes)) and _HUGE_WIDTH.search(str(left)):
        raise OverflowError


class ConstantFolder:
    """Folds the expressions of one module.

    ``values``: name -> every value assigned to it (``None`` for a binding with no single
    value); ``call_name``: the normalised dotted name a called expression refers to (``""``
    when unknown). Both come from ``ast_model.Context``.
    """

    def __init__(self, values: Mapping[str, list[ast.expr | None]],
                 call_name: Callable[[ast.AST], str]) -> None:
        self.values = values
        self.call_name = call_name

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
        kwargs = {k.arg: self.fold(k.value, depth + 1) for k in node.keywords if k.arg is not None}
        # a `**spread` keyword has no name: such a call is not folded
        if NOFOLD in args or NOFOLD in kwargs.values() or len(kwargs) < len(node.keywords):
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
        name = self.call_name(node.func)
        if name == "map" and len(args) == 2 and isinstance(node.args[0], ast.Name):
            func = _PURE_FUNCS.get(self.call_name(node.args[0]))
            return list(map(func, args[1])) if func else NOFOLD
        if name in ("bytes", "bytearray") and args and not isinstance(args[0], int):
            return bytes(*args)
        func = _PURE_FUNCS.get(name)
        return NOFOLD if func is None else func(*args, **kwargs)
