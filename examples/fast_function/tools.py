"""The fast_function example's tool: run a candidate ``fast`` against ``slow`` in the sandbox.

``run_benchmark`` runs ``harness.benchmark`` (the same checks and timing the grader uses) in a
fresh sandboxed interpreter (``arft.sandbox.pool.run_fresh``: no network, the trainer's files
hidden, memory and time limits), never in the trainer's process: the code is the model's.
"""

from __future__ import annotations

from pathlib import Path

from arft.sandbox import CallLimits, SandboxedFunction, run_fresh
from arft.tools.base import ToolContext

HARNESS = Path(__file__).resolve().with_name("harness.py")
LIMITS = CallLimits(timeout_s=30.0, memory_mb=1024, disk_mb=64, max_processes=64)


async def run_benchmark(code: str, ctx: ToolContext) -> str:
    """Check that your fast function returns what slow returns, and time both.

    Args:
        code: Python code defining fast, e.g. "def fast(xs): return sorted(xs)".
    """
    function = SandboxedFunction(HARNESS.read_text(encoding="utf-8"), str(HARNESS), "benchmark",
                                 LIMITS)
    result = await run_fresh(function, code, ctx.item)
    if not result.ok:
        # The model sees why (a timeout, a crash); the rollout goes on.
        raise RuntimeError(f"the benchmark did not finish: {result.error}")
    return str(result.value)
