"""`arft show`: the list of a run's rollouts, one trajectory, and the errors."""

from __future__ import annotations

from pathlib import Path

from arft.records import Rollout, Score
from arft.tracing.store import RunStore
from tests.unit.cli.runner import flat, invoke
from tests.unit.tracing.factories import make_rollout


def stored_run(run: Path) -> list[Rollout]:
    rollouts = [make_rollout("t1", score=Score(score=0.5), calls=[("search", 0)]),
                make_rollout("t2", sample_index=1),
                make_rollout("t3", score=Score(score=0.0, error="boom"))]
    with RunStore(run / "arft.sqlite") as store:
        for r in rollouts:
            store.add_rollout(r)
    return rollouts


def test_show_lists_every_rollout_with_its_reward(tmp_path: Path) -> None:
    graded, ungraded, errored = stored_run(tmp_path)
    out = invoke("show", str(tmp_path))
    assert out.exit_code == 0, out.output
    listing = flat(out.stdout)
    assert f"{graded.trace_id} task=t1 k=0 status=ok reward=0.500 calls=1" in listing
    assert f"{ungraded.trace_id} task=t2 k=1 status=ok reward=— calls=0" in listing
    assert f"{errored.trace_id} task=t3 k=0 status=ok reward=grader error calls=0" in listing


def test_show_prints_one_trajectory(tmp_path: Path) -> None:
    graded = stored_run(tmp_path)[0]
    out = invoke("show", str(tmp_path), graded.trace_id)
    assert out.exit_code == 0, out.output
    assert graded.trace_id in out.stdout and "search" in out.stdout


def test_show_unknown_trace_id_or_folder_exits_2(tmp_path: Path) -> None:
    stored_run(tmp_path / "run")
    out = invoke("show", str(tmp_path / "run"), "trace_nope")
    assert out.exit_code == 2 and "no rollout with trace_id 'trace_nope'" in flat(out.stderr)
    out = invoke("show", str(tmp_path))
    assert out.exit_code == 2 and "is not an arft run directory" in flat(out.stderr)
