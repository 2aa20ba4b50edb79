"""A rich progress display for commands that run many rollouts."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from arft.records import Rollout


class RolloutProgress:
    """Spinner while loading, then a bar over rollouts with a running mean reward."""

    def __init__(self, console: Console, total: int) -> None:
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn("{task.fields[extra]}"), console=console, transient=False)
        self._task = self._progress.add_task("starting", total=total, extra="")
        self._rewards: list[float] = []
        self._failed = 0

    def __enter__(self) -> "RolloutProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()

    def status(self, text: str) -> None:
        self._progress.update(self._task, description=text)

    def done(self, rollout: Rollout) -> None:
        if rollout.score is not None and rollout.score.error is None:
            self._rewards.append(rollout.score.score)
        if rollout.status == "infra_failed":
            self._failed += 1
        mean = sum(self._rewards) / len(self._rewards) if self._rewards else float("nan")
        extra = f"reward {mean:.3f}" + (f"  infra-failed {self._failed}" if self._failed else "")
        self._progress.update(self._task, advance=1, extra=extra)
