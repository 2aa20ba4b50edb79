"""The size limits of the package: no file over 400 lines, no function over 50 lines.

Small files and functions keep every module about one concern and every function readable in
one screen. A function's length is ``end_lineno - lineno + 1`` of its ``def`` (sync or async,
methods and nested functions included; decorators not counted).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "arft"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 50


def oversized(package: Path = PACKAGE) -> list[str]:
    """Every file and function of ``package`` over the limits, one line each."""
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(package.parent).as_posix()
        n_lines = len(text.splitlines())
        if n_lines > MAX_FILE_LINES:
            found.append(f"{name}: {n_lines} lines (max {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name}(): {length} lines "
                                 f"(max {MAX_FUNCTION_LINES})")
    return found


def test_no_file_or_function_is_too_long() -> None:
    found = oversized()
    assert not found, ("split these along their seams (a module per concern, a function per "
                       "step):\n" + "\n".join(found))


def test_the_check_sees_long_files_and_functions(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "long_function.py").write_text(f"class C:\n    async def m(self):\n{body}\n"
                                              .replace("\n    x", "\n        x"))
    (package / "long_file.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    (package / "fine.py").write_text("def f():\n    return 1\n")
    assert oversized(package) == [
        f"pkg/long_file.py: {MAX_FILE_LINES + 1} lines (max {MAX_FILE_LINES})",
        f"pkg/long_function.py:2 m(): {MAX_FUNCTION_LINES + 1} lines (max {MAX_FUNCTION_LINES})",
    ]
