"""The build of arft's CPU kernels: one shared library per source in ``csrc/``, compiled once per
machine and cached.

Each source is its own library, so a file that fails to compile turns off only its own ops
(``build_all`` says which and why). A library is keyed by its source, the headers, the flags,
the compiler and the CPU's feature flags, and lands in ``$ARFT_KERNEL_CACHE`` (default
``~/.cache/arft/kernels``) by an atomic rename: concurrent processes never load a half-written
file. ``python -m arft.cpu build`` runs this ahead of time (``make setup`` does); docs/cpu.md has
the whole story.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Sequence

CSRC = Path(__file__).resolve().parent / "csrc"
LIBRARIES = ("decode_attention", "decode_attention_avx2", "small_ops", "train_attention", "train_ops")
"""One library per source ``csrc/<name>.cpp``, in the order they are reported."""
SOURCES = tuple(CSRC / f"{name}.cpp" for name in LIBRARIES)
HEADERS = (CSRC / "arft_cpu.h", CSRC / "vec.h")
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC", "-std=c++17")
"""``-ffp-contract=off``: no multiply-add fused where PyTorch rounds the product first."""
AVX2_FLAGS = tuple(f for f in FLAGS if f != "-march=native") + ("-march=x86-64-v3",)
"""The build for a CPU with AVX2 and FMA but no AVX-512 (``compile_to``: tests and benchmarks)."""
CACHE = "~/.cache/arft/kernels"
"""Where the libraries go unless ``$ARFT_KERNEL_CACHE`` names another folder."""


class Built(NamedTuple):
    """One library's build: its file, or why there is none."""

    name: str
    path: Path | None
    error: str | None = None


def cpu_reason() -> str | None:
    """Why this CPU cannot run any kernel (``None``: it can): they need x86-64 with AVX-512, or
    AVX2 and FMA (float32 decode attention only)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"they need an x86-64 CPU with AVX-512 or AVX2 (this is {platform.machine()})"
    flags = cpu_flags()
    if {"avx512f", "avx512bw", "avx512dq"} <= flags or {"avx2", "fma"} <= flags:
        return None
    return "this CPU has neither AVX-512 nor AVX2 with FMA"


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux's ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def compiler() -> str:
    """The C++ compiler: ``$CXX``, else ``c++`` or ``g++`` on the PATH."""
    found = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not found:
        raise RuntimeError("no C++ compiler found (install g++, or set CXX to a C++17 compiler with OpenMP)")
    return found


def cache_dir() -> Path:
    """The folder the libraries are cached in: ``$ARFT_KERNEL_CACHE``, else ``~/.cache/arft/kernels``."""
    return Path(os.environ.get("ARFT_KERNEL_CACHE", CACHE)).expanduser()


def build(name: str) -> Path:
    """The library of ``csrc/<name>.cpp`` for this compiler and CPU: built into the cache once.
    Raises ``RuntimeError`` (or ``OSError``) where it cannot be built."""
    cxx = _compiler_id()
    source = CSRC / f"{name}.cpp"
    parts = [source.read_bytes(), *(h.read_bytes() for h in HEADERS), " ".join(FLAGS).encode(), cxx.encode(),
             " ".join(sorted(cpu_flags())).encode()]
    key = hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]
    target = cache_dir() / f"{name}-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so")
    os.close(fd)
    try:
        compile_to(Path(tmp), FLAGS, (source,))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def build_all(names: Sequence[str] = LIBRARIES) -> list[Built]:
    """Every library built (or found in the cache), side by side: each one's file or error."""
    reason = cpu_reason()
    if reason is not None:
        return [Built(name, None, reason) for name in names]

    def one(name: str) -> Built:
        try:
            return Built(name, build(name))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            return Built(name, None, str(exc))

    # the compiler is the slow part and runs in its own process: one thread per library suffices
    with ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 1))) as pool:
        return list(pool.map(one, names))


def compile_to(out: Path, flags: Sequence[str] = FLAGS, sources: Sequence[Path] = SOURCES) -> None:
    """Compile ``sources`` (all of them by default: one library with every function) into the
    library ``out`` with ``flags``: other targets than this CPU, e.g. ``AVX2_FLAGS`` for an AVX2
    machine, as the tests and ``bench/decode_attention.py`` do."""
    cxx = compiler()
    done = subprocess.run([cxx, *flags, "-o", str(out), *map(str, sources)], capture_output=True, text=True,
                          timeout=300)
    if done.returncode:
        names = ", ".join(f"{CSRC.name}/{s.name}" for s in sources)
        raise RuntimeError(f"building {names} with {cxx} failed (exit {done.returncode}): "
                           f"{done.stderr.strip()[-600:]}; set CXX to a C++17 compiler with OpenMP")


def _compiler_id() -> str:
    """The compiler's path and its ``--version``: a new compiler is a new build."""
    cxx = compiler()
    return cxx + "\n" + subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
