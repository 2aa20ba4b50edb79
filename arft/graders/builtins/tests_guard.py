"""What ``tests_pass`` keeps out of the copy it runs the tests in: the agent's own pytest
configuration, interpreter start-up hooks, plugins and test files.

An agent can make every test "pass" without touching the code under test: a ``conftest.py`` whose
hook rewrites each report to ``passed``, a ``pytest.ini`` (or ``[tool:pytest]`` in setup.cfg,
``[pytest]`` in tox.ini, ``[tool.pytest*]`` in pyproject.toml) whose ``addopts`` or
``python_files`` changes what runs, a ``sitecustomize.py``/``usercustomize.py`` or ``.pth`` file
run at interpreter start, a ``*.dist-info`` that registers a ``pytest11`` plugin, a module that
shadows pytest itself (``pytest.py``, ``_pytest/``, ``pluggy``), or extra test files that pad the
passed fraction. ``neutralize`` finds each of these in the copy and puts the task's pristine
state back:

* **pristine** files are the task's ``tests`` (written by the grader) and the files of the
  template the rollout's workspace was copied from (``arft.sandbox.workspace.template_of``);
* a guarded file the agent changed is restored from the template, one it added is removed, one
  it deleted is restored; each is a ``Tampering`` (reported as ``hack:<kind>`` flags);
* bytecode caches (``__pycache__``, ``*.pyc``, ``.pytest_cache``) are removed silently: running
  the tests in the shell leaves them, and a planted ``.pyc`` could stand in for a test module;
* when the task gives ``tests``, other test modules (``test_*.py``, ``*_test.py``) the agent
  added are removed silently (writing tests is good practice; they just do not count), and ones
  of the template it changed or deleted are restored (flagged). Without a known template every
  test module that is not in ``tests`` counts as added.

Without ``tests`` and without a known template nothing is pristine: config files are left as they
are (the workspace's own tests run as the agent left them), and only the tricks no task needs
(start-up hooks, plugin metadata, pytest shadows) are removed and flagged.

What this does not stop: code under test that, once imported by the tests, patches pytest from
inside (pair ``tests_pass`` with ``ast_guard``), and test files matching a custom
``python_files`` pattern of the task's config (only the default patterns are recognized).
"""

from __future__ import annotations

import configparser
import fnmatch
import os
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

Kind = Literal["pytest_conftest", "pytest_config", "startup_hook", "pytest_plugin",
               "shadows_pytest", "tests_modified"]

CONFIG_FILES = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml"})
SECTION_FILES = {"tox.ini": "pytest", "setup.cfg": "tool:pytest", "pyproject.toml": "tool.pytest"}
STARTUP_HOOKS = frozenset({"sitecustomize", "usercustomize"})
# pytest's own import closure: a module of these names ahead of site-packages replaces pytest.
PYTEST_MODULES = frozenset({"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py",
                            "exceptiongroup", "tomli", "pygments", "colorama"})
MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")
CACHES = frozenset({"__pycache__", ".pytest_cache"})
TEST_PATTERNS = ("test_*.py", "*_test.py")


@dataclass(frozen=True)
class Tampering:
    """One guarded path the agent added, changed or deleted, and what was done about it."""

    path: str
    kind: Kind
    action: Literal["removed", "restored"]

    @property
    def flag(self) -> str:
        return f"hack:{self.kind}"


def safe_write(root: Path, rel: PurePosixPath, data: bytes) -> None:
    """Write ``root/rel`` never following a link the agent planted (we may be root)."""
    here = root
    for part in rel.parts[:-1]:
        here = here / part
        if here.is_symlink() or (os.path.lexists(here) and not here.is_dir()):
            here.unlink()
        here.mkdir(exist_ok=True)
    target = here / rel.parts[-1]
    _remove(target)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _module_name(name: str) -> str | None:
    return name.split(".", 1)[0] if name.endswith(MODULE_SUFFIXES) else None


def _pytest_section(path: Path, name: str) -> object:
    """The pytest part of a shared config file: None when it has none, the raw bytes when it
    does not parse (pytest would fail on it too)."""
    raw = path.read_bytes()
    try:
        if name == "pyproject.toml":
            tool = tomllib.loads(raw.decode()).get("tool", {})
            found = {k: v for k, v in tool.items() if k == "pytest" or k.startswith("pytest")}
            return found or None
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.read_string(raw.decode())
        section = SECTION_FILES[name]
        return dict(parser.items(section)) if parser.has_section(section) else None
    except (ValueError, configparser.Error, UnicodeDecodeError):
        return raw


