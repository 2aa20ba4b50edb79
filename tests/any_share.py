"""How many of arft's annotated parameters are typed with ``Any``: the share that tests/test_types.py
holds under a ceiling, so that ``Any`` stays where a third-party type is unreachable.

A parameter counts when its annotation mentions ``Any`` anywhere (``Any``, ``dict[str, Any]``,
``Callable[..., Any]``); ``*args`` and ``**kwargs`` are left out, as a pass-through's ``**kwargs: Any``
says nothing about a type we could have named. Run ``python -m tests.any_share`` for the counts per
package.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MENTIONS_ANY = re.compile(r"\bAny\b")


@dataclass
class AnyShare:
    """Annotated parameters and those typed with ``Any``, in total and per package folder."""

    annotated: int = 0
    any_typed: int = 0
    by_package: Counter[str] = field(default_factory=Counter)

    @property
    def share(self) -> float:
        return self.any_typed / self.annotated if self.annotated else 0.0


def _annotations(tree: ast.AST) -> list[ast.expr]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            found += [a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs if a.annotation]
    return found


def count(package: Path = ROOT / "arft") -> AnyShare:
    result = AnyShare()
    for path in sorted(package.rglob("*.py")):
        for annotation in _annotations(ast.parse(path.read_text(), str(path))):
            result.annotated += 1
            if MENTIONS_ANY.search(ast.unparse(annotation)):
                result.any_typed += 1
                result.by_package[str(path.parent.relative_to(package.parent))] += 1
    return result


def main() -> None:
    result = count()
    print(f"{result.any_typed} of {result.annotated} annotated parameters mention Any ({result.share:.1%})")
    for package, n in result.by_package.most_common():
        print(f"{n:5d}  {package}")


if __name__ == "__main__":
    main()
