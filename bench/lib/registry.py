"""The benchmarks in ``bench/``, found by reading their source (no import: ``list`` stays instant
and never loads torch).

A benchmark is a module of the ``bench`` package with a top-level ``main(argv)``. It declares,
as literals at module level:

- its claim: the first line of its docstring, what it measures;
- ``QUICK``: the arguments of a small run for ``python -m bench run --quick``;
- ``NEEDS``: what it needs beyond a plain CPU: a CPU feature (``"avx512"``, ``"amx"``: run
  where the CPU has it) or a GPU, vLLM or Ray (``"gpu"``, ``"vllm"``, ``"ray"``: they start
  servers or clusters, so ``--quick`` always leaves them out); ``SLOW = True`` when even its
  quick arguments take minutes of CPU. ``--quick`` skips what it cannot run and prints why.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from bench.lib import harness

BENCH = Path(__file__).resolve().parents[1]
CPU_NEEDS = {"avx512": "avx512f", "amx": "amx_tile"}
"""Needs that are CPU features, and the /proc/cpuinfo flag of each; other needs never run quick."""
NOT_BENCHMARKS = {"__init__", "__main__"}


@dataclass(frozen=True)
class Benchmark:
    """One runnable benchmark as its source declares it."""

    name: str
    claim: str
    quick: list[str] | None = None
    needs: frozenset[str] = field(default_factory=frozenset)
    slow: bool = False

    def skip_reason(self, cpu_flags: frozenset[str] | None = None) -> str | None:
        """Why ``run --quick`` leaves it out, or None when it runs. A CPU feature it needs is
        looked up in ``cpu_flags`` (this machine's by default); a GPU, vLLM or Ray always skips
        (they start servers or clusters: minutes, not a quick check)."""
        if self.quick is None:
            return "no QUICK arguments"
        flags = cpu_flags if cpu_flags is not None else frozenset(harness.stamp_cpu_flags())
        missing = sorted(n for n in self.needs if CPU_NEEDS.get(n) not in flags)
        if missing:
            return "needs " + ", ".join(missing)
        if self.slow:
            return "slow: minutes of CPU even at its quick size"
        return None


def benchmarks(folder: Path = BENCH) -> list[Benchmark]:
    """Every module of ``folder`` with a top-level ``main``, by name."""
    found = []
    for path in sorted(folder.glob("*.py")):
        if path.stem in NOT_BENCHMARKS:
            continue
        found_one = read(path)
        if found_one is not None:
            found.append(found_one)
    return found


def read(path: Path) -> Benchmark | None:
    """The benchmark ``path`` declares, or None for a module without ``main``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    if not any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
        return None
    literals: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in {"QUICK", "NEEDS", "SLOW"} and node.value:
                    literals[target.id] = ast.literal_eval(node.value)
    doc = ast.get_docstring(tree) or ""
    quick = literals.get("QUICK")
    return Benchmark(name=path.stem, claim=doc.strip().splitlines()[0] if doc.strip() else "",
                     quick=list(quick) if isinstance(quick, (list, tuple)) else None,
                     needs=frozenset(literals.get("NEEDS") or ()),  # type: ignore[arg-type]
                     slow=bool(literals.get("SLOW", False)))
