"""bench/behaviour.py: the claims' arithmetic per seed, and finished runs read back, not retrained."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from bench import behaviour

ROOT = Path(__file__).resolve().parents[3]
BEH = behaviour


def fig(**kw: Any) -> dict[str, Any]:
    base = {"reward": 0.5, "parallel_turn_share": 0.2, "critical_path_mean_s": 1.0, "critical_path_p95_s": 2.0,
            "calls_p95": 8.0}
    return {**base, **kw}


def test_parallel_claims_judge_share_mean_and_p95_path_and_reward_apart() -> None:
    before = fig()
    c = BEH.parallel_claims(before, fig(parallel_turn_share=0.4, critical_path_mean_s=0.7,
                                        critical_path_p95_s=1.0, reward=0.5), 0.0)
    assert c == {"parallel turn share rises >= 2x": True, "critical path (mean) falls >= 2x": False,
                 "critical path (p95) falls >= 2x": True, "reward equal or better": True}
    worse = BEH.parallel_claims(before, fig(reward=0.45), 0.0)
    assert not worse["reward equal or better"]
    assert BEH.parallel_claims(before, fig(reward=0.45), 0.1)["reward equal or better"]
    # from no parallel turn at all, any parallel turn is a rise
    assert BEH.parallel_claims(fig(parallel_turn_share=0.0), fig(parallel_turn_share=0.1), 0.0)[
        "parallel turn share rises >= 2x"]


def test_tail_claims_need_a_baseline_tail_of_four_that_halves() -> None:
    assert BEH.tail_claims(fig(calls_p95=8.0), fig(calls_p95=4.0), 0.0) == {
        "baseline calls p95 >= 4": True, "calls p95 falls >= 2x": True, "reward equal or better": True}
    short = BEH.tail_claims(fig(calls_p95=3.0), fig(calls_p95=1.0), 0.0)
    assert not short["baseline calls p95 >= 4"] and short["calls p95 falls >= 2x"]


def test_a_claim_holds_only_if_every_seed_holds_it_and_figures_spread() -> None:
    runs = [{"before": fig(), "after": fig(reward=r), "claims": {"c": ok}} for r, ok in ((0.6, True), (0.8, False))]
    for r in runs:
        r["before"].update(rounds_mean=1.0, calls_mean=1.0)
        r["after"].update(rounds_mean=1.0, calls_mean=1.0)
    agg = BEH.aggregate(runs)
    assert agg["claims"] == {"c": False}
    assert agg["figures"]["reward"]["after"]["mean"] == pytest.approx(0.7)
    assert agg["figures"]["reward"]["after"]["min"] == 0.6 and agg["figures"]["reward"]["after"]["max"] == 0.8


def test_a_finished_run_is_read_back_only_when_it_trained_the_steps_asked(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BEH.CASE_STUDY, "OUT", tmp_path)
    out = tmp_path / "case_long_tail-behaviour-seed7"
    out.mkdir()
    assert BEH.finished_run("long_tail", "behaviour-seed7", None) is None  # nothing there yet
    (out / "result.json").write_text(json.dumps({"steps": 6, "wall_s": 1.0, "run_dir": str(out / "run")}))
    assert BEH.finished_run("long_tail", "behaviour-seed7", None)["steps"] == 6  # the job's own 6 steps
    assert BEH.finished_run("long_tail", "behaviour-seed7", 3) is None  # asked for another length
    calls: list[argparse.Namespace] = []
    monkeypatch.setattr(BEH.CASE_STUDY, "run", lambda env, ns: calls.append(ns) or {
        "steps": 6, "wall_s": 1.0, "run_dir": str(out / "run")})
    monkeypatch.setattr(BEH, "before_after", lambda d: (fig(), fig(reward=0.9), 6))
    ns = argparse.Namespace(steps=None, eval_tasks=None, reward_tolerance=0.0, retrain=False, set=None)
    BEH.run_seed("long_tail", 7, ns)
    assert calls == []  # read back
    BEH.run_seed("long_tail", 7, argparse.Namespace(**{**vars(ns), "retrain": True}))
    assert len(calls) == 1 and calls[0].seed == 7 and calls[0].tag == "behaviour-seed7"


def test_a_variant_sets_a_job_field_validated_and_runs_in_its_own_folders() -> None:
    from arft.config import load_job

    job = load_job(ROOT / "examples" / "long_tail" / "job.yaml")
    changed = BEH.CASE_STUDY.with_setting(job, "training.dynamic_sampling=2")
    assert changed.training.dynamic_sampling == 2 and job.training.dynamic_sampling == 0
    assert changed.training.group_size == job.training.group_size
    for bad in ("training.dynamic_sampling=99", "training.no_such_field=1", "dynamic_sampling=2"):
        with pytest.raises((SystemExit, ValueError)):
            BEH.CASE_STUDY.with_setting(job, bad)
    assert BEH.variant(None) == "" and BEH.variant(["training.dynamic_sampling=2"]) == "-training.dynamic_sampling-2"
