"""The LangGraph example's two tools as plain functions: a price list the 135M model cannot know
(made-up products) and exact arithmetic it cannot do in its head."""

from __future__ import annotations

import ast
import operator

# A fictional shop: the model has never seen these names, so only the tool knows the prices.
PRICES = {
    "Brimble": "24.90", "Zorvex": "17.35", "Quillip": "8.75", "Tandor": "43.10", "Mossel": "12.60",
    "Fenwick": "31.45", "Glimmet": "6.20", "Parloo": "58.05", "Skettle": "19.99", "Vantry": "27.80",
    "Hobbin": "14.15", "Drozzle": "36.40", "Kelpin": "9.65", "Rundle": "22.30", "Wexley": "48.70",
    "Plovet": "11.05", "Craddle": "65.25", "Nimbet": "4.85", "Torvel": "29.60", "Yarrow": "53.90",
    "Lumbago": "71.15",
}

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.USub: operator.neg}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError("only numbers and + - * / ( ) are allowed")


def price(item: str) -> str:
    """Look up the price of one product in the shop's price list.

    Args:
        item: The product's name, e.g. "Brimble".
    """
    name = item.strip().strip(".?!\"'").title()
    if name not in PRICES:
        return f"Error: no product named {item!r}"
    return PRICES[name]


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: The expression, e.g. "347 * 29" or "(12 + 5) * 3".
    """
    try:
        value = _eval(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as e:
        return f"Error: {e}"
    if isinstance(value, float):
        value = int(value) if value.is_integer() else round(value, 4)
    return str(value)
