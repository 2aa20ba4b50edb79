"""The size limits of the package: no function over 50 lines; files over 400 lines only where
``LONG_FILES`` says why.

Small functions keep every function readable in one screen. A function's length is
``end_lineno - lineno + 1`` of its ``def`` (sync or async, methods and nested functions included;
decorators not counted). The file limit is a review signal, not a rule to split by: a file is sized
by its concept, and a cap that picks the seams produces satellite files nobody looks for. A file
that grows past it is either split along a real seam or listed below with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "arft"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 50
LONG_FILES = {
    "arft/engines/transformers/engine.py": "the engine's scheduler, its counters and its step loop are one "
                                           "concept; its helpers already live beside it in the folder",
    "arft/tracing/store.py": "the run store's schema and every query over it: one SQLite file, one class",
}
"""Files allowed over ``MAX_FILE_LINES``, each with the reason (kept short on purpose)."""


def oversized(package: Path = PACKAGE, allowed: dict[str, str] = LONG_FILES) -> list[str]:
    """Every file and function of ``package`` over the limits, one line each (files in ``allowed`` may
    be long)."""
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(package.parent).as_posix()
        n_lines = len(text.splitlines())
        if n_lines > MAX_FILE_LINES and name not in allowed:
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


def test_every_allowed_long_file_exists_and_is_long() -> None:
    """The allowlist stays short and true: a listed file that shrank or moved is dropped from it."""
    for name in LONG_FILES:
        path = PACKAGE.parent / name
        assert path.is_file(), f"{name} is in LONG_FILES but does not exist"
        assert len(path.read_text(encoding="utf-8").splitlines()) > MAX_FILE_LINES, f"{name} is short now"


def test_the_engines_root_keeps_only_what_every_engine_shares() -> None:
    """The root of ``engines/`` holds the protocol, the factory, the grammar and the small backends;
    a big backend's internals go to its own folder (``transformers/``, ``vllm/``), not beside them."""
    root = sorted(p.name for p in (PACKAGE / "engines").glob("*.py"))
    assert len(root) <= 8, f"engines/ root has {len(root)} files: {root}; give a big backend its folder"


STATE_MODULE = "arft/cpu/patch.py"
"""The one module that keeps process-wide mutable state: what the CPU patches replaced, and the
switches and caches the patched code reads at each call."""
SHARED_LOCKS = {
    "arft/graders/text_similarity.py:_WORDNET_LOCK": "nltk's WordNet reader is nltk's own process-wide object",
    "arft/graders/text_similarity.py:_EMBEDDER_LOCK": "the one embedding model the process loads",
}
"""Module-level locks that serialise a third party's process-wide object (state of theirs, not ours)."""
MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque", "WeakKeyDictionary",
                 "WeakValueDictionary", "WeakSet", "local", "ThreadFlag", "Lock", "RLock", "count"}


def module_state(package: Path = PACKAGE) -> list[str]:
    """Module-level mutable objects and ``global`` statements outside ``STATE_MODULE``: a container
    built by a call, one bound to a lower-case name (an UPPER_CASE literal is a constant table),
    a lock or a thread-local; one line each."""
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package.parent).as_posix()
        if name == STATE_MODULE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if value is not None else []
            for target in (t.id for t in targets if isinstance(t, ast.Name)):
                if _mutable(target, value) and f"{name}:{target}" not in SHARED_LOCKS:
                    found.append(f"{name}:{node.lineno} {target}")
        found += [f"{name}:{n.lineno} global {', '.join(n.names)}" for n in ast.walk(tree) if isinstance(n, ast.Global)]
    return found


def _mutable(target: str, value: ast.expr | None) -> bool:
    if isinstance(value, ast.Call):
        func = value.func
        return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) in MUTABLE_CALLS
    literal = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp))
    return literal and target != "__all__" and not target.lstrip("_").isupper()


def test_process_wide_state_lives_in_the_patch_module() -> None:
    found = module_state()
    assert not found, (f"module-level mutable state outside {STATE_MODULE} (pass it in, keep it on an "
                       "object, or move it there with the reason):\n" + "\n".join(found))


def test_the_state_check_sees_containers_locks_and_globals(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "state.py").write_text("import threading\nTABLE = {'a': 1}\ncache = {}\n_LOCK = threading.Lock()\n"
                                      "SEEN: list[int] = list()\n__all__ = ['x']\n"
                                      "def f():\n    global cache\n    cache = {}\n")
    assert module_state(package) == ["pkg/state.py:3 cache", "pkg/state.py:4 _LOCK", "pkg/state.py:5 SEEN",
                                     "pkg/state.py:8 global cache"]
