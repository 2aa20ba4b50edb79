"""What every benchmark shares: where the repository is, progress logging, two or more arms timed
in turns with medians, peak RSS, a printed table, and ``record`` (a result as JSON under
``bench/results/NAME.json``, stamped with the commit, the date, the CPU and the versions).

Benchmarks run as modules from the repository root (``python -m bench run NAME``), so ``arft`` and
``bench`` import as packages and no benchmark touches ``sys.path``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: examples, the embedded job files and ``bench/`` hang off it."""
OUT = ROOT / "bench" / "out"
"""Scratch output of runs (run directories, raw logs); ignored by git."""
RESULTS = ROOT / "bench" / "results"
"""Recorded results, one JSON file per benchmark; ``python -m bench docs`` renders them."""
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")
"""The flags that decide which of arft's CPU paths run (``docs/cpu.md``)."""


def log(message: str) -> None:
    """A progress line on stderr with the wall-clock time, so a long run shows where it is."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def peak_rss_gb() -> float:
    """This process's peak resident set size so far, in GB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def children_peak_rss_gb() -> float:
    """The largest peak RSS among finished child processes, in GB."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6


def alternate(arms: Mapping[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run each arm once per round, in turns, ``repeats`` rounds; each call returns its measure.

    Taking turns spreads a shared machine's slow spells over all arms instead of one.
    """
    measures: dict[str, list[float]] = {name: [] for name in arms}
    for round_ in range(repeats):
        for name, arm in arms.items():
            measures[name].append(arm())
            log(f"round {round_ + 1}/{repeats} {name}: {measures[name][-1]:.4g}")
    return measures


def medians(measures: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """The median of each arm's measures."""
    return {name: statistics.median(values) for name, values in measures.items()}


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, columns padded to their widest cell."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Stamp:
    """Where and on what a result was measured."""

    commit: str
    date: str
    cpu: str
    cpu_flags: list[str]
    python: str
    torch: str | None
    load_avg_1min: float | None
    """The machine's 1-minute load average when the result was recorded: on a shared 2-core
    machine, a load well above 2 means other jobs shared the cores and timings are pessimistic."""


def stamp() -> Stamp:
    """The stamp of a result measured now, in this process, on this machine."""
    model, flags = _cpu()
    return Stamp(commit=_commit(), date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 cpu=model, cpu_flags=[f for f in CPU_FLAGS if f in flags], python=platform.python_version(),
                 torch=_torch_version(), load_avg_1min=_load())


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not available on this platform
        return None


def stamp_cpu_flags() -> list[str]:
    """Which of ``CPU_FLAGS`` this machine's CPU has."""
    return [f for f in CPU_FLAGS if f in _cpu()[1]]


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"  # not a git checkout (an sdist, a copied tree)
    return head + ("+dirty" if dirty else "")


def _cpu() -> tuple[str, set[str]]:
    """The CPU's model name and flags from /proc/cpuinfo (empty where there is none)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return model, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value:
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            break  # every core lists the same flags
    return model, flags


def _torch_version() -> str | None:
    # The installed distribution's version: importing torch just for the stamp costs seconds, and
    # a benchmark that trains in subprocesses never imports it here.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def _own_argv() -> list[str]:
    """The benchmark's own arguments: without ``run NAME`` of ``python -m bench run NAME ...``."""
    args = sys.argv[1:]
    return args[2:] if args[:1] == ["run"] else args


def record(name: str, result: Mapping[str, Any], *, argv: Sequence[str] | None = None,
           results: Path = RESULTS) -> Path:
    """Write ``result`` to ``results/NAME.json`` with its stamp and the command's arguments.

    ``result`` holds the benchmark's own figures (JSON data); the latest run of a benchmark
    replaces its file, so the committed file is the figure the docs show; ``docs/benchmarks.md`` is
    rendered again from the results at once (where ``results`` is the repository's), so the page
    never lags behind them.
    """
    body = {"name": name, "stamp": asdict(stamp()), "argv": list(_own_argv() if argv is None else argv),
            "result": dict(result)}
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{name}.json"
    path.write_text(json.dumps(body, indent=2, default=str) + "\n")
    log(f"recorded {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if results == RESULTS:
        from bench.lib.docs import write_docs  # docs imports this module: imported here, not at the top

        log(f"wrote {write_docs().relative_to(ROOT)}")
    return path
