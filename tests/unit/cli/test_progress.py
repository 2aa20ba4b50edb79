"""`arft train`'s live display: an evaluation's bar beside a step's, each counting its own rollouts."""

from __future__ import annotations

import io

from rich.console import Console

from arft.cli.progress import RolloutProgress, TrainDisplay
from arft.metrics.summary import summarize
from arft.records import Rollout, Score
from tests.unit.tracing.factories import make_rollout


def rollout(run_id: str, step: int, reward: float) -> Rollout:
    return make_rollout(run_id=run_id, score=Score(score=reward)).model_copy(update={"step": step})


def test_an_evaluation_and_the_next_steps_rollouts_count_on_their_own_bars() -> None:
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=False)
    with TrainDisplay(console) as display:
        hooks = display.hooks()
        hooks.phase("eval @ step 5", 2)
        hooks.phase("step 6/10", 3)
        bars = display._bars
        assert bars is not None
        hooks.rollout_done(rollout("train", 6, 1.0))
        hooks.rollout_done(rollout("train:eval-000005", 5, 0.0))
        hooks.rollout_done(rollout("train", 6, 0.0))
        hooks.rollout_done(rollout("train:eval-000005", 5, 0.0))
        counts = {t.description: (t.completed, t.fields["extra"]) for t in bars._progress.tasks}
        assert counts == {"eval @ step 5": (2, "reward 0.000"), "step 6/10": (2, "reward 0.500")}
        hooks.eval_done(5, summarize([rollout("train:eval-000005", 5, 0.0)] * 2))
        assert [t.description for t in bars._progress.tasks] == ["step 6/10"]  # the step's bar runs on
        hooks.phase("step 6/10: 1 more tasks for groups of equal rewards", 1)  # replaces the step's bar
        assert [t.description for t in bars._progress.tasks] == ["step 6/10: 1 more tasks for groups of equal rewards"]
    text = out.getvalue()
    assert "eval @ step 5" in text and "2/2" in text  # the finished bar was printed as it ended


def test_a_single_bar_display_still_needs_no_bar_argument_and_a_bare_one_says_what_to_pass() -> None:
    console = Console(file=io.StringIO(), width=120)
    with RolloutProgress(console, total=1) as progress:
        progress.status("running")
        progress.done(rollout("r", 0, 1.0))
    bare = RolloutProgress(console)
    try:
        bare.status("x")
    except ValueError as e:
        assert "pass the bar that add() returned" in str(e)
    else:
        raise AssertionError("a display without a bar of its own accepted status() without a bar")