def _kind(rel: PurePosixPath, path: Path, strict_tests: bool) -> Kind | None:
    """Which guarded kind ``path`` is (a file, a link, or a plugin-metadata or package folder)."""
    name = rel.name
    if path.is_dir() and not path.is_symlink():
        entry_points = path / "entry_points.txt"
        if name.endswith((".dist-info", ".egg-info")) and entry_points.is_file() \
                and b"pytest11" in entry_points.read_bytes():
            return "pytest_plugin"
        if name in PYTEST_MODULES and (path / "__init__.py").exists():
            return "shadows_pytest"
        return None
    if name == "conftest.py":
        return "pytest_conftest"
    if name in CONFIG_FILES or (name in SECTION_FILES and (
            path.is_symlink() or _pytest_section(path, name) is not None)):
        return "pytest_config"
    if name.endswith(".pth") or _module_name(name) in STARTUP_HOOKS:
        return "startup_hook"
    if _module_name(name) in PYTEST_MODULES or (path.is_symlink() and name in PYTEST_MODULES):
        return "shadows_pytest"
    if strict_tests and any(fnmatch.fnmatch(name, p) for p in TEST_PATTERNS):
        return "tests_modified"
    return None


def _guarded(rel: PurePosixPath, path: Path, pristine: Path | None,
             strict_tests: bool) -> Kind | None:
    """``_kind`` of the path, or of its pristine counterpart (a pytest section the agent
    deleted from setup.cfg is a config change too)."""
    kind = _kind(rel, path, strict_tests)
    if kind is None and pristine is not None and rel.name in SECTION_FILES \
            and pristine.is_file() and not pristine.is_symlink():
        kind = _kind(rel, pristine, strict_tests)
    return kind


def _same(path: Path, pristine: Path, name: str) -> bool:
    """Whether ``path`` matches its pristine counterpart (for a shared config file: its pytest
    section; for a folder: it exists in the template, declaring the same entry points)."""
    if not os.path.lexists(pristine):
        return False
    if path.is_symlink() or pristine.is_symlink():
        return path.is_symlink() and pristine.is_symlink() and \
            os.readlink(path) == os.readlink(pristine)
    if path.is_dir() or pristine.is_dir():
        return path.is_dir() and pristine.is_dir() and _entry_points(path) == _entry_points(pristine)
    if name in SECTION_FILES:
        return _pytest_section(path, name) == _pytest_section(pristine, name)
    return path.read_bytes() == pristine.read_bytes()


def _entry_points(folder: Path) -> bytes | None:
    try:
        return (folder / "entry_points.txt").read_bytes()
    except OSError:
        return None


def _walk(root: Path) -> list[PurePosixPath]:
    """Every path below ``root`` (links not followed), folders before what they hold; caches
    and virtual environments (inert: the grader's command runs its own interpreter) are not
    entered."""
    found: list[PurePosixPath] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        base = PurePosixPath(*Path(folder).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if d not in CACHES
                         and not os.path.isfile(os.path.join(folder, d, "pyvenv.cfg")))
        found.extend(base / n for n in [*dirs, *sorted(files)])
    return found


def remove_caches(copy: Path) -> None:
    """Bytecode and pytest caches: produced by any earlier test run, and never pristine."""
    for folder, dirs, files in os.walk(copy, followlinks=False):
        for d in [d for d in dirs if d in CACHES]:
            _remove(Path(folder) / d)  # a link named __pycache__ goes, not what it points at
            dirs.remove(d)
        for f in files:
            if f.endswith(".pyc"):
                (Path(folder) / f).unlink()


def neutralize(copy: Path, template: Path | None,
               supplied: frozenset[PurePosixPath]) -> list[Tampering]:
    """Put the pristine test setup back in ``copy`` (see the module docstring); what was found.

    ``supplied``: the paths the grader wrote from the task's ``tests`` (pristine by definition).
    """
    remove_caches(copy)
    strict = bool(supplied)
    found: list[Tampering] = []
    for rel in _walk(copy):
        path = copy / rel
        if rel in supplied or not os.path.lexists(path):  # gone: inside a removed folder
            continue
        pristine = template / rel if template is not None else None
        kind = _guarded(rel, path, pristine, strict)
        if kind is None or (pristine is None and not strict
                            and kind in ("pytest_conftest", "pytest_config")):
            continue  # nothing pristine to hold the workspace's own config against
        if pristine is not None and _same(path, pristine, rel.name):
            continue
        if pristine is not None and pristine.is_file() and not pristine.is_symlink():
            safe_write(copy, rel, pristine.read_bytes())
            found.append(Tampering(str(rel), kind, "restored"))
            continue
        _remove(path)
        if kind != "tests_modified":  # an added test module is not a hack: it just does not count
            found.append(Tampering(str(rel), kind, "removed"))
    if template is not None:
        found.extend(_restore_deleted(copy, template, supplied, strict))
    return found


def _restore_deleted(copy: Path, template: Path, supplied: frozenset[PurePosixPath],
                     strict: bool) -> list[Tampering]:
    """Guarded files of the template that the agent deleted (or replaced by a folder)."""
    found = []
    for rel in _walk(template):
        pristine = template / rel
        if rel in supplied or pristine.is_symlink() or not pristine.is_file():
            continue
        kind = _kind(rel, pristine, strict)
        if kind is None or os.path.isfile(copy / rel):
            continue
        safe_write(copy, rel, pristine.read_bytes())
        found.append(Tampering(str(rel), kind, "restored"))
    return found
