"""A safe arithmetic formula for the ``multi`` grader's ``calculate_output``.

The formula is untrusted text from a job file, so it is never handed to ``eval``: a small
recursive-descent parser turns it into a tree of five node types, and only that tree is ever
evaluated. The grammar (usual precedence; ``^`` is power and binds tighter than unary minus on its
left, so ``-2 ^ 2 == -4``, and associates to the right, so ``2 ^ 3 ^ 2 == 512``)::

    expr  := term (("+" | "-") term)*
    term  := unary (("*" | "/") unary)*
    unary := ("-" | "+") unary | power
    power := atom ("^" unary)?
    atom  := NUMBER | NAME | FUNC "(" expr ("," expr)* ")" | "(" expr ")"

Names are sub-grader names (identifiers); functions are ``min max abs floor ceil exp sqrt log``
(``log(x)`` is natural, ``log(x, base)`` any base). Anything else — attribute access, indexing,
strings, other calls — is a syntax error. Every problem raises ``FormulaError`` naming the
formula.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Union

from arft.errors import ArftError

MAX_LENGTH = 10_000
"""Longer formulas are refused: nothing useful is that long, and it bounds parser recursion."""

TOKEN = re.compile(r"""
    \s*(?:
      (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>[-+*/^(),])
    )""", re.VERBOSE)


class FormulaError(ArftError):
    """A formula that cannot be parsed or evaluated; the message names the formula and problem."""


def _log(x: float, base: float = math.e) -> float:
    return math.log(x, base)


def _min(*xs: float) -> float:
    return min(xs)  # min(3) would need an iterable; min over the arguments is the meaning


def _max(*xs: float) -> float:
    return max(xs)


# name -> (function, min args, max args)
FUNCTIONS: dict[str, tuple[Callable[..., float], int, int]] = {
    "min": (_min, 1, 1_000),
    "max": (_max, 1, 1_000),
    "abs": (abs, 1, 1),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "exp": (math.exp, 1, 1),
    "sqrt": (math.sqrt, 1, 1),
    "log": (_log, 1, 2),
}


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Name:
    id: str


@dataclass(frozen=True)
class Neg:
    operand: "Node"


@dataclass(frozen=True)
class BinOp:
    op: str
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple["Node", ...]


Node = Union[Num, Name, Neg, BinOp, Call]


def _tokenize(source: str) -> list[tuple[str, str, int]]:
    """``(kind, text, position)`` tokens, ending with an ``("end", "", len)`` token."""
    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(source):
        if source[pos:].strip() == "":
            break
        m = TOKEN.match(source, pos)
        if m is None or m.lastgroup is None:
            at = pos + len(source[pos:]) - len(source[pos:].lstrip())
            raise FormulaError(f"formula {source!r}: unexpected character {source[at]!r} at "
                               f"position {at}; use numbers, grader names, + - * / ^, "
                               "parentheses and min max abs floor ceil exp sqrt log")
        tokens.append((m.lastgroup, m.group(m.lastgroup), m.start(m.lastgroup)))
        pos = m.end()
    tokens.append(("end", "", len(source)))
    return tokens


class _Parser:
    """Recursive descent over the token list; one method per grammar rule."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = _tokenize(source)
        self.i = 0

    def error(self, problem: str) -> FormulaError:
        _, text, pos = self.tokens[self.i]
        found = repr(text) if text else "the end"
        return FormulaError(f"formula {self.source!r}: {problem}, found {found} at position {pos}")

    def peek(self) -> tuple[str, str]:
        kind, text, _ = self.tokens[self.i]
        return kind, text

    def take(self, text: str) -> bool:
        if self.peek() == ("op", text):
            self.i += 1
            return True
        return False

    def parse(self) -> Node:
        node = self.expr()
        if self.peek()[0] != "end":
            raise self.error("expected an operator (+ - * / ^) or the end")
        return node

    def expr(self) -> Node:
        node = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.peek()[1]
            self.i += 1
            node = BinOp(op, node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek() in (("op", "*"), ("op", "/")):
            op = self.peek()[1]
            self.i += 1
            node = BinOp(op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.take("-"):
            return Neg(self.unary())
        if self.take("+"):
            return self.unary()
        return self.power()

    def power(self) -> Node:
        base = self.atom()
        if self.take("^"):
            # The exponent is a unary, so 2 ^ -1 works and 2 ^ 3 ^ 2 is 2 ^ (3 ^ 2).
            return BinOp("^", base, self.unary())
        return base

    def atom(self) -> Node:
        kind, text = self.peek()
        if kind == "number":
            self.i += 1
            return Num(float(text))
        if kind == "name":
            self.i += 1
            return self.call(text) if self.take("(") else Name(text)
        if self.take("("):
            node = self.expr()
            if not self.take(")"):
                raise self.error("expected ')'")
            return node
        raise self.error("expected a number, a grader name, a function call or '('")

    def call(self, func: str) -> Call:
        if func not in FUNCTIONS:
            raise FormulaError(f"formula {self.source!r}: unknown function {func!r}; the "
                               f"functions are: {', '.join(FUNCTIONS)}")
        args = [self.expr()]
        while self.take(","):
            args.append(self.expr())
        if not self.take(")"):
            raise self.error(f"expected ',' or ')' in the call of {func}")
        _, low, high = FUNCTIONS[func]
        if not low <= len(args) <= high:
            wanted = str(low) if low == high else f"{low} to {high}"
            raise FormulaError(f"formula {self.source!r}: {func}() takes {wanted} argument(s), "
                               f"got {len(args)}")
        return Call(func, tuple(args))


def _names(node: Node) -> set[str]:
    if isinstance(node, Name):
        return {node.id}
    if isinstance(node, Neg):
        return _names(node.operand)
    if isinstance(node, BinOp):
        return _names(node.left) | _names(node.right)
    if isinstance(node, Call):
        return set().union(*(_names(a) for a in node.args))
    return set()


def _eval(node: Node, values: Mapping[str, float]) -> float:
    """Evaluate the tree; math errors propagate to ``Formula.evaluate``, which names them."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Name):
        return float(values[node.id])
    if isinstance(node, Neg):
        return -_eval(node.operand, values)
    if isinstance(node, Call):
        return float(FUNCTIONS[node.func][0](*(_eval(a, values) for a in node.args)))
    left, right = _eval(node.left, values), _eval(node.right, values)
    if node.op == "+":
        return left + right
    if node.op == "-":
        return left - right
    if node.op == "*":
        return left * right
    if node.op == "/":
        return left / right
    result = left ** right
    if isinstance(result, complex):  # a negative base with a fractional exponent
        raise ValueError(f"{left:g} ^ {right:g} is not a real number")
    return float(result)


@dataclass(frozen=True)
class Formula:
    """A parsed formula: evaluate it with ``evaluate({name: value})``."""

    source: str
    tree: Node
    names: frozenset[str]
    """Every name the formula reads."""

    def evaluate(self, values: Mapping[str, float]) -> float:
        """The formula's value; ``FormulaError`` for a missing name or a math error."""
        missing = sorted(self.names - set(values))
        if missing:
            raise FormulaError(f"formula {self.source!r}: no value for {', '.join(missing)} "
                               f"(have: {', '.join(sorted(values)) or 'none'})")
        try:
            result = _eval(self.tree, values)
        except ZeroDivisionError:
            raise FormulaError(f"formula {self.source!r}: division by zero with "
                               f"{_show(values, self.names)}") from None
        except (ValueError, OverflowError) as e:
            raise FormulaError(f"formula {self.source!r}: math error ({e}) with "
                               f"{_show(values, self.names)}") from None
        if not math.isfinite(result):
            raise FormulaError(f"formula {self.source!r}: the result is {result} with "
                               f"{_show(values, self.names)}")
        return result


def _show(values: Mapping[str, float], names: frozenset[str]) -> str:
    shown = ", ".join(f"{n}={values[n]:g}" for n in sorted(names))
    return shown or "no names"


def parse_formula(source: str, allowed_names: Iterable[str] | None = None) -> Formula:
    """Parse ``source``; with ``allowed_names``, every name it reads must be one of them.

    Raises ``FormulaError`` naming the formula and the problem (syntax, unknown function, wrong
    number of arguments, unknown name).
    """
    if not isinstance(source, str) or not source.strip():
        raise FormulaError(f"formula {source!r} is empty; write e.g. '0.5 * a + 0.5 * b'")
    if len(source) > MAX_LENGTH:
        raise FormulaError(f"formula of {len(source)} characters is longer than {MAX_LENGTH}; "
                           "simplify it")
    try:
        tree = _Parser(source).parse()
    except RecursionError:
        raise FormulaError(f"formula {source[:80]!r}...: nested too deeply; simplify it") from None
    names = frozenset(_names(tree))
    if allowed_names is not None:
        allowed = set(allowed_names)
        unknown = sorted(names - allowed)
        if unknown:
            raise FormulaError(f"formula {source!r}: unknown name(s) {', '.join(unknown)}; the "
                               f"names are: {', '.join(sorted(allowed)) or '(none)'}")
    return Formula(source=source, tree=tree, names=names)
