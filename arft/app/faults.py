"""Fault injection for kill tests: a training process that SIGKILLs itself at a named moment.

Test-only and inert unless a caller passes ``Fault.hook`` as ``Hooks.point`` (and wraps the
grader with ``Fault.grader`` for the ``grading`` point): no environment variable, option or global
switches it on, so an ordinary ``arft train`` never reaches it. The kill tests
(``tests/integration/test_kill_resume.py``) and ``bench/kill_soak.py`` run a child process with
a ``Fault`` written as ``POINT:STEP[:NTH]`` (``Fault.parse``).

The points, each with the number of the step it belongs to:

  step        a training step starts (nothing of it recorded yet)
  generation  a training rollout was generated, graded and stored (called once per rollout)
  grading     a training rollout is being graded (inside the grader: its score does not exist yet)
  update      every rollout of the step is stored; the weights are about to change
  metrics     a metric row reached one sink (store, metrics.jsonl, ...) but not yet the next one
  eval        an evaluation rollout was stored (once per rollout)
  checkpoint  a checkpoint file was written into the temporary folder (NTH 1-4), or the folder
              was renamed into place but not yet made ``latest`` (NTH 5)
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arft.graders.base import Grader, close_grader
from arft.records import Score

if TYPE_CHECKING:  # the app's modules import lazily here
    from arft.app.session import Hooks, TrainResult
    from arft.config import JobSpec
    from arft.tracing.run_dir import RunDir

POINTS = ("step", "generation", "grading", "update", "metrics", "eval", "checkpoint")


@dataclass
class Fault:
    """Kill this process with SIGKILL the ``nth`` time ``point`` is reached during ``step``."""

    point: str
    step: int
    nth: int = 1
    seen: int = field(default=0, init=False)
    """How often the point has been reached during the step so far."""
    rolling_out: int | None = field(default=None, init=False)
    """The training step whose rollouts are running (what the ``grading`` point belongs to)."""

    def __post_init__(self) -> None:
        if self.point not in POINTS:
            raise ValueError(f"fault point {self.point!r} is not one of {', '.join(POINTS)}")
        if self.step < 0 or self.nth < 1:
            raise ValueError(f"fault {self}: the step must be >= 0 and nth >= 1")

    @classmethod
    def parse(cls, text: str) -> "Fault":
        """``POINT:STEP`` or ``POINT:STEP:NTH`` (e.g. ``checkpoint:5:2``: after the second file of
        the step-5 checkpoint)."""
        parts = text.split(":")
        if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts[1:]):
            raise ValueError(f"fault {text!r}: write it as POINT:STEP[:NTH], e.g. generation:3:2")
        return cls(parts[0], *(int(p) for p in parts[1:]))

    def __str__(self) -> str:
        return f"{self.point}:{self.step}:{self.nth}"

    def hook(self, point: str, step: int) -> None:
        """``Hooks.point``: count the moments that match; kill the process at the ``nth``."""
        if point == "step":
            self.rolling_out = step
        elif point == "update":
            self.rolling_out = None
        if point == self.point and step == self.step:
            self.seen += 1
            if self.seen == self.nth:
                kill_self()

    def grader(self, grader: Grader) -> Grader:
        """``grader``, with the ``grading`` point reached before each training rollout's grade."""
        return _KillingGrader(grader, self)


def kill_self() -> None:
    """SIGKILL this process (output flushed first, so the log shows what happened before it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class _KillingGrader:
    """A grader that reaches the ``grading`` point, then grades as the wrapped one does."""

    def __init__(self, inner: Grader, fault: Fault) -> None:
        self.name = inner.name
        self._inner, self._fault = inner, fault

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        if self._fault.rolling_out is not None:
            self._fault.hook("grading", self._fault.rolling_out)
        return await self._inner.grade(sample, item)

    async def aclose(self) -> None:
        await close_grader(self._inner)


async def train_with_fault(job: JobSpec, run_dir: RunDir | Path, fault: Fault | None, *, resume: bool = False,
                           grader: Grader | None = None, hooks: Hooks | None = None,
                           **train_kw: Any) -> TrainResult:
    """``arft.app.train.train`` with ``fault`` armed (None: an ordinary run). ``grader``: the one
    to wrap for the ``grading`` point; by default the job's own. ``hooks``: progress callbacks
    (their ``point`` is replaced by the fault's). Returns the ``TrainResult`` when the fault was
    never reached (the step had no such moment)."""
    from dataclasses import replace

    from arft.app.session import Hooks
    from arft.app.train import train
    from arft.graders.registry import build_grader

    hooks = hooks or Hooks()
    if fault is None:
        return await train(job, run_dir, resume=resume, grader=grader, hooks=hooks, **train_kw)
    inner = grader if grader is not None else build_grader(job.rl.grader, job.base_dir)
    try:
        return await train(job, run_dir, resume=resume, grader=fault.grader(inner),
                           hooks=replace(hooks, point=fault.hook), **train_kw)
    finally:
        if grader is None:
            await close_grader(inner)
