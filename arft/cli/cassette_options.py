"""``--record DIR``, ``--replay DIR`` and ``--replay-miss`` of ``arft eval`` and ``arft train``.

The flags become one ``--set rollout.tool_cassette={...}`` override (the job's own cassette
settings with the flags applied), so the job is validated as if the file said it and a resumed
training run (which reloads the ``--set`` it started with) keeps recording or replaying.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import typer
from rich.console import Console

from arft.cli.console import fail
from arft.config import load_job
from arft.tools.cassette import CassetteCounts


@dataclass(frozen=True)
class CassetteFlags:
    """The cassette flags as given (None: not given)."""

    record: Path | None = None
    replay: Path | None = None
    miss: str | None = None

    @property
    def given(self) -> bool:
        return self.record is not None or self.replay is not None or self.miss is not None


def record_option() -> Any:
    return typer.Option(None, "--record", metavar="DIR",
                        help="Record every tool call into DIR/cassette.jsonl (rollout.tool_cassette: record); "
                             "with --replay: where the live calls of --replay-miss live go.")


def replay_option() -> Any:
    return typer.Option(None, "--replay", metavar="DIR",
                        help="Answer every tool call from DIR's cassette (a recorded run's folder or a "
                             ".jsonl file); no tool runs or starts.")


def replay_miss_option() -> Any:
    return typer.Option(None, "--replay-miss", metavar="fail|live",
                        help="A call the cassette lacks: fail (an infra-failed rollout, counted; default) "
                             "or live (call the real tool).")


def cassette_overrides(job_file: Path, overrides: Sequence[str], flags: CassetteFlags) -> list[str]:
    """The ``--set`` text the flags amount to ([] when none is given)."""
    if not flags.given:
        return []
    if flags.miss is not None and flags.miss not in ("fail", "live"):
        fail(f"--replay-miss must be fail or live, not '{flags.miss}'")
    spec = load_job(job_file, overrides).rollout.tool_cassette.model_dump(exclude_defaults=True)
    if flags.replay is not None:
        spec |= {"mode": "replay", "path": str(flags.replay.resolve())}
        if flags.record is not None:
            spec["record_path"] = str(flags.record.resolve())
    elif flags.record is not None:
        spec |= {"mode": "record", "path": str(flags.record.resolve())}
    if flags.miss is not None:
        if spec.get("mode") != "replay":
            fail("--replay-miss needs --replay DIR (or rollout.tool_cassette: replay in the job)")
        spec["miss"] = flags.miss
    return [f"rollout.tool_cassette={json.dumps(spec)}"]


def print_counts(console: Console, counts: CassetteCounts | None) -> None:
    """One line of what the cassette did; misses in red (never silent)."""
    if counts is None:
        return
    style = "bold red" if counts.misses else "green"
    console.print(f"tool cassette: {counts.recorded} recorded, {counts.replayed} replayed, "
                  f"[{style}]{counts.misses} misses[/], {counts.live} live fallbacks")


def counts_of(metrics: dict[str, float]) -> CassetteCounts | None:
    """The counts in a training step's metrics (``cassette/*``), if the run had a cassette."""
    if "cassette/misses" not in metrics:
        return None
    return CassetteCounts(**{k: int(metrics.get(f"cassette/{k}", 0)) for k in
                             ("recorded", "replayed", "misses", "live")})


__all__ = ["CassetteFlags", "cassette_overrides", "counts_of", "print_counts", "record_option",
           "replay_miss_option", "replay_option"]
