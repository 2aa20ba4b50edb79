"""The report's figures: PNG bytes when there is data, None when there is none (never an empty
or all-zero chart), and missing steps left as gaps."""

from __future__ import annotations

import io
import math

from arft.records import Score
from arft.report import plots
from arft.metrics.summary import EvalSummary, summarize
from tests.unit.tracing.factories import make_rollout

PNG = b"\x89PNG\r\n\x1a\n"


def _summary(reward: float, n_calls: int, *, subs: bool = True, tokens: int = 30) -> EvalSummary:
    rollouts = [make_rollout(f"t{i}", score=Score(score=reward, sub_scores={"f1": reward, "style": 1.0}
                                                  if subs else {}),
                             calls=[("search", 0)] * (n_calls + i) + [("read", 1)], failing={0},
                             n_tokens=tokens)
                for i in range(3)]
    return summarize(rollouts)


def _size(png: bytes) -> tuple[int, int]:
    from PIL import Image

    return Image.open(io.BytesIO(png)).size


def test_every_figure_draws_a_png_from_recorded_data() -> None:
    train = {1: _summary(0.2, 6), 2: _summary(0.5, 4), 3: _summary(0.9, 2)}
    evals = {0: _summary(0.1, 12), 3: _summary(0.8, 2)}
    figures = {
        "reward": plots.reward_curve(train, evals),
        "subs": plots.sub_score_curves(train, evals),
        "hist": plots.tool_call_histograms([("baseline", evals[0]), ("latest", evals[3])]),
        "usage": plots.tool_usage(train),
        "health": plots.tool_health(evals[0], train),
        "tokens": plots.token_curves(train, evals),
        "grid": plots.metric_grid({"update/kl": {1: 0.1, 2: 0.2, 3: 0.15},
                                   "update/lr": {1: 1e-4, 2: 1e-4, 3: 5e-5}}, {"update/kl": "KL"}),
    }
    for name, png in figures.items():
        assert png is not None and png.startswith(PNG), name
        width, height = _size(png)
        assert 400 < width < 1400 and 200 < height < 1400, (name, width, height)
    # two panels side by side are wider than one
    one = plots.tool_call_histograms([("only", evals[0])])
    assert one is not None and _size(one)[0] < _size(figures["hist"])[0]  # type: ignore[arg-type]


def test_no_data_means_no_figure() -> None:
    empty = summarize([])
    no_tools = summarize([make_rollout("t", score=Score(score=1.0))])  # no tokens, no calls
    assert plots.reward_curve({}, {}) is None
    assert plots.sub_score_curves({1: _summary(0.5, 1, subs=False)}, {}) is None
    assert plots.tool_call_histograms([("empty", empty)]) is None
    assert plots.tool_usage({1: no_tools}) is None
    assert plots.tool_health(no_tools, {1: no_tools}) is None
    assert plots.token_curves({1: no_tools}, {0: no_tools}) is None
    assert plots.metric_grid({}) is None
    assert plots.metric_grid({"update/kl": {1: math.nan, 2: math.nan}}) is None


def test_ungraded_steps_are_left_out_of_the_reward_curve() -> None:
    ungraded = summarize([make_rollout("t", calls=[("search", 0)], n_tokens=10)])
    assert ungraded.reward.mean is None
    assert plots.reward_curve({1: ungraded}, {}) is None  # nothing graded: no curve, not a 0
    assert plots.reward_curve({1: ungraded, 2: _summary(0.5, 1)}, {}) is not None


def test_missing_steps_are_gaps_not_bridged() -> None:
    xs, ys = plots.gapped({2: 0.5, 3: 0.4, 5: 0.3})
    assert xs == [2, 3, 4, 5]
    assert ys[:2] == [0.5, 0.4] and math.isnan(ys[2]) and ys[3] == 0.3
    assert plots.gapped({}) == ([], [])
    assert plots.metric_grid({"update/entropy": {2: 0.5, 3: 0.4, 5: 0.3}}) is not None
