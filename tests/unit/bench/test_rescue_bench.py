"""bench/rescue.py's page text, read from a finished run's figures (no training here)."""

from __future__ import annotations

from typing import Any

import pytest

from bench import rescue


def run(extra_rl: dict[str, float] | None, extra_hint: dict[str, float] | None) -> dict[str, Any]:
    def arm(last: float, extra: dict[str, float] | None) -> dict[str, Any]:
        final = {"reward": last, **({"extra": extra} if extra is not None else {})}
        return {"wall_s": 60.0, "evals": {"0": {"reward": 0.0}, "10": final},
                "steps": {"1": {"train/groups": 4, "train/groups_dropped": 4, "train/groups_rescued": 1}}}

    return {"env": "code_qa", "hint": "Call search", "unhinted": "baseline",
            "repeats": [{"seed": 42, "arms": {"rl": arm(0.0, extra_rl), "none": arm(0.5, extra_hint)}}]}


def test_the_summary_shows_each_arms_own_figures_on_the_last_eval() -> None:
    res = run({"fact recall (mean)": 0.0, "answers pasting raw tool output": 0.78},
              {"fact recall (mean)": 0.56, "answers pasting raw tool output": 1.0})
    table = rescue.extra_table(res)
    assert table.splitlines()[0] == "| arm | fact recall (mean) | answers pasting raw tool output |"
    assert "| rl | 0.00 | 0.78 |" in table and "| none | 0.56 | 1.00 |" in table
    text = rescue.summary(res)
    assert "rescue - RL alone: +50 pts (none; goal +30)" in text
    assert text.endswith(table)


def test_an_arm_without_a_figure_leaves_its_cell_empty_and_no_figures_no_table() -> None:
    table = rescue.extra_table(run({"a": 0.25}, {"a": 0.5, "b": 1.0}))
    assert "| rl | 0.25 |  |" in table and "| none | 0.50 | 1.00 |" in table
    res = run(None, None)
    assert rescue.extra_table(res) == ""
    assert "own figures" not in rescue.summary(res)


def test_repeated_seeds_give_the_mean_gain_and_each_seeds() -> None:
    first, second = run(None, None), run(None, None)
    second_arms = second["repeats"][0]["arms"]
    second_arms["none"]["evals"]["10"]["reward"] = 0.2  # +20 on the second seed, +50 on the first
    res = {**first, "repeats": [*first["repeats"], {"seed": 43, "arms": second_arms}]}
    text = rescue.verdict(res)
    assert text.startswith("code_qa (seed 42): eval reward 0.00 untrained")
    assert text.endswith("rescue - RL alone: +35 pts on average over 2 seeds (none; +50 (seed 42), +20 (seed 43); "
                         "goal +30)")
    table = rescue.repeat_table(res)
    assert table.splitlines()[2:] == ["| 42 | 0.000 | 0.500 (1 rescued) |", "| 43 | 0.000 | 0.200 (1 rescued) |",
                                      "| mean | 0.000 | 0.350 |"]
    assert table in rescue.summary(res) and rescue.repeat_table(first) == ""


def test_the_calculators_verdict_names_its_own_goal() -> None:
    res = {**run(None, None), "env": "calculator"}  # hints must not hurt where RL already learns
    assert rescue.verdict(res).endswith("rescue - RL alone: +50 pts (none; goal: not below RL alone)")


def test_repeats_must_be_a_whole_number_of_at_least_one(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("0", "-1", "two"):
        with pytest.raises(SystemExit):
            rescue.main(["calculator", "--repeats", bad])
        assert "is not a whole number of at least 1" in capsys.readouterr().err
