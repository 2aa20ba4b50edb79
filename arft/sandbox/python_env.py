"""How the sandbox runs this Python interpreter: the binary, the folders it may read (its
installation, site-packages, the ``arft`` package), its ``sys.path``, and every other top-level
folder hidden behind an empty tmpfs."""

from __future__ import annotations

import os
import site
import sys
from dataclasses import dataclass, field
from pathlib import Path

from arft.sandbox.command import DEFAULT_PATH

_SYSTEM_DIRS = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev",
                          "proc", "sys", "tmp"})
# One thread per numeric library: each call is one worker on one core.
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "NUMEXPR_MAX_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1"}


@dataclass(frozen=True)
class PythonEnvironment:
    """How the sandbox runs this interpreter: the binary, what it may read, what it imports."""

    executable: str
    readable: tuple[Path, ...]
    sys_path: tuple[str, ...]
    hidden: tuple[Path, ...]
    variables: dict[str, str] = field(default_factory=dict)
    """Environment variables the sandboxed interpreter gets (besides the sandbox's clean ones)."""


def current_environment() -> PythonEnvironment:
    """This interpreter, its site-packages and the ``arft`` package, everything else hidden."""
    import arft  # the package itself: importable inside (built-in graders)

    package = Path(arft.__file__).resolve().parent
    sites = [p for p in dict.fromkeys([*site.getsitepackages(), *sys.path])
             if p and ("site-packages" in p or "dist-packages" in p) and os.path.isdir(p)]
    sys_path = [*sites]
    readable = [Path(sys.base_prefix).resolve(), *(Path(p).resolve() for p in sites)]
    if not any(package.is_relative_to(p) for p in readable):
        readable.append(package)
        sys_path.append(str(package.parent))
    # nltk looks in sys.prefix, which inside is the base interpreter's, not this venv's.
    nltk_data = [p for p in (Path(sys.prefix) / "nltk_data", Path.home() / "nltk_data")
                 if p.is_dir()]
    readable.extend(p.resolve() for p in nltk_data)
    variables = dict(_WORKER_ENV)
    if nltk_data:
        variables["NLTK_DATA"] = os.pathsep.join(str(p.resolve()) for p in nltk_data)
    return PythonEnvironment(os.path.realpath(sys.executable), tuple(readable),
                             tuple(sys_path), default_hidden(), variables)


def default_hidden() -> tuple[Path, ...]:
    """Every top-level folder except the system ones a Python program needs."""
    root = Path("/")
    return tuple(sorted(p for p in root.iterdir()
                        if p.name not in _SYSTEM_DIRS and p.is_dir() and not p.is_symlink()))


def interpreter_access() -> tuple[str, list[Path]]:
    """``PATH`` with this interpreter's bin first, and the paths the sandbox must let it read: for
    a command that runs this environment's ``python`` (a tests command, an agent program)."""
    bin_dir = str(Path(sys.executable).parent) if sys.executable else ""
    readable = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.exec_prefix)}
    return (f"{bin_dir}:{DEFAULT_PATH}" if bin_dir else DEFAULT_PATH), sorted(readable)
