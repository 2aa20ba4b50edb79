"""Import a Python file by path as a module of its own: python tools, the examples' own modules
(tools.py, services.py, bench_metrics.py), benchmarks and tests share this one mechanism."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from arft.errors import ArftError


class NotAPythonFile(ArftError):
    """The path cannot be imported as Python source (no loader for it)."""


def load_file(path: Path | str, name: str) -> ModuleType:
    """Execute ``path`` as module ``name`` and return it.

    The module is registered in ``sys.modules`` while it runs (dataclasses, pydantic and pickling
    look their module up there) and removed again when it fails. ``name`` must be unique to the
    file: several examples have a ``tools.py``. Raises ``NotAPythonFile`` for a path that cannot
    be imported as Python; the file's own exceptions propagate.
    """
    spec = importlib.util.spec_from_file_location(name, Path(path))
    if spec is None or spec.loader is None:
        raise NotAPythonFile(f"{path} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
